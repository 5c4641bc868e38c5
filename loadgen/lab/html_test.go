package lab

import (
	"strings"
	"testing"
	"time"
)

func TestLoadDuration(t *testing.T) {
	def := DefaultDuration("coupling")
	tests := []struct {
		name string
		o    Options
		want time.Duration
	}{
		{"default", Options{}, def},
		{"quick", Options{Quick: true}, def / quickDivisor},
		{"explicit wins over quick", Options{Duration: 7 * time.Second, Quick: true}, 7 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := LoadDuration("coupling", tt.o); got != tt.want {
				t.Errorf("LoadDuration = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestSummaryLeads checks that the text summary and the HTML page list every result with its
// verdict, the page leading with the table and colouring the verdict.
func TestSummaryLeads(t *testing.T) {
	results := []*Result{
		{Experiment: "coupling", Verdict: Verdict{Reproduced, "sync P95 1011 ms vs async 195 ms"}},
		{Experiment: "keepalive", Verdict: Verdict{NotReproduced, "P99 39.6 vs 41.6 ms"}},
	}
	var txt strings.Builder
	if err := WriteSummary(&txt, results); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"REPRODUCED", "NOT REPRODUCED", ClaimOf("coupling"), "P99 39.6 vs 41.6 ms"} {
		if !strings.Contains(txt.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, txt.String())
		}
	}
	var page strings.Builder
	if err := WriteHTML(&page, results); err != nil {
		t.Fatal(err)
	}
	h := page.String()
	sum, first := strings.Index(h, "<h2>Summary</h2>"), strings.Index(h, `<h2 id="coupling">`)
	if sum < 0 || first < 0 || sum > first {
		t.Errorf("the summary table does not lead the page (at %d, first experiment at %d)", sum, first)
	}
	if !strings.Contains(h, `class="v reproduced"`) || !strings.Contains(h, `class="v notreproduced"`) {
		t.Error("verdicts are not coloured by outcome")
	}
}
