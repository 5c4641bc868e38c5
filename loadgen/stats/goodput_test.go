package stats

import (
	"testing"
	"time"
)

func TestParseGoodput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    string // canonical form; "" with wantErr false means no SLO
		wantErr bool
	}{
		{"", "", false},
		{"ttft:300,e2el:2000", "ttft:300,e2el:2000", false},
		{"ttft:300 e2el:2000 tpot:50", "ttft:300,e2el:2000,tpot:50", false},
		{"TTFT:12.5, itl:40", "ttft:12.5,itl:40", false},
		{"ttfo:800,ttft:300", "ttfo:800,ttft:300", false},
		{"ttft", "", true},
		{"ttft:", "", true},
		{"ttft:-1", "", true},
		{"ttft:0", "", true},
		{"ttft:NaN", "", true},
		{"ttft:inf", "", true},
		{"ttft:99999999999", "", true},
		{"latency:10", "", true},
		{"ttft:1,ttft:2", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseGoodput(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err == nil && got.String() != tt.want {
				t.Errorf("got %q, want %q", got.String(), tt.want)
			}
		})
	}
}

func FuzzParseGoodput(f *testing.F) {
	for _, s := range []string{"ttft:300,e2el:2000", "tpot:5 itl:1.5", "x:1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		slos, err := ParseGoodput(s)
		if err != nil {
			return
		}
		again, err := ParseGoodput(slos.String())
		if err != nil || again.String() != slos.String() {
			t.Fatalf("%q -> %q does not parse back: %v", s, slos.String(), err)
		}
	})
}

func TestSLOsMeets(t *testing.T) {
	t.Parallel()
	slos, err := ParseGoodput("ttft:300,ttfo:900,tpot:50,itl:200,e2el:2000")
	if err != nil {
		t.Fatal(err)
	}
	ok := RequestLatencies{TTFT: 300 * time.Millisecond, HasTTFT: true, TTFO: 900 * time.Millisecond, HasTTFO: true, TPOT: 50 * time.Millisecond, HasTPOT: true,
		MaxITL: 200 * time.Millisecond, HasITL: true, E2EL: 2 * time.Second}
	tests := []struct {
		name string
		mod  func(r *RequestLatencies)
		want bool
	}{
		{"all at the limit", func(*RequestLatencies) {}, true},
		{"slow first token", func(r *RequestLatencies) { r.TTFT++ }, false},
		{"no first token", func(r *RequestLatencies) { r.HasTTFT = false }, false},
		{"slow answer after reasoning", func(r *RequestLatencies) { r.TTFO++ }, false},
		{"no answer token", func(r *RequestLatencies) { r.HasTTFO = false }, false},
		{"slow tokens", func(r *RequestLatencies) { r.TPOT++ }, false},
		{"one token: tpot does not apply", func(r *RequestLatencies) { r.TPOT, r.HasTPOT = time.Hour, false }, true},
		{"a stall", func(r *RequestLatencies) { r.MaxITL++ }, false},
		{"one chunk: itl does not apply", func(r *RequestLatencies) { r.MaxITL, r.HasITL = time.Hour, false }, true},
		{"slow end", func(r *RequestLatencies) { r.E2EL++ }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ok
			tt.mod(&r)
			if got := slos.Meets(r); got != tt.want {
				t.Errorf("Meets = %v, want %v", got, tt.want)
			}
		})
	}
	if !SLOs(nil).Meets(RequestLatencies{}) {
		t.Error("no SLO must always be met")
	}
	if d, ok := slos.Limit(SLOE2EL); !ok || d != 2*time.Second {
		t.Errorf("Limit(e2el) = %v %v", d, ok)
	}
}
