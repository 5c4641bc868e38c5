package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
)

// labelsOf lists ctx's pprof labels, key and value in turn, in pprof's order.
func labelsOf(ctx context.Context) []string {
	var kv []string
	pprof.ForLabels(ctx, func(k, v string) bool {
		kv = append(kv, k, v)
		return true
	})
	return kv
}

// TestWithLabelsAsPprof checks that withLabels gives the labels pprof.WithLabels gives, whatever
// ctx carries before (nothing, keys before, between and after own's, own's keys, more labels than
// its stack buffer holds), and allocates no more than it.
func TestWithLabelsAsPprof(t *testing.T) {
	many := make([]string, 0, 2*(maxMergedLabels+3))
	for i := range maxMergedLabels + 3 {
		many = append(many, fmt.Sprintf("k%02d", i), "v")
	}
	stage := []string{ProfileLabel, "retrieve", ProfileSpanIDLabel, "00f067aa0ba902b7"}
	for _, tc := range []struct {
		name   string
		parent []string // labels ctx carries
		own    []string
	}{
		{"no parent labels", nil, stage},
		{"profiler's root labels", []string{"span_id", "53995c3f42cd8ad8", "span_name", "POST /v1/chat/completions", "trace_id", "4bf92f3577b34da6a3ce929d0e0e4736"}, stage},
		{"root labels, stage alone", []string{"span_id", "53995c3f42cd8ad8", "span_name", "x", "trace_id", "4bf9"}, stage[:2]},
		{"keys before own's", []string{"a", "1", "arm", "all"}, stage},
		{"keys after own's", []string{"z", "1", "zz", "2"}, stage},
		{"own's keys only", []string{ProfileLabel, "embed", ProfileSpanIDLabel, "ffff"}, stage},
		{"an earlier stage", []string{ProfileLabel, "embed", "trace_id", "4bf9"}, stage},
		{"more than the buffer", many, stage},
		{"more than the buffer, own among them", append(slices.Clone(many), "rag_stagf", "x"), stage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.parent != nil {
				ctx = pprof.WithLabels(ctx, pprof.Labels(tc.parent...))
			}
			want := labelsOf(pprof.WithLabels(ctx, pprof.Labels(tc.own...)))
			hidden := hideLabels(ctx)
			pre := pprof.Labels(tc.own...)
			var merging float64 // allocations onto ctx itself
			for _, onto := range []struct {
				name string
				ctx  context.Context
			}{{"onto ctx", ctx}, {"onto ctx with its labels hidden", hidden}} {
				if got := labelsOf(withLabels(ctx, onto.ctx, nil, tc.own...)); !slices.Equal(got, want) {
					t.Errorf("withLabels %s: %q\nwant %q", onto.name, got, want)
				}
				if got := labelsOf(withLabels(ctx, onto.ctx, &pre, tc.own...)); !slices.Equal(got, want) {
					t.Errorf("withLabels %s, with the set built: %q\nwant %q", onto.name, got, want)
				}
				ours := testing.AllocsPerRun(100, func() { _ = withLabels(ctx, onto.ctx, nil, tc.own...) })
				theirs := testing.AllocsPerRun(100, func() { _ = pprof.WithLabels(ctx, pprof.Labels(tc.own...)) })
				if ours > theirs {
					t.Errorf("withLabels %s: %.0f allocations, pprof.WithLabels %.0f", onto.name, ours, theirs)
				}
				if onto.ctx == ctx {
					merging = ours
				} else if tc.parent != nil && ours >= merging {
					// With ctx's labels hidden, pprof.WithLabels has nothing to merge and copy.
					t.Errorf("withLabels %s: %.0f allocations, as many as onto ctx itself", onto.name, ours)
				}
				t.Logf("withLabels %s: %.0f allocations, pprof.WithLabels %.0f", onto.name, ours, theirs)
			}
		})
	}
}

// TestHideLabels checks that the pipeline learnt runtime/pprof's label key, so that a stage's
// labels go on a context without the run's (no merge, no copy of the list), and that a context
// with its labels hidden shows pprof none while keeping every other value, its deadline and its
// cancellation; and that labels put over it, made the goroutine's, are all the goroutine has.
func TestHideLabels(t *testing.T) {
	if labelKey == nil {
		t.Fatal("runtime/pprof's label key was not learnt: every stage's labels are merged with the run's again (learnLabelKey)")
	}
	type key struct{}
	parent, cancel := context.WithCancel(context.WithValue(
		pprof.WithLabels(context.Background(), pprof.Labels("span_id", "53995c3f42cd8ad8", "trace_id", "4bf9")), key{}, "v"))
	hidden := hideLabels(parent)
	if got := labelsOf(hidden); len(got) != 0 {
		t.Errorf("hidden context's labels: %q, want none", got)
	}
	if _, ok := pprof.Label(hidden, "trace_id"); ok {
		t.Error("pprof.Label finds trace_id on the hidden context")
	}
	if hidden.Value(key{}) != "v" {
		t.Errorf("hidden context's value: %v, want v", hidden.Value(key{}))
	}
	cancel()
	if hidden.Err() == nil {
		t.Error("the hidden context is not cancelled with its parent")
	}

	// Made the goroutine's, a stage's labels over the hidden context are exactly its own.
	stage := withLabels(parent, hidden, nil, ProfileLabel, "embed", ProfileSpanIDLabel, "00f067aa0ba902b7")
	want := []string{ProfileLabel, "embed", ProfileSpanIDLabel, "00f067aa0ba902b7", "trace_id", "4bf9"}
	if got := labelsOf(stage); !slices.Equal(got, want) {
		t.Fatalf("stage labels: %q, want %q", got, want)
	}
	done := make(chan []string)
	go func() {
		pprof.SetGoroutineLabels(stage)
		var buf bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
		done <- goroutineLabels(buf.String(), "TestHideLabels.func")
	}()
	got := <-done
	slices.Sort(got)
	wantSorted := []string{`"rag_stage":"embed"`, `"span_id":"00f067aa0ba902b7"`, `"trace_id":"4bf9"`}
	if !slices.Equal(got, wantSorted) {
		t.Errorf("the goroutine's labels: %q, want %q", got, wantSorted)
	}
}

// goroutineLabels returns the labels of the first goroutine in a debug=1 goroutine profile whose
// stack has a frame containing fn, as pprof prints them ("key":"value").
func goroutineLabels(profile, fn string) []string {
	for _, rec := range strings.Split(profile, "\n\n") {
		if !strings.Contains(rec, fn) {
			continue
		}
		for _, line := range strings.Split(rec, "\n") {
			if rest, ok := strings.CutPrefix(line, "# labels: {"); ok {
				return strings.Split(strings.TrimSuffix(rest, "}"), ", ")
			}
		}
	}
	return nil
}
