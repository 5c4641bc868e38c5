package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/keepalive"

	"github.com/ragtail/ragtail/loadgen/lab"
	"github.com/ragtail/ragtail/rag/link"
	"github.com/ragtail/ragtail/rag/retrieve/qdranttest"
	"github.com/ragtail/ragtail/rag/service"
)

// The keepalive experiment's world. The article's server settings (MaxConnectionAge 30 min,
// grace 5 min, ping 10 s, timeout 3 s) are scaled by 1/900 so that a run of seconds sees several
// forced reconnects: age 2 s, grace 333 ms. The ping scaled the same would be 11 ms, below the
// 1 s gRPC raises any server ping interval to, so it is 1 s, and the timeout keeps the article's
// 3:10 ratio to it.
var keepaliveServer = keepalive.ServerParameters{
	MaxConnectionAge:      2 * time.Second,
	MaxConnectionAgeGrace: 5 * time.Minute / 900,
	Time:                  time.Second,
	Timeout:               300 * time.Millisecond,
}

// keepaliveLinkRTTs are the round trips of the links between the service and its Qdrant-protocol
// servers: across a zone, and across a region.
var keepaliveLinkRTTs = []time.Duration{2 * time.Millisecond, 20 * time.Millisecond}

// keepaliveAnswerPadding makes each Query answer 256 KiB larger: four of a fresh HTTP/2
// connection's 64 KiB flow-control windows, each reopened by a WINDOW_UPDATE one round trip
// later, where a warmed connection's window (grown by gRPC's BDP estimate) takes it at once.
const keepaliveAnswerPadding = 256 << 10

// startKeepaliveArms starts, for each link round trip, two Qdrant-protocol servers over TLS
// with a self-signed certificate (one sending GOAWAY at keepaliveServer's MaxConnectionAge, one
// never), ingests the built-in corpus into each, and serves a service retrieving from each
// through a link of that round trip, on loopback. The services take base's engine profile,
// corpus size and seed.
func startKeepaliveArms(ctx context.Context, base service.Config) (arms []lab.KeepaliveArm, stop func() error, err error) {
	var stops []func() error
	stop = func() error {
		var errs []error
		for i := len(stops) - 1; i >= 0; i-- {
			errs = append(errs, stops[i]())
		}
		return errors.Join(errs...)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, stop())
		}
	}()
	serverTLS, roots, err := qdranttest.SelfSigned("127.0.0.1")
	if err != nil {
		return nil, nil, err
	}
	for _, rtt := range keepaliveLinkRTTs {
		for _, age := range []time.Duration{keepaliveServer.MaxConnectionAge, 0} {
			opts := []qdranttest.Option{qdranttest.WithTLS(serverTLS), qdranttest.WithAnswerPadding(keepaliveAnswerPadding)}
			name := fmt.Sprintf("%v link, no max-age", rtt)
			if age > 0 {
				name = fmt.Sprintf("%v link, max-age %v", rtt, age)
				opts = append(opts, qdranttest.WithKeepaliveParams(keepaliveServer))
			}
			srv, err := qdranttest.Start(opts...)
			if err != nil {
				return nil, nil, fmt.Errorf("start qdrant-protocol server: %w", err)
			}
			stops = append(stops, func() error { srv.Close(); return nil })
			cfg := service.DefaultConfig()
			cfg.Profile, cfg.CorpusDocs, cfg.Seed = base.Profile, base.CorpusDocs, base.Seed
			cfg.Shards = 1
			cfg.Backends.Qdrant.Addr, cfg.Backends.Qdrant.TLS, cfg.Backends.Qdrant.RootCAs = srv.Addr(), true, roots
			in := service.DefaultIngestConfig()
			in.Shards, in.Backends, in.CorpusDocs, in.Seed, in.Dim = cfg.Shards, cfg.Backends, cfg.CorpusDocs, cfg.Seed, cfg.Dim
			if _, err := service.Ingest(ctx, in, nil); err != nil {
				return nil, nil, fmt.Errorf("ingest into %s: %w", srv.Addr(), err)
			}
			cfg.Links = map[string]link.Spec{"qdrant": {Latency: rtt}}
			stopSvc, t, err := startLabService(ctx, cfg, newLogger(io.Discard, "error"))
			if err != nil {
				return nil, nil, err
			}
			stops = append(stops, stopSvc)
			if err := waitReady(ctx, t.URL); err != nil {
				return nil, nil, err
			}
			arms = append(arms, lab.KeepaliveArm{Name: name, MaxConnectionAge: age, LinkRTT: rtt, Target: t,
				Counters: func() map[string]float64 { return keepaliveCounters(srv.Stats()) }})
		}
	}
	return arms, stop, nil
}

// keepaliveCounters are the Qdrant-protocol server's counters the experiment reports.
func keepaliveCounters(st qdranttest.Stats) map[string]float64 {
	return map[string]float64{
		"connections":            float64(st.Connections),
		"goaway_max_age":         float64(st.GoAways["max_age"]),
		"tls_handshakes":         float64(st.TLSHandshakes),
		"tls_handshake_failures": float64(st.TLSHandshakeFailures),
		"tls_handshake_ms":       float64(st.TLSHandshakeTime) / float64(time.Millisecond),
	}
}
