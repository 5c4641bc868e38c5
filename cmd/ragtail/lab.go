package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/ragtail/ragtail/loadgen/lab"
	"github.com/ragtail/ragtail/rag/service"
)

type labOptions struct {
	url, adminURL, adminToken string
	duration                  time.Duration
	quick                     bool
	jsonFile, htmlFile        string
	service                   serviceOptions
}

// runLab runs one pitfall experiment, or all of them, and prints measured vs claimed figures.
func runLab(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	var o labOptions
	fs := newFlagSet("lab", "NAME|all [flags]",
		"Runs a pitfall experiment of PITFALLS.md A/B: switches the mechanism off and on through\n"+
			"PUT /admin/config, drives the service with the open-loop generator, and prints the\n"+
			"article's claim beside our measurement (95% intervals) with a verdict computed from it by\n"+
			"the experiment's rule, fixed before the run (see PITFALLS.md).\n"+
			"Without --url it starts the service in-process on loopback ports.\n\nExperiments: "+joinNames())
	fs.StringVar(&o.url, "url", "", "API base URL of a running service (default: start one in-process)")
	fs.StringVar(&o.adminURL, "admin-url", "", "admin base URL of that service (needed with --url)")
	fs.StringVar(&o.adminToken, "admin-token", os.Getenv("RAGTAIL_ADMIN_TOKEN"), "admin token for PUT /admin/config (default $RAGTAIL_ADMIN_TOKEN)")
	fs.DurationVar(&o.duration, "duration", 0, "load time of each experiment, split among its variants (default: per experiment, 30-60 s)")
	fs.BoolVar(&o.quick, "quick", false, "a first look: each experiment runs a quarter of its default duration (wider intervals, more undecided verdicts)")
	fs.StringVar(&o.jsonFile, "json", "", "write the ragtail.lab/v1 result to this file (an array for all)")
	fs.StringVar(&o.htmlFile, "html", "", "write a self-contained HTML page of the tables to this file")
	o.service.register(fs)
	names, err := parseFlagsAndArgs(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(names) != 1 {
		fmt.Fprintf(stderr, "ragtail lab: want one experiment name or all (%s)\n", joinNames())
		return errUsage
	}
	run := []string{names[0]}
	if names[0] == "all" {
		run = lab.Names()
	} else if lab.DefaultDuration(names[0]) == 0 {
		fmt.Fprintf(stderr, "ragtail lab: unknown experiment %q: want one of %s, or all\n", names[0], joinNames())
		return errUsage
	}
	if (o.url == "") != (o.adminURL == "") {
		fmt.Fprintln(stderr, "ragtail lab: --url and --admin-url go together (the lab sets toggles through the admin API)")
		return errUsage
	}
	target := lab.Target{URL: o.url, AdminURL: o.adminURL, AdminToken: o.adminToken}
	if o.url == "" {
		// The in-process service's logs would bury the tables (every shed request is an error
		// line); its failures show in the measurements and its startup errors are returned.
		cfg := o.service.config(false)
		if cfg.Backends.DocStore == "" && cfg.Backends.DocStoreConcurrency == 0 {
			// A store of finite capacity, so that lookups the cache lets through queue
			// (cache-penetration); --docstore-concurrency or --docstore postgres:// replace it.
			cfg.Backends.DocStoreConcurrency = lab.DefaultStoreConcurrency
		}
		stop, t, err := startLabService(ctx, cfg, newLogger(io.Discard, "error"))
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, stop()) }()
		target = t
	}
	var keepalive []lab.KeepaliveArm
	if o.url == "" && (names[0] == "all" || names[0] == "keepalive") {
		arms, stopArms, err := startKeepaliveArms(ctx, o.service.config(false))
		if err != nil {
			return fmt.Errorf("keepalive experiment setup: %w", err)
		}
		defer func() { err = errors.Join(err, stopArms()) }()
		keepalive = arms
	}
	var results []*lab.Result
	defer func() {
		if len(results) > 0 {
			err = errors.Join(err, writeLabFiles(o, results))
		}
	}()
	for _, name := range run {
		lo := lab.Options{Duration: o.duration, Quick: o.quick, Seed: o.service.cfg.Seed, Log: stderr, Keepalive: keepalive}
		fmt.Fprintf(stderr, "lab %s: running (%v of load)\n", name, lab.LoadDuration(name, lo))
		res, rerr := lab.Run(ctx, name, target, lo)
		if rerr != nil {
			return rerr
		}
		results = append(results, res)
		if err := lab.WriteText(stdout, res); err != nil {
			return err
		}
	}
	if len(results) > 1 {
		return lab.WriteSummary(stdout, results)
	}
	return nil
}

func joinNames() string {
	s := ""
	for i, n := range lab.Names() {
		if i > 0 {
			s += ", "
		}
		s += n
	}
	return s
}

func writeLabFiles(o labOptions, results []*lab.Result) error {
	var errs []error
	if o.jsonFile != "" {
		var v any = results
		if len(results) == 1 {
			v = results[0]
		}
		b, err := json.MarshalIndent(v, "", "  ")
		if err == nil {
			err = os.WriteFile(o.jsonFile, append(b, '\n'), 0o644)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("write %s: %w", o.jsonFile, err))
		}
	}
	if o.htmlFile != "" {
		f, err := os.Create(o.htmlFile)
		if err == nil {
			err = errors.Join(lab.WriteHTML(f, results), f.Close())
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("write %s: %w", o.htmlFile, err))
		}
	}
	return errors.Join(errs...)
}

// startLabService builds the service and serves its API and admin handlers on loopback ports.
// Profiling is off: the lab's own measurements are what it reports.
func startLabService(ctx context.Context, cfg service.Config, logger *slog.Logger) (stop func() error, t lab.Target, err error) {
	svc, err := buildService(ctx, cfg, telemetryOptions{}, logger)
	if err != nil {
		return nil, t, err
	}
	var servers []*http.Server
	var addrs []string
	for _, h := range []http.Handler{svc.API, svc.Admin} {
		ln, lerr := listen(ctx, "127.0.0.1:0")
		if lerr != nil {
			for _, s := range servers {
				_ = s.Close()
			}
			return nil, t, errors.Join(fmt.Errorf("listen on loopback: %w", lerr), svc.Close())
		}
		srv := service.NewServer(h, service.DefaultTimeouts, logger)
		go func() { _ = srv.Serve(ln) }()
		servers = append(servers, srv)
		addrs = append(addrs, "http://"+ln.Addr().String())
	}
	stop = func() error {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var errs []error
		for _, s := range servers {
			errs = append(errs, s.Shutdown(sctx))
		}
		return errors.Join(append(errs, svc.Close())...)
	}
	return stop, lab.Target{URL: addrs[0], AdminURL: addrs[1]}, nil
}

// waitReady polls GET /readyz until the service is ready (the Qdrant retriever loads the doc
// store once it sees Qdrant), for at most 30 s.
func waitReady(ctx context.Context, base string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("service at %s not ready: %w", base, ctx.Err())
		case <-tick.C:
		}
	}
}
