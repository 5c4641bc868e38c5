package report

import (
	"bytes"
	"testing"
	"time"
)

func TestPhasesSummarizedReadAndMerged(t *testing.T) {
	t.Parallel()
	b := Summarize(syntheticResult(9, 600), Options{})
	if b.NewConns != 8 || b.ReusedConns != 592 {
		t.Fatalf("connections: %d new, %d reused; want 8 and 592", b.NewConns, b.ReusedConns)
	}
	// The eight connects took 150, 160, ..., 220 µs: mean 185 µs.
	connect := b.PhaseHistograms[PhaseConnect]
	if connect.Count() != 8 || (connect.Mean()-185*time.Microsecond).Abs() > time.Microsecond {
		t.Errorf("connect: n %d mean %v; want 8 and 185µs", connect.Count(), connect.Mean())
	}
	if n := b.PhaseHistograms[PhaseDNS].Count() + b.PhaseHistograms[PhaseTLS].Count(); n != 0 {
		t.Errorf("%d DNS or TLS samples, want none", n)
	}
	// Every request that got a response has a TTFB: 2 ms in the synthetic run (the cut ones too).
	if ttfb := b.PhaseHistograms[PhaseTTFB]; ttfb.Count() != 600 || (ttfb.Quantile(0.5)-2*time.Millisecond).Abs() > 10*time.Microsecond {
		t.Errorf("ttfb: n %d p50 %v", ttfb.Count(), ttfb.Quantile(0.5))
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, b); err != nil {
		t.Fatal(err)
	}
	f, err := Decode(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	back := f.Bench
	if back.NewConns != 8 || back.ReusedConns != 592 || len(back.Phases) != 2 || back.Phases[0].Metric != PhaseConnect ||
		back.Phases[0].Percentiles[0] != b.Phases[0].Percentiles[0] {
		t.Errorf("read back: %d new, %d reused, phases %+v", back.NewConns, back.ReusedConns, back.Phases)
	}
	var again bytes.Buffer
	if err := WriteJSON(&again, back); err != nil {
		t.Fatal(err)
	}
	// The phases' keys and histograms write back the same (a tail fit's derived figures may
	// move in their last digit, which is not this test's business).
	a, z := bytes.Split(buf.Bytes(), []byte("\n")), bytes.Split(again.Bytes(), []byte("\n"))
	if len(a) != len(z) {
		t.Fatalf("%d lines written, %d written again", len(a), len(z))
	}
	for i := range a {
		phase := bytes.Contains(a[i], []byte("connect")) || bytes.Contains(a[i], []byte("ttfb")) || bytes.Contains(a[i], []byte("connections"))
		if phase && !bytes.Equal(a[i], z[i]) {
			t.Errorf("line %d written again differs:\n%s\n%s", i+1, a[i], z[i])
		}
	}
	m, err := Merge(b, Summarize(syntheticResult(10, 300), Options{}))
	if err != nil {
		t.Fatal(err)
	}
	if m.NewConns != 16 || m.ReusedConns != 592+292 || m.PhaseHistograms[PhaseConnect].Count() != 16 {
		t.Errorf("merged: %d new, %d reused, %d connects", m.NewConns, m.ReusedConns, m.PhaseHistograms[PhaseConnect].Count())
	}
}
