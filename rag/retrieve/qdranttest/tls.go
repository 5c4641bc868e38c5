package qdranttest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"sync"
	"time"
)

// handshakeTimeout bounds a TLS handshake the server runs; a client that stalls longer is cut.
const handshakeTimeout = 10 * time.Second

// SelfSigned makes a self-signed certificate for the IP addresses and host names of hosts (for
// example "127.0.0.1"), valid for a day, and returns the server's TLS configuration holding it
// with the pool a client verifies it against. The key is ECDSA P-256, made in process.
func SelfSigned(hosts ...string) (server *tls.Config, roots *x509.CertPool, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("qdranttest: certificate key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "qdranttest"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("qdranttest: certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("qdranttest: certificate: %w", err)
	}
	roots = x509.NewCertPool()
	roots.AddCert(leaf)
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}, roots, nil
}

// handshakeTimer runs a TLS connection's handshake once, before its first read or write, and
// reports how long it took from the moment the connection was accepted: the round trips the
// handshake needs, as the server sees them (its flight must reach the client, and the client's
// Finished come back, before it completes).
type handshakeTimer struct {
	conn     *tls.Conn
	accepted time.Time
	once     sync.Once
	err      error
	done     func(d time.Duration, err error)
}

func (h *handshakeTimer) handshake() error {
	h.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
		defer cancel()
		h.err = h.conn.HandshakeContext(ctx)
		h.done(time.Since(h.accepted), h.err)
	})
	return h.err
}

func (s *Server) countHandshake(d time.Duration, err error) {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	if err != nil {
		s.handshakeFailures++
		return
	}
	s.handshakes++
	s.handshakeTime += d
}
