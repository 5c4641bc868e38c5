package pipeline

import (
	"context"
	"fmt"
	"runtime/pprof"
	"slices"
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
			if got := labelsOf(withLabels(ctx, nil, tc.own...)); !slices.Equal(got, want) {
				t.Errorf("withLabels: %q\nwant %q", got, want)
			}
			pre := pprof.Labels(tc.own...)
			if got := labelsOf(withLabels(ctx, &pre, tc.own...)); !slices.Equal(got, want) {
				t.Errorf("withLabels with the set built: %q\nwant %q", got, want)
			}
			ours := testing.AllocsPerRun(100, func() { _ = withLabels(ctx, nil, tc.own...) })
			theirs := testing.AllocsPerRun(100, func() { _ = pprof.WithLabels(ctx, pprof.Labels(tc.own...)) })
			if ours > theirs {
				t.Errorf("withLabels: %.0f allocations, pprof.WithLabels %.0f", ours, theirs)
			}
			t.Logf("%.0f allocations, pprof.WithLabels %.0f", ours, theirs)
		})
	}
}
