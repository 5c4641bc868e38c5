package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
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
			"Without --url it starts the service in-process on loopback ports.\n\nExperiments: "+lab.NamesList())
	fs.StringVar(&o.url, "url", "", "API base URL of a running service (default: start one in-process)")
	fs.StringVar(&o.adminURL, "admin-url", "", "admin base URL of that service (needed with --url)")
	fs.StringVar(&o.adminToken, "admin-token", "", "admin token for PUT /admin/config (default $RAGTAIL_ADMIN_TOKEN)")
	fs.DurationVar(&o.duration, "duration", 0, "load time of each experiment, split among its variants (default: per experiment, 28-165 s; an experiment sized by a power calculation runs what its rule needs within bounds drawn from it)")
	fs.BoolVar(&o.quick, "quick", false, "a first look: each experiment runs a quarter of its default duration, fewer samples than most rules ask, so most verdicts come out underpowered")
	fs.StringVar(&o.jsonFile, "json", "", "write the ragtail.lab/v1 result to this file (an array for all)")
	fs.StringVar(&o.htmlFile, "html", "", "write a self-contained HTML page of the tables to this file")
	o.service.register(fs)
	o.service.cfg.Backends.RegisterFlags(fs, os.Getenv) // --docstore postgres://, --cache redis://, ...: the lab's world on real parts
	names, err := parseFlagsAndArgs(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(names) != 1 {
		fmt.Fprintf(stderr, "ragtail lab: want one experiment name or all (%s)\n", lab.NamesList())
		return errUsage
	}
	run, err := lab.Expand(names[0])
	if err != nil {
		fmt.Fprintf(stderr, "ragtail lab: %v\n", err)
		return errUsage
	}
	if o.adminToken == "" {
		o.adminToken = os.Getenv("RAGTAIL_ADMIN_TOKEN") // not the flag's default: --help would print it
	}
	if (o.url == "") != (o.adminURL == "") {
		fmt.Fprintln(stderr, "ragtail lab: --url and --admin-url go together (the lab sets toggles through the admin API)")
		return errUsage
	}
	lo := lab.Options{Duration: o.duration, Quick: o.quick, Seed: o.service.cfg.Seed, Log: stderr}
	target := lab.Target{URL: o.url, AdminURL: o.adminURL, AdminToken: o.adminToken}
	if o.url == "" {
		stop, err := startLabWorld(ctx, o, run, &target, &lo)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, stop()) }()
	}
	results, err := lab.RunNames(ctx, run, target, lo, stdout)
	if len(results) > 0 {
		err = errors.Join(err, lab.WriteFiles(results, o.jsonFile, o.htmlFile))
	}
	return err
}

// startLabWorld starts, in-process on loopback ports, the service the experiments drive and the
// extra services some of them compare: the keepalive experiment's arms and the knee
// experiment's Llama-3-8B engine with the article's settings. Their logs are discarded: they
// would bury the tables (every shed request is an error line), their failures show in the
// measurements, and startup errors are returned.
func startLabWorld(ctx context.Context, o labOptions, run []string, t *lab.Target, lo *lab.Options) (stop func() error, err error) {
	var stops lab.Closers
	defer func() {
		if err != nil {
			err = errors.Join(err, stops.Close())
		}
	}()
	quiet := newLogger(io.Discard, "error")
	cfg := o.service.config(true)
	if cfg.Backends.DocStore == "" && cfg.Backends.DocStoreConcurrency == 0 {
		// A store of finite capacity, so that lookups the cache lets through queue
		// (cache-penetration); --docstore-concurrency or --docstore postgres:// replace it.
		cfg.Backends.DocStoreConcurrency = lab.DefaultStoreConcurrency
	}
	s, main, err := startLabService(ctx, cfg, quiet)
	if err != nil {
		return nil, err
	}
	stops.Add(s)
	*t = main
	if slices.Contains(run, "keepalive") {
		arms, s, err := startKeepaliveArms(ctx, o.service.config(false))
		if err != nil {
			return nil, fmt.Errorf("keepalive experiment setup: %w", err)
		}
		stops.Add(s)
		lo.Keepalive = arms
	}
	if slices.Contains(run, "knee") {
		lcfg := service.DefaultConfig()
		lcfg.Seed, lcfg.Profile = cfg.Seed, llamaKneeProfile
		lcfg.EngineArgs.MaxNumSeqs, lcfg.EngineArgs.MaxModelLen = 256, 4096 // the article's engine settings
		s, lt, err := startLabService(ctx, lcfg, quiet)
		if err != nil {
			return nil, fmt.Errorf("knee experiment setup (%s engine): %w", llamaKneeProfile, err)
		}
		stops.Add(s)
		lo.Llama = &lt
	}
	return stops.Close, nil
}

// llamaKneeProfile is the engine profile of the knee experiment's second arm.
const llamaKneeProfile = "llama3-8b-a100"

// startLabService builds the service and serves its API and admin handlers on loopback ports.
// Profiling is off: the lab's own measurements are what it reports.
func startLabService(ctx context.Context, cfg service.Config, logger *slog.Logger) (stop func() error, t lab.Target, err error) {
	svc, err := buildService(ctx, cfg, telemetryOptions{}, logger)
	if err != nil {
		return nil, t, err
	}
	t, stop, err = lab.Serve(ctx, svc.API, svc.Admin, svc.Close)
	return stop, t, err
}

// waitReady polls GET /readyz until the service is ready (the Qdrant retriever loads the doc
// store once it sees Qdrant), for at most 30 s.
func waitReady(ctx context.Context, base string) error {
	return lab.WaitReady(ctx, base, 30*time.Second)
}
