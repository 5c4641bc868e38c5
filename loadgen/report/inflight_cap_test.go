package report

import (
	"bytes"
	"testing"
)

func TestInFlightCapRoundTripsAndMerges(t *testing.T) {
	t.Parallel()
	// The default cap a run applied is in its config, read back as written; the merge of two
	// generators' results has the cap of both (each had its own).
	res := syntheticResult(5, 200)
	res.Config.InFlightCap = 1024
	b := Summarize(res, Options{})
	var buf bytes.Buffer
	if err := WriteJSON(&buf, b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(buf.Bytes(), []byte(`"in_flight_cap": 1024`)) {
		t.Fatalf("no in_flight_cap in %s", buf.Bytes()[:min(buf.Len(), 600)])
	}
	f, err := Decode(&buf)
	if err != nil || f.Bench == nil {
		t.Fatalf("decode: %v", err)
	}
	if f.Bench.Config.InFlightCap != 1024 {
		t.Errorf("in_flight_cap read back as %d", f.Bench.Config.InFlightCap)
	}
	m, err := Merge(b, f.Bench)
	if err != nil {
		t.Fatal(err)
	}
	if m.Config.InFlightCap != 2048 {
		t.Errorf("merged in_flight_cap %d, want 2048", m.Config.InFlightCap)
	}
}
