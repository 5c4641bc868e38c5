package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestBadFlagValuesFailAtParse gives bench and sweep a bad value for each option that is more
// than a number: each fails as the command line is read, with the flag's name, before any
// request reaches the target.
func TestBadFlagValuesFailAtParse(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		http.Error(w, "no requests expected", http.StatusTeapot)
	}))
	t.Cleanup(srv.Close)
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	tests := []struct {
		cmd, flag, value string
		want             string // in the message, after `invalid value "VALUE" for flag -FLAG: `
	}{
		{"bench", "goodput", "p99_ttft:abc", `goodput "p99_ttft:abc": unknown metric "p99_ttft"`},
		{"bench", "goodput", "ttft:-3", "want a positive number of milliseconds"},
		{"bench", "percentile-metrics", "ttft,joy", `metric "joy"`},
		{"bench", "percentile-metrics", ",", "none given"},
		{"bench", "metric-percentiles", "50,100", `percentile "100"`},
		{"bench", "metric-percentiles", "p99", `percentile "p99"`},
		{"bench", "shape", "sawtooth", `unknown shape "sawtooth"`},
		{"bench", "shape", "ramp:1,50", "want ramp:FROM,TO,DURATION"},
		{"bench", "shape", "step:0@1s", "every rate is 0"},
		{"bench", "shape", "step:5@-1s", "duration must be positive"},
		{"bench", "segment", "4/4", "want i/n with n >= 1 and 0 <= i < n"},
		{"bench", "segment", "half", `segment "half": want i/n`},
		{"bench", "request-rate", "fast", "want a positive number of requests per second or inf"},
		{"bench", "request-rate", "0", "want a positive number of requests per second or inf"},
		{"bench", "start-at", "noon", "want an RFC 3339 time"},
		{"bench", "start-at", past, "ago: give a time to come"},
		{"bench", "dataset", "/no/such/file.json", "neither a file nor short"},
		{"bench", "dataset", "keys:", "want keys, or keys:FILE"},
		{"bench", "extra-body", "[1]", "want a JSON object"},
		{"bench", "http-client", "curl", "want h1 or net/http"},
		{"sweep", "goodput", "e2el", `goodput "e2el": want KEY:MS`},
		{"sweep", "shape", "sawtooth", `unknown shape "sawtooth"`},
		{"sweep", "rates", "1,x", `"x" is not a positive rate`},
		{"sweep", "rates", "4,2", "the ladder's rates must increase"},
		{"sweep", "concurrencies", "2,0", `"0" is not a positive count`},
		{"sweep", "slo", "fast", `slo "fast"`},
		{"sweep", "segment", "1/0", "want i/n"},
		{"sweep", "start-at", past, "ago: give a time to come"},
	}
	for _, tt := range tests {
		t.Run(tt.cmd+" "+tt.flag+" "+tt.value, func(t *testing.T) {
			args := []string{tt.cmd, "--url", srv.URL + "/v1/chat/completions", "--" + tt.flag, tt.value, "--quiet"}
			if tt.cmd == "sweep" && tt.flag != "rates" && tt.flag != "concurrencies" {
				args = append(args, "--rates", "1,2")
			}
			before := requests.Load()
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), args, &stdout, &stderr)
			if n := requests.Load() - before; n != 0 {
				t.Errorf("the target got %d requests: a bad flag must stop the command before it sends any", n)
			}
			if !errors.Is(err, errUsage) {
				t.Fatalf("err = %v, want a usage error; stderr:\n%s", err, stderr.String())
			}
			prefix := `invalid value "` + tt.value + `" for flag -` + tt.flag + ": "
			if first, _, _ := strings.Cut(stderr.String(), "\n"); !strings.HasPrefix(first, prefix) || !strings.Contains(first, tt.want) {
				t.Errorf("first line of stderr:\n%s\nwant\n%s...%s...", first, prefix, tt.want)
			}
			if stdout.Len() > 0 {
				t.Errorf("stdout: %q", stdout.String())
			}
		})
	}
}
