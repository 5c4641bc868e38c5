package telemetry_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/telemetry"
)

// TestRequestsSharingATraceIDKeepAllTheirSpans sends three requests carrying one W3C trace id,
// as an agent making several calls inside one trace does, in turn and then at once: the trace on
// /debug/traces holds all three requests, each local root with every stage span of its own.
func TestRequestsSharingATraceIDKeepAllTheirSpans(t *testing.T) {
	for _, concurrent := range []bool{false, true} {
		t.Run(fmt.Sprintf("concurrent=%v", concurrent), func(t *testing.T) {
			s := newStack(t, telemetry.Config{}, stackOptions{})
			traceID := "4bf92f3577b34da6a3ce929d0e0e47" + map[bool]string{false: "36", true: "37"}[concurrent]
			send := func(i int) {
				body := fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":8,"messages":[{"role":"user","content":%q}]}`, s.model, s.questions[i])
				req, err := http.NewRequest(http.MethodPost, s.api.URL+"/v1/chat/completions", strings.NewReader(body))
				if err != nil {
					t.Error(err)
					return
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("traceparent", fmt.Sprintf("00-%s-%016x-01", traceID, i+1))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				defer resp.Body.Close()
				_, _ = io.Copy(io.Discard, resp.Body)
				if resp.StatusCode != 200 {
					t.Errorf("request %d: status %d", i, resp.StatusCode)
				}
			}
			const requests = 3
			if concurrent {
				done := make(chan struct{})
				for i := range requests {
					go func() { defer func() { done <- struct{}{} }(); send(i) }()
				}
				for range requests {
					<-done
				}
			} else {
				for i := range requests {
					send(i)
				}
			}
			s.waitTraces(t, requests)

			resp, err := http.Get(s.admin.URL + "/debug/traces?trace_id=" + traceID)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var v telemetry.TraceView
			if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != 200 {
				t.Fatalf("trace %s: status %d, %v", traceID, resp.StatusCode, err)
			}
			if len(v.Roots) != requests {
				t.Fatalf("trace has %d local roots, want %d: %+v", len(v.Roots), requests, v.Roots)
			}
			requestIDs := map[string]bool{}
			for _, root := range v.Roots {
				requestIDs[root.RequestID] = true
				for _, stage := range rag.Stages {
					if _, ok := root.Stages[string(stage)]; !ok {
						t.Errorf("request %s (root %s) has no %s span; stages %v", root.RequestID, root.SpanID, stage, root.Stages)
					}
				}
			}
			if len(requestIDs) != requests {
				t.Errorf("request ids %v, want %d different", requestIDs, requests)
			}
			// Each request: server span, rag.pipeline, admission, embed, retrieval and 4 Query
			// spans, fetch, chat, stream.
			if want := requests * 12; len(v.Waterfall) != want {
				t.Errorf("waterfall has %d spans, want %d", len(v.Waterfall), want)
			}
		})
	}
}
