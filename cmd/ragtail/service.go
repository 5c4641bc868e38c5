package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ragtail/ragtail/internal/redact"
	"github.com/ragtail/ragtail/rag/service"
	"github.com/ragtail/ragtail/telemetry"
	"github.com/ragtail/ragtail/telemetry/profile"
)

// serviceOptions are the flags of the RAG service, shared by serve, demo and lab: the
// service's Config plus what only the command line has. serve adds the telemetry and backend
// flags.
type serviceOptions struct {
	fs        *flag.FlagSet // the flags registered, to tell which were set
	cfg       service.Config
	logLevel  string
	telemetry telemetryOptions
}

// telemetryOptions are the telemetry flags of serve. The zero value, which demo uses, traces
// into the in-process ring and serves metrics, with no profiler and no trace file; the OTEL_*
// and PYROSCOPE_* environment variables apply either way.
type telemetryOptions struct {
	traceFile     string
	profiling     bool
	profileWindow time.Duration
	profileKeep   int
	wallRate      float64
}

func (o *telemetryOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.traceFile, "trace-file", "", "append every span as a JSON line to this file (for offline analysis)")
	fs.BoolVar(&o.profiling, "profiling", true, "run the built-in continuous profiler (profiles on /debug/profiles; pushed to\nPYROSCOPE_SERVER_ADDRESS when set)")
	fs.DurationVar(&o.profileWindow, "profile-window", profile.DefaultWindow, "length of the profile windows pushed to PYROSCOPE_SERVER_ADDRESS (the in-process store keeps\n1 s windows)")
	fs.IntVar(&o.profileKeep, "profile-keep", profile.DefaultKeep, "profile windows of each kind kept in memory")
	fs.Float64Var(&o.wallRate, "profile-wall-rate", profile.DefaultWallRate, "labelled goroutine snapshots per second for the wall-clock view (where requests waited);\nnegative turns it off")
}

func (o *serviceOptions) register(fs *flag.FlagSet) {
	o.cfg = service.DefaultConfig()
	o.cfg.RegisterFlags(fs)
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	o.fs = fs
}

// config returns the service's Config with the environment applied and, when withBackends,
// the backend flags completed (serve registers them; demo and lab run the embedded default).
func (o *serviceOptions) config(withBackends bool) service.Config {
	cfg := o.cfg
	if withBackends {
		cfg.Backends.FlagsParsed(o.fs, os.Getenv)
	}
	cfg.FlagsParsed(o.fs, os.Getenv)
	return cfg
}

// telemetryShutdownGrace bounds how long shutdown waits for queued spans and metrics to be
// exported.
const telemetryShutdownGrace = 5 * time.Second

// runningService is the service with the telemetry cmd set up for it.
type runningService struct {
	*service.Service
	telemetry *telemetry.Telemetry
	stop      []func() error
}

// Close closes the service, then stops the profiler and flushes telemetry. It is idempotent.
func (s *runningService) Close() error {
	var errs []error
	if s.Service != nil {
		errs = append(errs, s.Service.Close())
	}
	for i := len(s.stop) - 1; i >= 0; i-- {
		errs = append(errs, s.stop[i]())
	}
	s.stop = nil
	return errors.Join(errs...)
}

// buildService sets up telemetry (the OTel SDK from the OTEL_* variables, the in-process trace
// ring, the continuous profiler) and builds the service on it.
func buildService(ctx context.Context, cfg service.Config, to telemetryOptions, logger *slog.Logger) (_ *runningService, err error) {
	if to.profiling && to.profileWindow < profile.MinWindow {
		return nil, fmt.Errorf("--profile-window must be at least %v, got %v", profile.MinWindow, to.profileWindow)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	telCfg, err := telemetry.FromEnv(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("telemetry settings: %w", err)
	}
	telCfg.ServiceVersion = version
	telCfg.TraceFile = to.traceFile
	telCfg.Logger = logger
	tel, err := telemetry.Setup(ctx, telCfg)
	if err != nil {
		return nil, err
	}
	rs := &runningService{telemetry: tel}
	rs.stop = append(rs.stop, func() error {
		sctx, cancel := context.WithTimeout(context.Background(), telemetryShutdownGrace)
		defer cancel()
		return tel.Shutdown(sctx)
	})
	defer func() {
		if err != nil {
			err = errors.Join(err, rs.Close())
		}
	}()
	tel.LogStartup(logger)
	var tp trace.TracerProvider = tel.TracerProvider
	var profiler *profile.Profiler
	if to.profiling {
		profiler, err = profile.Start(profile.Config{
			AppName:           cmp.Or(os.Getenv("PYROSCOPE_APPLICATION_NAME"), profile.DefaultAppName),
			Window:            to.profileWindow,
			Keep:              to.profileKeep,
			WallRate:          to.wallRate,
			ServerAddress:     os.Getenv("PYROSCOPE_SERVER_ADDRESS"),
			BasicAuthUser:     os.Getenv("PYROSCOPE_BASIC_AUTH_USER"),
			BasicAuthPassword: os.Getenv("PYROSCOPE_BASIC_AUTH_PASSWORD"),
			TenantID:          os.Getenv("PYROSCOPE_TENANT_ID"),
			Now:               tel.Now,
			Logger:            logger,
		})
		switch {
		case errors.Is(err, profile.ErrRunning):
			// Another service in this process (tests, an embedding program) holds the CPU
			// profiler; serving matters more than profiling.
			logger.Warn("continuous profiler not started: another one runs in this process", "err", err)
			err = nil
		case err != nil:
			return nil, fmt.Errorf("profiler: %w", err)
		default:
			rs.stop = append(rs.stop, profiler.Stop)
			tp = profiler.WrapTracerProvider(tp)
		}
	}
	svc, err := service.New(ctx, cfg, service.WithLogger(logger), service.WithTelemetry(service.Telemetry{
		TracerProvider: tp, MeterProvider: tel.MeterProvider, Propagator: tel.Propagator,
		Registry: tel.Registry, Now: tel.Now, CaptureContent: tel.CaptureContent, GenAILatest: tel.GenAILatest, ProfileLabels: true,
		Traces: tel.Ring.Handler(), Profiles: profile.Handler(profiler.Store()), CPUProfile: profile.CPUProfileHandler(),
	}))
	if err != nil {
		return nil, err
	}
	rs.Service = svc
	return rs, nil
}

// newLogger returns the text logger of a command at level (info when it does not parse), with
// credentials hidden from every record (redact.NewHandler): a backend's URL is logged without
// its password, whoever logs it.
func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(redact.NewHandler(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})))
}
