package link_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/link"
)

func TestParse(t *testing.T) {
	t.Parallel()
	cases := []struct {
		text      string
		want      link.Spec
		canonical string
	}{
		{text: "", want: link.Spec{}, canonical: ""},
		{text: "none", want: link.Spec{}, canonical: ""},
		{text: "latency:5ms,jitter:1ms", want: link.Spec{Latency: 5 * time.Millisecond, Jitter: time.Millisecond}, canonical: "latency:5ms,jitter:1ms"},
		{text: " jitter:1ms , latency:5ms ", want: link.Spec{Latency: 5 * time.Millisecond, Jitter: time.Millisecond}, canonical: "latency:5ms,jitter:1ms"},
		{text: "bandwidth:100", want: link.Spec{BandwidthKBps: 100}, canonical: "bandwidth:100KB/s"},
		{text: "bandwidth:2MB/s", want: link.Spec{BandwidthKBps: 2000}, canonical: "bandwidth:2000KB/s"},
		{text: "slow_close:1s", want: link.Spec{SlowClose: time.Second}, canonical: "slow_close:1s"},
		{text: "timeout:0", want: link.Spec{HasTimeout: true}, canonical: "timeout:0s"},
		{text: "reset_peer:500ms", want: link.Spec{ResetPeer: 500 * time.Millisecond, HasResetPeer: true}, canonical: "reset_peer:500ms"},
		{text: "limit_data:4096", want: link.Spec{LimitData: 4096}, canonical: "limit_data:4096"},
		{text: "latency:0", want: link.Spec{}, canonical: ""},
	}
	for _, tc := range cases {
		t.Run(tc.text, func(t *testing.T) {
			got, err := link.Parse(tc.text)
			if err != nil || got != tc.want {
				t.Fatalf("Parse(%q) = %+v, %v; want %+v", tc.text, got, err, tc.want)
			}
			if s := got.String(); s != tc.canonical {
				t.Fatalf("String() = %q, want %q", s, tc.canonical)
			}
		})
	}
	bad := []string{
		"latency", "latency:", "latency:fast", "latency:-1ms", "latency:1500us", "latency:2h",
		"jitter:5ms", "latency:1ms,jitter:2ms", "latency:1ms,latency:2ms", "delay:5ms",
		"bandwidth:fast", "bandwidth:-1KB/s", "limit_data:lots", string(make([]byte, 300)),
	}
	for _, text := range bad {
		t.Run("bad "+text, func(t *testing.T) {
			if s, err := link.Parse(text); !errors.Is(err, rag.ErrInvalidRequest) {
				t.Fatalf("Parse(%q) = %+v, %v; want rag.ErrInvalidRequest", text, s, err)
			}
		})
	}
}

func TestSpecText(t *testing.T) {
	t.Parallel()
	var s link.Spec
	if err := s.UnmarshalText([]byte("latency:20ms")); err != nil || s.Latency != 20*time.Millisecond {
		t.Fatalf("UnmarshalText = %+v, %v", s, err)
	}
	if b, _ := s.MarshalText(); string(b) != "latency:20ms" {
		t.Fatalf("MarshalText = %q", b)
	}
	if err := s.UnmarshalText([]byte("nonsense")); err == nil {
		t.Fatal("UnmarshalText accepted nonsense")
	}
}

// FuzzParse checks that every spec Parse accepts prints in a canonical form that parses back to
// the same spec and prints the same again.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{"", "none", "latency:5ms,jitter:1ms", "bandwidth:2MB/s", "timeout:0,reset_peer:1s",
		"slow_close:1m0s,limit_data:10B", "latency:1h", "jitter:0"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		s, err := link.Parse(text)
		if err != nil {
			if !errors.Is(err, rag.ErrInvalidRequest) {
				t.Fatalf("Parse(%q): %v, not rag.ErrInvalidRequest", text, err)
			}
			return
		}
		canon := s.String()
		again, err := link.Parse(canon)
		if err != nil || again != s {
			t.Fatalf("Parse(%q) = %+v; its String %q parses to %+v, %v", text, s, canon, again, err)
		}
		if again.String() != canon {
			t.Fatalf("String not canonical: %q then %q", canon, again.String())
		}
	})
}
