package llmsim_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag/llmsim"
)

var update = flag.Bool("update", false, "rewrite the generated profile table in docs/hardware.md")

// The markers around the generated table in docs/hardware.md.
const (
	tableBegin = "<!-- profile-table -->"
	tableEnd   = "<!-- /profile-table -->"
)

// profileTable writes, for each Llama profile, its predicted decode step at batch 1, 64 and
// 256 with contexts of 512 and 2048 tokens per sequence, and its prefill of a 2048-token prompt
// in an idle engine (the time to first token), all from the profile's own step-time model.
func profileTable() string {
	var b strings.Builder
	contexts := []int{512, 2048}
	batches := []int{1, 64, 256}
	b.WriteString("| profile | step floor + weight read | KV cache (tokens) |")
	for _, batch := range batches {
		for _, ctx := range contexts {
			fmt.Fprintf(&b, " decode b=%d, ctx %d |", batch, ctx)
		}
	}
	b.WriteString(" prefill 2048 tokens |\n|---|---|---:|")
	for range len(batches) * len(contexts) {
		b.WriteString("---:|")
	}
	b.WriteString("---:|\n")
	for _, p := range llmsim.Profiles() {
		if !strings.HasPrefix(p.Name, "llama3-8b-") {
			continue
		}
		fmt.Fprintf(&b, "| `%s` | %s + %s | %d |", p.Name, ms(llmsim.StepFloor()), ms(p.StepOverhead-llmsim.StepFloor()), p.CapacityTokens())
		for _, batch := range batches {
			for _, ctx := range contexts {
				if batch*ctx > p.CapacityTokens() {
					// The engine would preempt: the KV cache holds fewer such sequences.
					fmt.Fprintf(&b, " KV holds %d |", p.CapacityTokens()/ctx)
					continue
				}
				fmt.Fprintf(&b, " %s |", ms(p.StepTime(0, batch, batch*ctx)))
			}
		}
		fmt.Fprintf(&b, " %s |\n", ms(p.UnloadedE2E(2048, 0, 1)))
	}
	return b.String()
}

// ms writes d in milliseconds with two decimals (one below 1 ms would lose its precision).
func ms(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

// TestHardwareDocTable: the table in docs/hardware.md is the one the profiles give today. Run
// `go test ./rag/llmsim -run TestHardwareDocTable -update` to rewrite it after a change.
func TestHardwareDocTable(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "hardware.md")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	begin, end := strings.Index(doc, tableBegin), strings.Index(doc, tableEnd)
	if begin < 0 || end < begin {
		t.Fatalf("%s: no %s ... %s markers", path, tableBegin, tableEnd)
	}
	want := "\n" + profileTable()
	got := doc[begin+len(tableBegin) : end]
	if got == want {
		return
	}
	if *update {
		doc = doc[:begin+len(tableBegin)] + want + doc[end:]
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s: the profile table differs from the profiles; rerun with -update. Want:\n%s", path, want)
}
