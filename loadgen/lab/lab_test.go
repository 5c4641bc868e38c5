package lab

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/report"
)

func TestCompare(t *testing.T) {
	ms := time.Millisecond
	ci := func(v, lo, hi time.Duration) report.PercentileStat {
		return report.PercentileStat{P: 95, Value: v, Lo: lo, Hi: hi, HasCI: true}
	}
	tests := []struct {
		name          string
		worse, better report.PercentileStat
		want          string
	}{
		{"separated", ci(500*ms, 450*ms, 600*ms), ci(100*ms, 90*ms, 120*ms), Reproduced},
		{"overlapping", ci(500*ms, 300*ms, 600*ms), ci(400*ms, 350*ms, 450*ms), NotReproduced},
		{"reversed", ci(100*ms, 90*ms, 120*ms), ci(500*ms, 450*ms, 600*ms), Opposite},
		{"no interval", report.PercentileStat{Value: 900 * ms}, ci(100*ms, 90*ms, 120*ms), NotReproduced},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := compare(tt.worse, tt.better); got != tt.want {
				t.Errorf("compare = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestBinomialCI checks the Wilson interval against values computed by hand:
// k=10, n=100: centre (0.1 + 1.92/100)/(1+3.84/100) = 0.1148, half-width
// 1.96*sqrt(0.0009+0.000096)/1.0384 = 0.0596, so [0.0552, 0.1744].
func TestBinomialCI(t *testing.T) {
	tests := []struct {
		name          string
		k, n          float64
		p, lo, hi     float64
		wantUndefined bool
	}{
		{name: "ten percent", k: 10, n: 100, p: 0.1, lo: 0.0552, hi: 0.1744},
		{name: "none", k: 0, n: 50, p: 0, lo: 0, hi: 0.0714},
		{name: "no trials", n: 0, wantUndefined: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, lo, hi := binomialCI(tt.k, tt.n)
			if tt.wantUndefined {
				if !math.IsNaN(p) {
					t.Errorf("p = %v, want NaN", p)
				}
				return
			}
			for _, c := range []struct{ got, want float64 }{{p, tt.p}, {lo, tt.lo}, {hi, tt.hi}} {
				if math.Abs(c.got-c.want) > 5e-4 {
					t.Errorf("binomialCI(%v, %v) = %v, %v, %v; want %v, %v, %v", tt.k, tt.n, p, lo, hi, tt.p, tt.lo, tt.hi)
				}
			}
		})
	}
}

func TestResultJSONAndText(t *testing.T) {
	r := &Result{Experiment: "coupling", Title: "t", Document: map[string]any{"sync_mean_ms": 890},
		Rows: []Row{{"m", "c", "x"}}, Verdict: Verdict{Reproduced, "because"}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc["schema"] != Schema || doc["experiment"] != "coupling" || doc["verdict"].(map[string]any)["outcome"] != Reproduced {
		t.Errorf("JSON %s", b)
	}
	var sb strings.Builder
	if err := WriteText(&sb, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sb.String(), "verdict: REPRODUCED — because") {
		t.Errorf("text:\n%s", sb.String())
	}
	sb.Reset()
	if err := WriteHTML(&sb, []*Result{r}); err != nil || !strings.Contains(sb.String(), "<td>m</td>") {
		t.Errorf("html (%v):\n%s", err, sb.String())
	}
}

func TestNames(t *testing.T) {
	want := []string{"p99-model", "coupling", "cache-penetration", "pool-saturation", "latency-injection", "knee", "keepalive", "priority", "agent-amplification"}
	if got := Names(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	for _, n := range want {
		if DefaultDuration(n) <= 0 {
			t.Errorf("%s has no default duration", n)
		}
	}
}

// TestRulesPreRegistered checks that every experiment has a verdict rule and that PITFALLS.md
// quotes it word for word, so that the rule a reader sees is the rule the code applies.
func TestRulesPreRegistered(t *testing.T) {
	b, err := os.ReadFile("../../PITFALLS.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.ToLower(strings.Join(strings.Fields(string(b)), " "))
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			r, ok := RuleOf(name)
			if !ok || r.Compared == "" || r.Interval == "" || r.Threshold == "" {
				t.Fatalf("rule %+v: every part must be stated", r)
			}
			if ClaimOf(name) == "" {
				t.Error("no headline claim for the summary table")
			}
			if want := strings.ToLower(strings.Join(strings.Fields(r.String()), " ")); !strings.Contains(doc, want) {
				t.Errorf("PITFALLS.md does not quote the rule %q", want)
			}
		})
	}
}

func TestStepBudget(t *testing.T) {
	// 1000 steps of 1..1000 ms: the P98.2 is the 982nd (nearest rank); failed, warmup and unsent
	// steps do not count, and a calibration without steps has no budget.
	var recs []loadgen.Record
	for i := 1000; i >= 1; i-- {
		recs = append(recs, loadgen.Record{Intended: 0, End: time.Duration(i)*time.Millisecond + 300*time.Microsecond, Status: 200})
	}
	recs = append(recs, loadgen.Record{End: time.Hour, Status: 500}, loadgen.Record{End: time.Hour, Status: 200, Warmup: true}, loadgen.Record{NotSent: true})
	budget, q, ok := stepBudget(recs)
	if !ok || budget != 982*time.Millisecond {
		t.Fatalf("stepBudget = %v, %v, want 982ms", budget, ok)
	}
	if !q.HasCI || q.Lo > q.Value || q.Hi < q.Value || q.Lo < 970*time.Millisecond || q.Hi > 995*time.Millisecond {
		t.Errorf("interval [%v, %v] around %v: want a narrow order-statistic interval around the 982nd step", q.Lo, q.Hi, q.Value)
	}
	if _, _, ok := stepBudget(recs[len(recs)-3:]); ok {
		t.Error("a calibration with no successful step gave a budget")
	}
}

// TestSettingsPartialPut checks that a PUT body carries exactly the fields an experiment set:
// unset ones are left out (the service keeps them), and an empty rule set is sent as [] so
// that it clears the service's faults.
func TestSettingsPartialPut(t *testing.T) {
	tests := []struct {
		name string
		s    Settings
		want string
	}{
		{"nothing set", Settings{}, `{}`},
		{"coupling only", Settings{Coupling: ptr("sync")}, `{"coupling":"sync"}`},
		{"clear faults", Settings{Faults: noFaults()}, `{"faults":[]}`},
		{"zero values are sent when set", Settings{TopK: ptr(0), Bloom: &BloomSettings{Enabled: ptr(false)}}, `{"top_k":0,"bloom":{"enabled":false}}`},
		{"relative delay", Settings{Faults: faults(FaultRule{Name: "r", Stage: "retrieve", Percent: 100, Relative: &RelativeDelay{}})},
			`{"faults":[{"name":"r","stage":"retrieve","percent":100,"relative":{}}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(&tt.s)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Errorf("body %s, want %s", b, tt.want)
			}
		})
	}
}

// TestCloneIsolates checks that changing a clone's slices leaves the original as it was.
func TestCloneIsolates(t *testing.T) {
	s := &Settings{ShardLatency: []string{"fixed:1ms"}, Faults: faults(FaultRule{Name: "a"})}
	c := clone(s)
	c.ShardLatency[0] = "fixed:9ms"
	(*c.Faults)[0].Name = "b"
	if s.ShardLatency[0] != "fixed:1ms" || (*s.Faults)[0].Name != "a" {
		t.Errorf("clone shares slices with its source: %+v", s)
	}
}
