package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragtail/ragtail/internal/testci"
)

// sheddingPhase is one stretch of the default-serve overload run.
type sheddingPhase struct {
	name  string
	rate  float64 // requests per second
	start time.Duration
}

// phaseFigures is what the requests intended during one phase got.
type phaseFigures struct {
	admitted, shed []time.Duration // end-to-end latencies from the intended send time
	other          int             // neither 200 nor 503
}

// pctOf is the nearest-rank percentile p of ds (0 for none).
func pctOf(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	i := int(p/100*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// TestServeShedsAtTenTimesCapacity is the acceptance run of the default `ragtail serve` under
// overload (issue 35), with ragtail's own load generator: `ragtail bench` against `ragtail
// serve` with no flags, one open-loop Poisson run of 64-token answers at the service's capacity
// (3 req/s), then ten times that, then its capacity again, a minute each. It checks that at 10x
// most requests are shed with a 503 that carries Retry-After and comes within a second (P99),
// that the admitted requests' P95 stays within twice the P95 at capacity, and that once the
// overload stops, latency is back to normal within seconds: no request intended 10 s or more
// after it is slower than 1.5 times the P99 at capacity. It runs for about three and a half
// minutes, without the race detector (make test-timing).
func TestServeShedsAtTenTimesCapacity(t *testing.T) {
	if raceEnabled {
		testci.Skip(t, "a timing test: under the race detector the service would measure the detector; make test-timing runs it without")
	}
	const phaseLen = time.Minute
	phases := []sheddingPhase{{"capacity", 3, 0}, {"10x", 30, phaseLen}, {"capacity again", 3, 2 * phaseLen}}
	addr, _, _ := startServe(t)
	servingMu.Lock()
	out := servingOut[addr].String()
	servingMu.Unlock()
	m := regexp.MustCompile(`admin on (http://\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no admin address in %q", out)
	}
	admin := strings.TrimRight(m[1], ".,")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var probe sync.WaitGroup
	var probed struct {
		sync.Mutex
		shed, withoutRetryAfter int
		limits                  []float64
	}
	// A probe beside the run, during the overload: each 503 must say when to retry, and the
	// limit the admission pool reports must be below its 256 workers.
	probe.Go(func() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(phaseLen + 15*time.Second):
		}
		body := `{"model":"meta-llama/Meta-Llama-3-8B-Instruct","max_tokens":64,"messages":[{"role":"user","content":"How do shards shape tail latency?"}]}`
		for i := range 60 {
			if ctx.Err() != nil {
				return
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusServiceUnavailable {
					probed.Lock()
					probed.shed++
					if resp.Header.Get("Retry-After") == "" {
						probed.withoutRetryAfter++
					}
					probed.Unlock()
				}
			}
			if i%10 == 0 {
				if v, ok := scrapeGauge(ctx, admin+"/metrics", "rag_admission_limit"); ok {
					probed.Lock()
					probed.limits = append(probed.limits, v)
					probed.Unlock()
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	})

	detailed := filepath.Join(t.TempDir(), "requests.jsonl")
	steps := make([]string, len(phases))
	for i, p := range phases {
		steps[i] = fmt.Sprintf("%g@%v", p.rate, phaseLen)
	}
	var benchOut syncBuffer
	err := run(ctx, []string{"bench", "--url", "http://" + addr + "/v1/chat/completions", "--shape", "step:" + strings.Join(steps, ","),
		"--max-tokens", "64", "--duration", (time.Duration(len(phases)) * phaseLen).String(), "--num-prompts", "0", "--seed", "35",
		"--save-detailed", detailed, "--max-error-rate", "1", "--server-metrics", "off", "--quiet"}, &benchOut, &benchOut)
	cancel()
	probe.Wait()
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, benchOut.String())
	}

	figures := readPhases(t, detailed, phases)
	for i, f := range figures {
		t.Logf("%-14s %4.0f req/s: %4d admitted, E2E P50 %v P95 %v P99 %v; %4d shed (503), time to 503 P50 %v P99 %v; %d other",
			phases[i].name, phases[i].rate, len(f.admitted), pctOf(f.admitted, 50).Round(time.Millisecond), pctOf(f.admitted, 95).Round(time.Millisecond),
			pctOf(f.admitted, 99).Round(time.Millisecond), len(f.shed), pctOf(f.shed, 50).Round(time.Millisecond), pctOf(f.shed, 99).Round(time.Millisecond), f.other)
	}
	base, over, after := figures[0], figures[1], figures[2]
	for i, f := range figures {
		if f.other > 0 {
			t.Errorf("%s: %d requests got neither an answer nor a 503", phases[i].name, f.other)
		}
	}
	if len(base.admitted) < 100 || len(over.admitted) < 100 {
		t.Fatalf("too few answers for a P95: %d at capacity, %d at 10x", len(base.admitted), len(over.admitted))
	}
	if frac := float64(len(over.shed)) / float64(len(over.shed)+len(over.admitted)); frac < 0.5 {
		t.Errorf("at 10x only %.2f of requests were shed: the service admitted more than it can serve", frac)
	}
	if p99 := pctOf(over.shed, 99); p99 >= time.Second {
		t.Errorf("at 10x the P99 time to a 503 is %v; want under 1 s", p99)
	}
	if p95, p95base := pctOf(over.admitted, 95), pctOf(base.admitted, 95); p95 > 2*p95base {
		t.Errorf("at 10x admitted requests' P95 E2E is %v, more than twice the %v at capacity", p95, p95base)
	}
	recovery, worst := recoveryTime(t, detailed, 2*phaseLen, 1.5*float64(pctOf(base.admitted, 99)))
	t.Logf("recovery: the last request slower than 1.5 x the P99 at capacity (%v) was intended %v after the overload ended (slowest after it: %v)",
		time.Duration(1.5*float64(pctOf(base.admitted, 99))).Round(time.Millisecond), recovery.Round(time.Millisecond), worst.Round(time.Millisecond))
	if recovery > 10*time.Second {
		t.Errorf("latency took %v after the overload ended to come back to normal; want a few seconds", recovery)
	}
	if frac := float64(len(after.shed)) / float64(len(after.shed)+len(after.admitted)); frac > 0.05 {
		t.Errorf("back at capacity %.2f of requests were shed", frac)
	}
	probed.Lock()
	defer probed.Unlock()
	t.Logf("probe during the overload: %d 503s, %d without Retry-After; rag_admission_limit %v", probed.shed, probed.withoutRetryAfter, probed.limits)
	if probed.shed == 0 || probed.withoutRetryAfter > 0 {
		t.Errorf("probe during the overload: %d 503s, %d of them without Retry-After; want 503s, each with Retry-After", probed.shed, probed.withoutRetryAfter)
	}
	if len(probed.limits) == 0 || slices.Max(probed.limits) >= 256 {
		t.Errorf("rag_admission_limit during the overload: %v; want the adaptive limit, below the 256 workers", probed.limits)
	}
}

// benchRecord is the part of a --save-detailed record the shedding test reads.
type benchRecord struct {
	IntendedNS int64 `json:"intended_ns"`
	EndNS      int64 `json:"end_ns"`
	Status     int   `json:"status"`
}

// readRecords reads the request records of a --save-detailed file (its first line is the
// run's header).
func readRecords(tb testing.TB, path string) []benchRecord {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var recs []benchRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for first := true; sc.Scan(); first = false {
		if first {
			continue
		}
		var r benchRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			tb.Fatalf("record %q: %v", sc.Bytes(), err)
		}
		recs = append(recs, r)
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return recs
}

// readPhases sorts the records of path into phases by intended send time.
func readPhases(tb testing.TB, path string, phases []sheddingPhase) []phaseFigures {
	tb.Helper()
	figures := make([]phaseFigures, len(phases))
	for _, r := range readRecords(tb, path) {
		intended := time.Duration(r.IntendedNS)
		i := len(phases) - 1
		for i > 0 && intended < phases[i].start {
			i--
		}
		e2e := time.Duration(r.EndNS - r.IntendedNS)
		switch r.Status {
		case http.StatusOK:
			figures[i].admitted = append(figures[i].admitted, e2e)
		case http.StatusServiceUnavailable:
			figures[i].shed = append(figures[i].shed, e2e)
		default:
			figures[i].other++
		}
	}
	return figures
}

// recoveryTime is how long after the overload ended (at end) the last request was intended
// whose answer took longer than normal (nanoseconds), among those intended within 30 s of the
// end; 0 if none. It also returns the slowest answer to a request intended after that one.
func recoveryTime(tb testing.TB, path string, end time.Duration, normal float64) (recovery, worstAfter time.Duration) {
	tb.Helper()
	recs := readRecords(tb, path)
	for _, r := range recs {
		intended := time.Duration(r.IntendedNS)
		if r.Status == http.StatusOK && intended >= end && intended < end+30*time.Second && float64(r.EndNS-r.IntendedNS) > normal {
			recovery = max(recovery, intended-end)
		}
	}
	for _, r := range recs {
		if intended := time.Duration(r.IntendedNS); r.Status == http.StatusOK && intended > end+recovery {
			worstAfter = max(worstAfter, time.Duration(r.EndNS-r.IntendedNS))
		}
	}
	return recovery, worstAfter
}

// scrapeGauge reads the value of an unlabelled gauge from a Prometheus text endpoint.
func scrapeGauge(ctx context.Context, url, name string) (float64, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "{")) {
			fields := strings.Fields(line)
			if v, err := strconv.ParseFloat(fields[len(fields)-1], 64); err == nil {
				return v, true
			}
		}
	}
	return 0, false
}
