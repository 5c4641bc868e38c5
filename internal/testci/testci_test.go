package testci_test

import (
	"strings"
	"testing"

	"github.com/ragtail/ragtail/internal/testci"
)

// recorder is a testing.TB that records how a test ended instead of ending it.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Skipf(format string, args ...any) { r.skipped = format }

func (r *recorder) Fatalf(format string, args ...any) { r.failed = format }

func TestSkip(t *testing.T) {
	for _, tt := range []struct {
		ci       string
		wantFail bool
	}{{"", false}, {"false", false}, {"true", true}, {"1", true}, {"yes", false}} {
		t.Run("CI="+tt.ci, func(t *testing.T) {
			t.Setenv("CI", tt.ci)
			r := &recorder{TB: t}
			testci.Skip(r, "no %s here", "promtool")
			if testci.Running() != tt.wantFail {
				t.Errorf("Running() = %v with CI=%q", testci.Running(), tt.ci)
			}
			if tt.wantFail && (r.failed == "" || r.skipped != "" || !strings.Contains(r.failed, "a skip under CI")) {
				t.Errorf("CI=%q: failed %q, skipped %q; want a failure saying why", tt.ci, r.failed, r.skipped)
			}
			if !tt.wantFail && (r.skipped == "" || r.failed != "") {
				t.Errorf("CI=%q: failed %q, skipped %q; want a skip", tt.ci, r.failed, r.skipped)
			}
		})
	}
}
