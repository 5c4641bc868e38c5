package main

import (
	"bytes"
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag/retrieve"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testBackendOptions returns the flags' defaults with --qdrant addr and a fast readiness watch.
func testBackendOptions(addr string) backendOptions {
	var o backendOptions
	o.getenv = func(string) string { return "" }
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o.register(fs)
	o.qdrantAddr = addr
	o.readyEvery = 20 * time.Millisecond
	return o
}

func TestBackendFlagsAndEnvironment(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		envQdrant: "qdrant.internal:6334", envLLMURL: "http://vllm:8000/v1", envEmbedURL: "",
		envQdrantAPIKey: "qdrant-secret", envOpenAIAPIKey: "sk-secret",
	}
	tests := []struct {
		name       string
		args       []string
		wantQdrant string
		wantLLM    string
	}{
		{name: "environment", wantQdrant: "qdrant.internal:6334", wantLLM: "http://vllm:8000/v1"},
		{name: "flags win", args: []string{"--qdrant", "localhost:7000", "--llm-url", "http://localhost:8000/v1"}, wantQdrant: "localhost:7000", wantLLM: "http://localhost:8000/v1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := backendOptions{getenv: func(k string) string { return env[k] }}
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			var help bytes.Buffer
			fs.SetOutput(&help)
			o.register(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if o.qdrantAddr != tt.wantQdrant || o.llmURL != tt.wantLLM {
				t.Errorf("qdrant %q, llm %q; want %q, %q", o.qdrantAddr, o.llmURL, tt.wantQdrant, tt.wantLLM)
			}
			if o.qdrantCollection != retrieve.DefaultCollection || o.qdrantPool != retrieve.DefaultQdrantPoolSize || o.qdrantTimeout <= 0 {
				t.Errorf("defaults: collection %q, pool %d, timeout %v", o.qdrantCollection, o.qdrantPool, o.qdrantTimeout)
			}
			fs.PrintDefaults()
			if strings.Contains(help.String(), "secret") {
				t.Errorf("--help shows a secret from the environment:\n%s", help.String())
			}
			for _, f := range []string{"qdrant", "qdrant-collection", "qdrant-api-key", "qdrant-tls", "qdrant-pool", "qdrant-keepalive",
				"qdrant-keepalive-timeout", "qdrant-timeout", "llm-url", "llm-model", "llm-api-key", "llm-connect-timeout",
				"llm-first-token-timeout", "llm-idle-timeout", "embed-url", "embed-model", "snapshot"} {
				if fs.Lookup(f) == nil {
					t.Errorf("no flag --%s", f)
				}
			}
		})
	}
}

func TestBackendValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(*backendOptions)
		wantIn string
	}{
		{"qdrant and snapshot", func(o *backendOptions) { o.snapshot = "x.snap" }, "choose one"},
		{"empty pool", func(o *backendOptions) { o.qdrantPool = 0 }, "--qdrant-pool"},
		{"no timeout", func(o *backendOptions) { o.qdrantTimeout = 0 }, "--qdrant-timeout"},
		{"embed url without model", func(o *backendOptions) { o.embedURL = "http://e/v1" }, "--embed-model"},
		{"negative llm retries", func(o *backendOptions) { o.llmURL = "http://l/v1"; o.llmRetries = -1 }, "--llm-retries"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := testBackendOptions("localhost:6334")
			tt.change(&o)
			if err := o.validate(); err == nil || !strings.Contains(err.Error(), tt.wantIn) {
				t.Errorf("validate: %v, want an error mentioning %s", err, tt.wantIn)
			}
		})
	}
	if o := testBackendOptions("localhost:6334"); o.validate() != nil {
		err := o.validate()
		t.Errorf("defaults do not validate: %v", err)
	}
}
