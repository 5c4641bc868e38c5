package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/ragtail/ragtail/rag/service"
)

type serveOptions struct {
	service   serviceOptions
	addr      string
	adminAddr string
	grace     time.Duration
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	var o serveOptions
	fs := newFlagSet("serve", "[flags]", `Runs the RAG service. With no flags it needs nothing else running: hash embedder, sharded
in-memory index seeded from the built-in corpus, doc store with LRU cache and Bloom guard, and the
simulated LLM engine (profile llama3-8b-a100).

API listener (--addr): POST /v1/chat/completions (OpenAI-compatible, streaming or not, with an
optional "rag": {"coupling": "sync|fanout|async", "top_k": 5} object), GET /v1/models,
GET /v1/documents/{id}, GET /healthz, GET /readyz. Every response carries traceparent,
Server-Timing and X-Ragtail-Time (the service's clock, Unix nanoseconds).
Admin listener (--admin-addr): GET /metrics (OpenMetrics with trace_id exemplars on request),
/debug/pprof/*, GET /debug/traces (recent traces, ?slowest=N, ?trace_id=X, with per-stage
waterfalls), GET /debug/profiles (profile windows; ?trace_id=X for what ran during a trace),
GET|PUT /admin/config, GET /admin/stats. On loopback (the default) reads are open to requests
addressed to localhost or a loopback IP (any other Host gets 403), and a PUT must be
application/json from the listener's own origin; off loopback every admin route needs
RAGTAIL_ADMIN_TOKEN as 'Authorization: Bearer TOKEN', and serve refuses to start without it.

Telemetry: every request is traced into an in-process ring; set OTEL_EXPORTER_OTLP_ENDPOINT to
export traces and metrics over OTLP (the standard OTEL_* variables apply), and
PYROSCOPE_SERVER_ADDRESS to push profiles to Pyroscope. RAGTAIL_CAPTURE_CONTENT=true records
prompts and answers on spans (off by default: only a hash of the question).

On SIGINT/SIGTERM it stops accepting requests and lets running streams finish for --shutdown-grace.`)
	fs.StringVar(&o.addr, "addr", ":8080", "API listen address")
	fs.StringVar(&o.adminAddr, "admin-addr", "127.0.0.1:9464", "admin listen address (metrics, pprof, traces, profiles, /admin/config); empty disables it.\nOff loopback every admin route needs RAGTAIL_ADMIN_TOKEN as 'Authorization: Bearer TOKEN',\nand serve refuses to start without it")
	fs.DurationVar(&o.grace, "shutdown-grace", 30*time.Second, "how long running requests may take to finish on shutdown")
	o.service.register(fs) // first: it sets cfg to the defaults the other flags start from
	o.service.telemetry.register(fs)
	o.service.cfg.Backends.RegisterFlags(fs, os.Getenv)
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	logger := newLogger(stderr, o.service.logLevel)
	cfg := o.service.config(true)
	cfg.AdminAddr = o.adminAddr
	svc, err := buildService(ctx, cfg, o.service.telemetry, logger)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, svc.Close()) }()

	api, err := listen(ctx, o.addr)
	if err != nil {
		return fmt.Errorf("listen on --addr %s: %w", o.addr, err)
	}
	servers := []*http.Server{service.NewServer(svc.API, service.DefaultTimeouts, logger)}
	listeners := []net.Listener{api}
	adminAddr := "off"
	if o.adminAddr != "" {
		admin, err := listen(ctx, o.adminAddr)
		if err != nil {
			_ = api.Close()
			return fmt.Errorf("listen on --admin-addr %s: %w", o.adminAddr, err)
		}
		servers = append(servers, service.NewServer(svc.Admin, service.DefaultTimeouts, logger))
		listeners = append(listeners, admin)
		adminAddr = "http://" + admin.Addr().String()
	}
	logger.Info("ragtail serving", "api", api.Addr().String(), "admin", adminAddr, "model", svc.Model,
		"profile", svc.Profile, "shards", svc.Shards, "chunks", svc.Chunks)
	fmt.Fprintf(stdout, "ragtail serving the API on http://%s (model %q); admin on %s\n", api.Addr(), svc.Model, adminAddr)
	return service.Serve(ctx, servers, listeners, o.grace, logger)
}
