package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag/httpapi"
	"github.com/ragtail/ragtail/rag/llmsim"
	"github.com/ragtail/ragtail/rag/retrieve/qdranttest"
)

// TestServeOnRealBackendProtocols runs the acceptance of the real-backends work end to end, in
// one process: ingest the built-in corpus into a server speaking Qdrant's gRPC protocol, then
// serve with --qdrant and --llm-url pointing at an llm-sim server. Answers stream; the trace
// shows otelgrpc client spans under the retrieval span; traceparent reaches the LLM server; and
// stopping the LLM server turns requests into 5xx OpenAI errors while the service stays up.
func TestServeOnRealBackendProtocols(t *testing.T) {
	qs, err := qdranttest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer qs.Stop()
	if err := run(context.Background(), []string{"ingest", "--qdrant", qs.Addr(), "--corpus-docs", "30", "--progress-interval", "0"},
		io.Discard, io.Discard); err != nil {
		t.Fatalf("ingest: %v", err)
	}

	prof, _ := llmsim.ProfileByName("tiny")
	engine, err := llmsim.New(prof)
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	var mu sync.Mutex
	var parents []string
	sim := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		parents = append(parents, r.Header.Get("traceparent"))
		mu.Unlock()
		llmsim.NewHandler(engine).ServeHTTP(w, r)
	}))
	defer sim.Close()

	addr, _, _ := startServe(t, "--qdrant", qs.Addr(), "--corpus-docs", "30", "--profiling=false",
		"--llm-url", sim.URL+"/v1", "--llm-model", prof.Model)
	admin := adminAddrOf(t, addr)

	// Readiness follows Qdrant's payload load, which runs in the background.
	waitReadyz(t, "http://"+addr+"/readyz")

	body := `{"model":"` + prof.Model + `","stream":true,"stream_options":{"include_usage":true},"max_tokens":6,
	          "messages":[{"role":"user","content":"How does the kv cache limit batching?"}],"rag":{"coupling":"fanout"}}`
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	stream, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasSuffix(string(stream), "data: [DONE]\n\n") || !strings.Contains(string(stream), `"completion_tokens":6`) {
		t.Fatalf("status %d, stream:\n%s", resp.StatusCode, stream)
	}
	tc, ok := httpapi.ParseTraceParent(resp.Header.Get("traceparent"))
	if !ok {
		t.Fatalf("no traceparent in %v", resp.Header)
	}
	mu.Lock()
	reached := false
	for _, p := range parents {
		if strings.Contains(p, tc.TraceID) {
			reached = true
		}
	}
	mu.Unlock()
	if !reached {
		t.Errorf("traceparent of trace %s did not reach the LLM server (got %q)", tc.TraceID, parents)
	}

	// The trace: otelgrpc client spans (one per shard query) under the retrieval span.
	var tv struct {
		Waterfall []struct {
			Name   string `json:"name"`
			Span   string `json:"span_id"`
			Parent string `json:"parent_span_id"`
		} `json:"waterfall"`
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		r, err := http.Get("http://" + admin + "/debug/traces?trace_id=" + tc.TraceID)
		if err == nil && r.StatusCode == 200 {
			err = json.NewDecoder(r.Body).Decode(&tv)
			r.Body.Close()
			if err == nil && len(tv.Waterfall) > 0 {
				break
			}
		} else if r != nil {
			r.Body.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s not in /debug/traces: %v", tc.TraceID, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	names := map[string]string{} // span id -> name
	for _, s := range tv.Waterfall {
		names[s.Span] = s.Name
	}
	grpcUnderQuery := 0
	for _, s := range tv.Waterfall {
		if strings.HasPrefix(s.Name, "qdrant.Points/") && strings.HasPrefix(names[s.Parent], "Query ") {
			grpcUnderQuery++
		}
	}
	if grpcUnderQuery < 4 {
		var all []string
		for _, s := range tv.Waterfall {
			all = append(all, s.Name+" <- "+names[s.Parent])
		}
		t.Errorf("want an otelgrpc client span under each of the 4 shard queries, found %d:\n%s", grpcUnderQuery, strings.Join(all, "\n"))
	}

	// The LLM goes away: requests fail with a 5xx OpenAI error naming the stage; health stays.
	sim.Close()
	resp, err = http.Post("http://"+addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"`+prof.Model+`","max_tokens":4,"messages":[{"role":"user","content":"kv cache"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	errBody, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode < 500 || !strings.Contains(string(errBody), `"error"`) || !strings.Contains(string(errBody), "generate") {
		t.Errorf("with the LLM down: status %d, body %s", resp.StatusCode, errBody)
	}
	if r, err := http.Get("http://" + addr + "/healthz"); err != nil || r.StatusCode != 200 {
		t.Errorf("healthz with the LLM down: %v %v", r, err)
	} else {
		r.Body.Close()
	}
}

var adminLine = regexp.MustCompile(`admin on (?:http://)?(127\.0\.0\.1:\d+)`)

// adminAddrOf finds the admin address in what the serve that startServe started printed.
func adminAddrOf(t *testing.T, apiAddr string) string {
	t.Helper()
	servingMu.Lock()
	defer servingMu.Unlock()
	out, ok := servingOut[apiAddr]
	if !ok {
		t.Fatalf("no serve output recorded for %s", apiAddr)
	}
	m := adminLine.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no admin address in %q", out.String())
	}
	return m[1]
}

func waitReadyz(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(bufio.NewReader(r.Body))
			r.Body.Close()
			if r.StatusCode == 200 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("not ready after 20 s: %s", b)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}
