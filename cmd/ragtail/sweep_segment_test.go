package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSweepSegmentsMergePointByPoint(t *testing.T) {
	t.Parallel()
	// Two hosts (two sweeps at once) send the two segments of each point's seeded schedule,
	// every point starting on one instant; report merges the sweep files point by point into
	// the whole ladder and says each point's segments are all there.
	srv := startSlowChat(t, time.Millisecond, nil)
	dir := t.TempDir()
	startAt := time.Now().Add(1500 * time.Millisecond).UTC().Format(time.RFC3339Nano)
	args := func(i int) []string {
		return []string{"sweep", "--url", srv.URL + "/v1", "--model", "m", "--rates", "100,200", "--point-duration", "400ms",
			"--drain-timeout", "1s", "--pause", "0s", "--seed", "7", "--segment", fmt.Sprintf("%d/2", i), "--start-at", startAt,
			"--json", filepath.Join(dir, fmt.Sprintf("seg%d.json", i)), "--quiet"}
	}
	errs := make(chan error, 2)
	for i := range 2 {
		go func() { errs <- run(context.Background(), args(i), io.Discard, io.Discard) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	s0, s1 := readJSON(t, filepath.Join(dir, "seg0.json")), readJSON(t, filepath.Join(dir, "seg1.json"))
	p0, _ := s0["points"].([]any)
	p1, _ := s1["points"].([]any)
	if len(p0) != 2 || len(p1) != 2 {
		t.Fatalf("points %d and %d, want 2 each", len(p0), len(p1))
	}
	var completed [2]float64
	for k := range 2 {
		a, b := p0[k].(map[string]any), p1[k].(map[string]any)
		ca, cb := a["config"].(map[string]any), b["config"].(map[string]any)
		if ca["schedule_hash"] == nil || ca["schedule_hash"] != cb["schedule_hash"] || ca["segment"] == nil {
			t.Fatalf("point %d: configs %v and %v, want one schedule hash and a segment each", k, ca, cb)
		}
		completed[k] = a["completed"].(float64) + b["completed"].(float64)
		sa, _ := time.Parse(time.RFC3339Nano, a["start"].(string))
		sb, _ := time.Parse(time.RFC3339Nano, b["start"].(string))
		if d := sa.Sub(sb); d > 50*time.Millisecond || d < -50*time.Millisecond {
			t.Errorf("point %d starts %v and %v: not one instant", k, sa, sb)
		}
	}

	merged := filepath.Join(dir, "merged.json")
	var stderr bytes.Buffer
	if err := run(context.Background(), []string{"report", filepath.Join(dir, "seg0.json"), filepath.Join(dir, "seg1.json"),
		"--json", merged, "--quiet"}, io.Discard, &stderr); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"point 1: all 2 segments of schedule", "point 2: all 2 segments of schedule"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("report did not say %q: %q", want, stderr.String())
		}
	}
	m := readJSON(t, merged)
	if m["schema"] != "ragtail.sweep/v1" {
		t.Fatalf("merged schema %v", m["schema"])
	}
	points, _ := m["points"].([]any)
	for k, raw := range points {
		p := raw.(map[string]any)
		c := p["config"].(map[string]any)
		if p["completed"] != completed[k] || c["segment"] != nil || c["request_rate"] != []float64{100, 200}[k] {
			t.Errorf("merged point %d: completed %v (want %v), config %v", k, p["completed"], completed[k], c)
		}
	}
	// A missing segment stops the merge; a sweep of a whole schedule does not merge at all.
	err := run(context.Background(), []string{"report", filepath.Join(dir, "seg0.json"), filepath.Join(dir, "seg0.json"), "--quiet"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "more than once") {
		t.Errorf("a segment twice: %v", err)
	}
	for _, bad := range [][]string{
		{"--segment", "0/2", "--concurrencies", "1,2"},
		{"--segment", "0/2", "--rates", "1", "--slo", "p95_e2el:100"},
		{"--segment", "0/2", "--rates", "1", "--drain-timeout", "0"},
		{"--segment", "2/2", "--rates", "1"},
	} {
		a := append([]string{"sweep", "--url", srv.URL, "--model", "m", "--point-duration", "100ms", "--quiet"}, bad...)
		if err := run(context.Background(), a, io.Discard, io.Discard); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
