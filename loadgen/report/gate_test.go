package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

func TestParseThresholds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		want     []Threshold
		err      string
	}{
		{"every operator", "p95_ttft_ms<500, error_rate<=0.01,goodput>20,p99.9_service_e2el_ms>=1",
			[]Threshold{{"p95_ttft_ms", "<", 500}, {"error_rate", "<=", 0.01}, {"goodput", ">", 20}, {"p99.9_service_e2el_ms", ">=", 1}}, ""},
		{"mean and std", "mean_itl_ms<3,std_send_lag_ms<1", []Threshold{{"mean_itl_ms", "<", 3}, {"std_send_lag_ms", "<", 1}}, ""},
		{"phases", "p99_connect_ms<5,new_connections<=8", []Threshold{{"p99_connect_ms", "<", 5}, {"new_connections", "<=", 8}}, ""},
		{"unknown key lists the keys", "p95_ttf_ms<500", nil, "unknown key \"p95_ttf_ms\": want one of completed, failed, error_rate"},
		{"percentile out of range", "p100_ttft_ms<5", nil, "unknown key"},
		{"percentile not as the JSON spells it", "p050_ttft_ms<5", nil, "unknown key"},
		{"no operator", "p95_ttft_ms=500", nil, "want KEY<NUMBER"},
		{"no key", "<500", nil, "want KEY<NUMBER"},
		{"not a number", "goodput>lots", nil, "is not a number"},
		{"infinite", "goodput>inf", nil, "is not a number"},
		{"none", " , ", nil, "none given"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseThresholds(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseThresholds(%q) error %v, want %q", tt.in, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("threshold %d = %+v, want %+v", i, got[i], tt.want[i])
				}
				again, err := ParseThresholds(got[i].String())
				if err != nil || again[0] != got[i] {
					t.Errorf("%s does not read back: %v %v", got[i], again, err)
				}
			}
		})
	}
}

// TestGateKeysAreNumbersOfTheJSON checks that every key a threshold may bound is a number (or
// null) in the JSON Summarize writes with the same options, and that no other metric key is.
func TestGateKeysAreNumbersOfTheJSON(t *testing.T) {
	t.Parallel()
	for _, o := range []Options{goldenOptions(t), {Metrics: []string{MetricTTFT, MetricE2EL}, Percentiles: []float64{50, 99.9}}} {
		b := Summarize(syntheticResult(5, 200), o)
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		var keys map[string]json.RawMessage
		if err := json.Unmarshal(raw, &keys); err != nil {
			t.Fatal(err)
		}
		gate := GateKeys(o)
		for _, k := range gate {
			if strings.Contains(k, "_dns_") || strings.Contains(k, "_tls_") {
				if _, ok := keys[k]; ok {
					t.Errorf("%s written for a run without DNS lookups or TLS", k)
				}
				continue
			}
			if strings.HasSuffix(k, "_ttfo_ms") && b.ReasoningRequests == 0 {
				if _, ok := keys[k]; ok {
					t.Errorf("%s written for a run that did not reason", k)
				}
				continue
			}
			var f *float64
			if v, ok := keys[k]; !ok || json.Unmarshal(v, &f) != nil {
				t.Errorf("options %+v: gate key %s is not a number of the JSON (%s)", o, k, keys[k])
			}
		}
		for k := range keys {
			if _, _, ok := splitMetricKey(k); ok && knownKey(k) && !strings.HasSuffix(k, "_ci") && !contains(gate, k) {
				t.Errorf("options %+v: the JSON has %s, which GateKeys leaves out", o, k)
			}
		}
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func TestCheckThresholds(t *testing.T) {
	t.Parallel()
	ts, err := ParseThresholds("goodput>1")
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckThresholds(ts, goldenOptions(t)); err != nil {
		t.Errorf("goodput with SLOs: %v", err)
	}
	if err := CheckThresholds(ts, Options{}); err == nil || !strings.Contains(err.Error(), "no key goodput") {
		t.Errorf("goodput without SLOs: %v", err)
	}
	ts, _ = ParseThresholds("p95_ttft_ms<1")
	if err := CheckThresholds(ts, Options{Percentiles: []float64{50, 99}}); err == nil || !strings.Contains(err.Error(), "p50_ttft_ms") {
		t.Errorf("a percentile not reported: %v", err)
	}
}

func TestCheckBench(t *testing.T) {
	t.Parallel()
	b := Summarize(syntheticResult(9, 600), goldenOptions(t))
	p50 := math.Round(durationMS(b.Stats[0].Percentiles[0].Value)*1e3) / 1e3 // as the JSON rounds it
	ts := []Threshold{
		{"p50_ttft_ms", "<=", p50}, {"p50_ttft_ms", "<", p50}, {"error_rate", "<", 0.01},
		{"completed", ">=", float64(b.Completed)}, {"mean_ttfo_ms", "<", 1e9}, // no reasoning: absent
	}
	rs, err := CheckBench(b, ts)
	if err != nil {
		t.Fatal(err)
	}
	want := []bool{true, false, false, true, false}
	for i, r := range rs {
		if r.Passed != want[i] {
			t.Errorf("%s measured %g: passed %v, want %v", r.Threshold, r.Value, r.Passed, want[i])
		}
	}
	if rs[2].Value != sig(b.ErrorRate()) || b.ErrorRate() < 0.03 {
		t.Errorf("error_rate measured %g, want %g", rs[2].Value, b.ErrorRate())
	}
	var out bytes.Buffer
	err = WriteThresholds(&out, rs)
	var gate *GateError
	if !errors.As(err, &gate) || gate.Failed != 3 || gate.Checked != 5 {
		t.Fatalf("WriteThresholds: %v, want a GateError of 3 of 5", err)
	}
	for _, line := range []string{"FAILED  p50_ttft_ms < ", "ok      completed >= ", "FAILED  error_rate < 0.01"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("output lacks %q:\n%s", line, out.String())
		}
	}
	if err := WriteThresholds(&out, rs[:1]); err != nil {
		t.Errorf("all passed: %v", err)
	}
}

// FuzzParseThresholds checks that what ParseThresholds accepts writes back as it reads.
func FuzzParseThresholds(f *testing.F) {
	for _, s := range []string{"p95_ttft_ms<500,error_rate<0.01,goodput>20", "p99.9_e2el_ms>=1e3", "completed<=-0", "x<", "<>="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ts, err := ParseThresholds(s)
		if err != nil {
			return
		}
		for _, th := range ts {
			again, err := ParseThresholds(th.String())
			if err != nil || len(again) != 1 || again[0] != th {
				t.Fatalf("%q: %+v writes %q, read back %+v, %v", s, th, th.String(), again, err)
			}
		}
	})
}
