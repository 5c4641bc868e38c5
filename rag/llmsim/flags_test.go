package llmsim

import (
	"strings"
	"testing"
)

func TestParseEngineArgs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, args, wantErr string
		check               func(t *testing.T, seqs int, prefix, chunked *bool)
	}{
		{name: "empty keeps the profile", args: "", check: func(t *testing.T, seqs int, prefix, chunked *bool) {
			if seqs != 0 || prefix != nil || chunked != nil {
				t.Errorf("got seqs %d prefix %v chunked %v; want nothing set", seqs, prefix, chunked)
			}
		}},
		{name: "prefix caching and a batch cap", args: "--enable-prefix-caching --max-num-seqs 64", check: func(t *testing.T, seqs int, prefix, chunked *bool) {
			if seqs != 64 || prefix == nil || !*prefix || chunked != nil {
				t.Errorf("got seqs %d prefix %v chunked %v; want 64, on, unset", seqs, prefix, chunked)
			}
		}},
		{name: "vLLM's off spelling", args: "--no-enable-chunked-prefill", check: func(t *testing.T, _ int, _, chunked *bool) {
			if chunked == nil || *chunked {
				t.Errorf("chunked %v; want off", chunked)
			}
		}},
		{name: "not an engine flag", args: "--addr :9000", wantErr: "--addr is not an engine flag"},
		{name: "unknown flag", args: "--enable-magic", wantErr: "flag provided but not defined"},
		{name: "stray argument", args: "--max-num-seqs 8 extra", wantErr: "unexpected argument"},
		{name: "contradiction", args: "--enable-prefix-caching --no-enable-prefix-caching", wantErr: "contradict"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, err := ParseEngineArgs(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseEngineArgs(%q) = %v; want an error containing %q", tt.args, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, a.MaxNumSeqs, a.PrefixCaching, a.ChunkedPrefill)
		})
	}
}
