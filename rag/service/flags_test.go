package service

import (
	"bytes"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/ragtail/ragtail/rag/admission"

	"github.com/ragtail/ragtail/rag/latency"
	"github.com/ragtail/ragtail/rag/retrieve"
)

// flagBackends returns the backend flags' defaults with --qdrant addr.
func flagBackends(t *testing.T, addr string) Backends {
	t.Helper()
	b := DefaultConfig().Backends
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	b.RegisterFlags(fs, func(string) string { return "" })
	if err := fs.Parse([]string{"--qdrant", addr}); err != nil {
		t.Fatal(err)
	}
	b.FlagsParsed(fs, func(string) string { return "" })
	return b
}

func TestBackendFlagsAndEnvironment(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		EnvQdrant: "qdrant.internal:6334", EnvLLMURL: "http://vllm:8000/v1", EnvEmbedURL: "",
		EnvQdrantAPIKey: "qdrant-secret", EnvOpenAIAPIKey: "sk-secret",
	}
	getenv := func(k string) string { return env[k] }
	tests := []struct {
		name                 string
		args                 []string
		wantQdrant           string
		wantLLM              string
		wantModels           []string
		wantLLMKey, wantQKey string
	}{
		{name: "environment", wantQdrant: "qdrant.internal:6334", wantLLM: "http://vllm:8000/v1", wantLLMKey: "sk-secret", wantQKey: "qdrant-secret"},
		{name: "flags win", args: []string{"--qdrant", "localhost:7000", "--llm-url", "http://localhost:8000/v1", "--llm-api-key", "k", "--llm-model", " a, ,b "},
			wantQdrant: "localhost:7000", wantLLM: "http://localhost:8000/v1", wantModels: []string{"a", "b"}, wantLLMKey: "k", wantQKey: "qdrant-secret"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := DefaultConfig().Backends
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			var help bytes.Buffer
			fs.SetOutput(&help)
			b.RegisterFlags(fs, getenv)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			b.FlagsParsed(fs, getenv)
			if b.Qdrant.Addr != tt.wantQdrant || b.LLM.URL != tt.wantLLM {
				t.Errorf("qdrant %q, llm %q; want %q, %q", b.Qdrant.Addr, b.LLM.URL, tt.wantQdrant, tt.wantLLM)
			}
			if strings.Join(b.LLM.Models, "|") != strings.Join(tt.wantModels, "|") || b.LLM.APIKey != tt.wantLLMKey || b.Qdrant.APIKey != tt.wantQKey {
				t.Errorf("models %q, llm key %q, qdrant key %q; want %q, %q, %q", b.LLM.Models, b.LLM.APIKey, b.Qdrant.APIKey, tt.wantModels, tt.wantLLMKey, tt.wantQKey)
			}
			if b.Qdrant.Collection != retrieve.DefaultCollection || b.Qdrant.Pool != retrieve.DefaultQdrantPoolSize || b.Qdrant.Timeout <= 0 {
				t.Errorf("defaults: collection %q, pool %d, timeout %v", b.Qdrant.Collection, b.Qdrant.Pool, b.Qdrant.Timeout)
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
		change func(*Backends)
		wantIn string
	}{
		{"qdrant and snapshot", func(b *Backends) { b.Snapshot = "x.snap" }, "choose one"},
		{"empty pool", func(b *Backends) { b.Qdrant.Pool = 0 }, "--qdrant-pool"},
		{"no timeout", func(b *Backends) { b.Qdrant.Timeout = 0 }, "--qdrant-timeout"},
		{"embed url without model", func(b *Backends) { b.Embed.URL = "http://e/v1" }, "--embed-model"},
		{"negative llm retries", func(b *Backends) { b.LLM.URL = "http://l/v1"; b.LLM.Retries = -1 }, "--llm-retries"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := flagBackends(t, "localhost:6334")
			tt.change(&b)
			if err := b.Validate(); err == nil || !strings.Contains(err.Error(), tt.wantIn) {
				t.Errorf("validate: %v, want an error mentioning %s", err, tt.wantIn)
			}
		})
	}
	if err := flagBackends(t, "localhost:6334").Validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
}

func TestConfigFlagsParsed(t *testing.T) {
	t.Parallel()
	env := map[string]string{EnvAdminToken: "tok", EnvDocStore: "postgres://u@h/db"}
	getenv := func(k string) string { return env[k] }
	tests := []struct {
		name          string
		args          []string
		wantFetchZero bool
	}{
		{name: "a real store has its own service time", wantFetchZero: true},
		{name: "unless --fetch-latency says otherwise", args: []string{"--fetch-latency", "fixed:3ms"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := DefaultConfig()
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			c.RegisterFlags(fs)
			c.Backends.RegisterFlags(fs, getenv)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			c.Backends.FlagsParsed(fs, getenv)
			c.FlagsParsed(fs, getenv)
			if c.AdminToken != "tok" || c.Backends.DocStore != env[EnvDocStore] || c.Backends.Cache != "lru" {
				t.Errorf("admin token %q, docstore %q, cache %q", c.AdminToken, c.Backends.DocStore, c.Backends.Cache)
			}
			if zero := c.FetchLatency.String() == (latency.Law{}).String(); zero != tt.wantFetchZero {
				t.Errorf("fetch latency %v", c.FetchLatency)
			}
		})
	}
}

// TestLatencyFlagsWithinTheLimit gives the latency flags the laws /admin/config refuses: each
// flag refuses them too, saying the limit, before anything starts.
func TestLatencyFlagsWithinTheLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string // "" accepts
	}{
		{name: "heavy shard latency", args: []string{"--shard-latency", "pareto:10ms,0.1"}, want: "its P99.9 is 1e+28s, above the 1m0s limit"},
		{name: "heavy shard latency with a cap", args: []string{"--shard-latency", "pareto:10ms,0.1,1m"}},
		{name: "fetch latency past the limit", args: []string{"--fetch-latency", "fixed:2m"}, want: "above the 1m0s limit"},
		{name: "embed latency past the limit", args: []string{"--embed-latency", "uniform:1ms,1h"}, want: "above the 1m0s limit"},
		{name: "fault delay of a million hours", args: []string{"--fault", "stage=embed;delay=fixed:1000000h"}, want: "above the 1m0s limit"},
		{name: "link latency past the limit", args: []string{"--link", "llm=latency:2m"}, want: "between 0 and 1m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := DefaultConfig()
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			c.RegisterFlags(fs)
			err := fs.Parse(tt.args)
			if err == nil {
				err = c.Validate()
			}
			if tt.want == "" {
				if err != nil {
					t.Fatalf("%v: %v", tt.args, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("%v: %v; want an error containing %q", tt.args, err, tt.want)
			}
		})
	}
}

// TestAdaptiveFlags: the adaptive limit's flags set the admission config, and a value out of
// bounds fails the config's validation naming the flag.
func TestAdaptiveFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		want    admission.Adaptive
		wantErr string
	}{
		{name: "on by default", want: admission.Adaptive{Enabled: true, Tolerance: 4, MinLimit: 4}},
		{name: "off", args: []string{"--adaptive-limit=false"}, want: admission.Adaptive{Tolerance: 4, MinLimit: 4}},
		{name: "tuned", args: []string{"--adaptive-tolerance", "2.5", "--adaptive-min-limit", "8"}, want: admission.Adaptive{Enabled: true, Tolerance: 2.5, MinLimit: 8}},
		{name: "tolerance too low", args: []string{"--adaptive-tolerance", "1"}, wantErr: "--adaptive-tolerance must be between 1.5 and 100"},
		{name: "tolerance not a number", args: []string{"--adaptive-tolerance", "NaN"}, wantErr: "--adaptive-tolerance"},
		{name: "negative minimum", args: []string{"--adaptive-min-limit", "-2"}, wantErr: "--adaptive-min-limit must be between 1 and 65536"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := DefaultConfig()
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			c.RegisterFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := c.Validate()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("validate: %v; want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || c.Admission.Adaptive != tt.want {
				t.Fatalf("adaptive %+v, %v; want %+v", c.Admission.Adaptive, err, tt.want)
			}
		})
	}
}
