//go:build tools

// Package tools pins modules that upcoming packages use, so that `go mod tidy` keeps them until
// the packages import them. It is never built.
package tools

import (
	_ "github.com/HdrHistogram/hdrhistogram-go"
	_ "github.com/compose-spec/compose-go/v2/loader"
	_ "github.com/google/pprof/profile"
	_ "github.com/grafana/otel-profiling-go"
	_ "github.com/grafana/pyroscope-go"
	_ "github.com/qdrant/go-client/qdrant"
	_ "go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	_ "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	_ "go.opentelemetry.io/otel"
	_ "go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	_ "go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	_ "go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	_ "go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	_ "go.opentelemetry.io/otel/exporters/prometheus"
	_ "go.opentelemetry.io/otel/sdk/metric"
	_ "go.opentelemetry.io/otel/sdk/trace"
	_ "go.opentelemetry.io/otel/semconv/v1.41.0"
	_ "google.golang.org/grpc"
)
