package qdranttest

import (
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"time"
)

// HTTP/2 frame layout (RFC 9113 section 4.1): a 9-byte header of 24-bit length, 8-bit type,
// 8-bit flags and 31-bit stream id, then the payload. A GOAWAY frame (type 0x7) carries the last
// stream id (4 bytes), the error code (4 bytes) and opaque debug data, where gRPC writes its
// reason: "too_many_pings" with ENHANCE_YOUR_CALM, "max_age" or "graceful_stop" with NO_ERROR.
const (
	frameHeaderLen = 9
	frameGoAway    = 0x7
	// maxDebug bounds the debug data kept per GOAWAY; gRPC's reasons are a few bytes.
	maxDebug = 64
)

// HTTP/2 error codes that appear in GOAWAY frames gRPC servers send.
const (
	codeNoError         = 0x0
	codeEnhanceYourCalm = 0xb
)

// frameScanner follows the HTTP/2 frames a server writes on one connection, byte stream in,
// and reports each GOAWAY. It is fed in arbitrary pieces and keeps no more than one frame
// header and a GOAWAY's first bytes.
type frameScanner struct {
	header    [frameHeaderLen]byte
	have      int    // header bytes collected for the current frame
	remaining uint32 // payload bytes of the current frame still to come
	goAway    []byte // the current GOAWAY's payload so far, up to 8+maxDebug bytes
	inGoAway  bool
	onGoAway  func(code uint32, debug string)
}

// Write consumes p; it never fails.
func (f *frameScanner) Write(p []byte) {
	for len(p) > 0 {
		if f.have < frameHeaderLen {
			n := copy(f.header[f.have:], p)
			f.have += n
			p = p[n:]
			if f.have < frameHeaderLen {
				return
			}
			f.remaining = uint32(f.header[0])<<16 | uint32(f.header[1])<<8 | uint32(f.header[2])
			f.inGoAway = f.header[3] == frameGoAway
			f.goAway = f.goAway[:0]
			if f.remaining == 0 {
				f.endFrame()
			}
			continue
		}
		n := min(uint32(len(p)), f.remaining)
		if f.inGoAway && len(f.goAway) < 8+maxDebug {
			keep := min(int(n), 8+maxDebug-len(f.goAway))
			f.goAway = append(f.goAway, p[:keep]...)
		}
		f.remaining -= n
		p = p[n:]
		if f.remaining == 0 {
			f.endFrame()
		}
	}
}

func (f *frameScanner) endFrame() {
	if f.inGoAway && len(f.goAway) >= 8 && f.onGoAway != nil {
		f.onGoAway(binary.BigEndian.Uint32(f.goAway[4:8]), string(f.goAway[8:]))
	}
	f.have, f.inGoAway = 0, false
}

// goAwayReason names a GOAWAY for Stats: its debug data when there is any, else its code.
func goAwayReason(code uint32, debug string) string {
	if debug != "" {
		return debug
	}
	switch code {
	case codeNoError:
		return "no_error"
	case codeEnhanceYourCalm:
		return "enhance_your_calm"
	}
	return fmt.Sprintf("error_0x%x", code)
}

// watchedListener counts accepted connections and watches what the server writes on them.
type watchedListener struct {
	net.Listener
	s *Server
}

func (l *watchedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.s.connections.Add(1)
	wc := &watchedConn{Conn: c}
	if tc, ok := c.(*tls.Conn); ok {
		wc.tls = &handshakeTimer{conn: tc, accepted: time.Now(), done: l.s.countHandshake}
	}
	seen := map[string]bool{}
	wc.scan.onGoAway = func(code uint32, debug string) {
		// gRPC drains with two GOAWAYs (a heads-up, then the final one); count a reason once
		// per connection.
		reason := goAwayReason(code, debug)
		if !seen[reason] {
			seen[reason] = true
			l.s.countGoAway(reason)
		}
	}
	return wc, nil
}

// watchedConn feeds every byte the server writes to a frameScanner, and times the TLS
// handshake of a TLS connection. gRPC writes from one goroutine per connection, but the mutex
// keeps the scanner safe if that ever changes.
type watchedConn struct {
	net.Conn
	tls  *handshakeTimer // nil without TLS
	mu   sync.Mutex
	scan frameScanner
}

func (c *watchedConn) Read(p []byte) (int, error) {
	if c.tls != nil {
		if err := c.tls.handshake(); err != nil {
			return 0, err
		}
	}
	return c.Conn.Read(p)
}

func (c *watchedConn) Write(p []byte) (int, error) {
	if c.tls != nil {
		if err := c.tls.handshake(); err != nil {
			return 0, err
		}
	}
	n, err := c.Conn.Write(p)
	c.mu.Lock()
	c.scan.Write(p[:n])
	c.mu.Unlock()
	return n, err
}
