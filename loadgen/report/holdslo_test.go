package report

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// TestHoldSLOWrittenAndRead writes a bench with a hold_slo section to the JSON, the text and
// the HTML, and reads it back from the JSON as written.
func TestHoldSLOWrittenAndRead(t *testing.T) {
	t.Parallel()
	f := func(v float64) *float64 { return &v }
	met := true
	h := &HoldSLO{SLO: "p95_ttft_ms<=500", Metric: MetricTTFT, Percentile: 95, Op: "<=", LimitMS: 500, WindowS: 10, HoldForS: 30,
		Growth: 2, ToleranceRPS: 1.5, StartRPS: 8, Outcome: HoldHeld, HeldRPS: f(30), IntervalLoRPS: f(30), IntervalHiRPS: f(32), HeldMet: &met,
		Windows: []HoldWindow{
			{Phase: HoldPhaseSearch, StartS: 0, EndS: 10, RateRPS: 30, Requests: 300, ValueMS: f(210.5), LoMS: f(200), HiMS: f(230), HasCI: true, Met: true},
			{Phase: HoldPhaseSearch, StartS: 11, EndS: 21, RateRPS: 32, Requests: 320, Failed: 2, Unfinished: 30, LoMS: f(480), HasCI: true},
			{Phase: HoldPhaseHold, StartS: 22, EndS: 52, RateRPS: 30, Requests: 900, ValueMS: f(250), LoMS: f(240), HiMS: f(260), HasCI: true, Met: true},
		}}
	b := Summarize(syntheticResult(3, 100), Options{})
	b.HoldSLO = h

	var buf bytes.Buffer
	if err := WriteJSON(&buf, b); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"hold_slo": {`, `"held_rps": 30`, `"interval_hi_rps": 32`, `"value_ms": null`, `"unfinished": 30`} {
		if !strings.Contains(buf.String(), key) {
			t.Errorf("the JSON lacks %s", key)
		}
	}
	file, err := Decode(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(file.Bench.HoldSLO, h) {
		t.Errorf("read back %+v, want %+v", file.Bench.HoldSLO, h)
	}

	var text bytes.Buffer
	if err := WriteText(&text, file.Bench); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SLO edge (--hold-slo p95_ttft_ms<=500)", "210.5 [200.0, 230.0]", "over (failed or unfinished)",
		"missed (2 failed, 30 unfinished)", "30 held for 30s, and the held stretch met the SLO", "30 to 32: a window met the SLO"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the text lacks %q:\n%s", want, text.String())
		}
	}
	var page bytes.Buffer
	if err := WriteHTML(&page, file.Bench); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), `id="hold-slo"`) || !strings.Contains(page.String(), "Offered rate by window") {
		t.Error("the HTML has no hold-slo section")
	}
	if plain := Summarize(syntheticResult(3, 100), Options{}); plain.HoldSLO != nil {
		t.Error("a hold_slo section without --hold-slo")
	}
}
