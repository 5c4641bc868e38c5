package loadgen

import (
	"math"
	"testing"
	"time"
)

func TestParseCancellations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		want     Cancellations
		err      bool
	}{
		{name: "after the first token", in: "fraction=0.1,after=ttft+200ms", want: Cancellations{0.1, CancelPoint{AfterFirstToken: true, Delay: 200 * time.Millisecond}}},
		{name: "at the first token", in: "after=ttft,fraction=1", want: Cancellations{1, CancelPoint{AfterFirstToken: true}}},
		{name: "after tokens", in: "fraction=0.3,after=tokens:20", want: Cancellations{0.3, CancelPoint{Tokens: 20}}},
		{name: "after the send", in: "fraction=0.5,after=1.5s", want: Cancellations{0.5, CancelPoint{Delay: 1500 * time.Millisecond}}},
		{name: "no fraction", in: "after=200ms", err: true},
		{name: "no point", in: "fraction=0.1", err: true},
		{name: "fraction 0", in: "fraction=0,after=1s", err: true},
		{name: "fraction above 1", in: "fraction=1.5,after=1s", err: true},
		{name: "fraction NaN", in: "fraction=NaN,after=1s", err: true},
		{name: "zero tokens", in: "fraction=0.1,after=tokens:0", err: true},
		{name: "bad ttft", in: "fraction=0.1,after=ttft-2s", err: true},
		{name: "negative delay", in: "fraction=0.1,after=-2s", err: true},
		{name: "unknown key", in: "fraction=0.1,after=1s,when=now", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCancellations(tc.in)
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("ParseCancellations(%q) = %+v, %v; want %+v, error %v", tc.in, got, err, tc.want, tc.err)
			}
			if err != nil {
				return
			}
			again, err := ParseCancellations(got.String())
			if err != nil || again != got {
				t.Errorf("%q read back as %+v, %v", got.String(), again, err)
			}
		})
	}
}

// TestCancellationsChosen: the choice is a Bernoulli(fraction) draw per request, so over n
// requests the share chosen is within 4 standard errors of the fraction; it depends on the
// seed and not on anything else.
func TestCancellationsChosen(t *testing.T) {
	t.Parallel()
	const n = 100000
	for _, f := range []float64{0.01, 0.1, 0.5, 0.9} {
		c := Cancellations{Fraction: f, After: CancelPoint{Tokens: 1}}
		chosen, sameOtherSeed := 0, 0
		for i := range n {
			a := c.Chosen(42, i, i%3)
			if a {
				chosen++
			}
			if a == c.Chosen(43, i, i%3) {
				sameOtherSeed++
			}
			if a != c.Chosen(42, i, i%3) {
				t.Fatalf("item %d chosen differently twice", i)
			}
		}
		se := math.Sqrt(f * (1 - f) / n)
		if got := float64(chosen) / n; math.Abs(got-f) > 4*se {
			t.Errorf("fraction %g: chose %g of the requests, want within %g", f, got, 4*se)
		}
		// Another seed chooses independently: the two agree with probability f^2 + (1-f)^2.
		agree := f*f + (1-f)*(1-f)
		if got := float64(sameOtherSeed) / n; math.Abs(got-agree) > 4*math.Sqrt(agree*(1-agree)/n) {
			t.Errorf("fraction %g: seeds 42 and 43 agree on %g of the requests, want about %g", f, got, agree)
		}
	}
	if (Cancellations{}).Chosen(1, 1, 0) {
		t.Error("the zero Cancellations chose a request")
	}
}

// TestWithCancellations marks the chosen requests, lone ones and session steps, in the order
// the workload gives its items.
func TestWithCancellations(t *testing.T) {
	t.Parallel()
	c := Cancellations{Fraction: 0.5, After: CancelPoint{Tokens: 3}}
	items := make([]Item, 40)
	for i := range items {
		items[i] = Item{At: time.Duration(i) * time.Millisecond, Then: []Step{{}, {}}}
	}
	w := WithCancellations(&sliceWorkload{items: items}, c, 9)
	marked := 0
	for n := 0; ; n++ {
		item, ok := w.Next()
		if !ok {
			break
		}
		reqs := []*Request{&item.Request, &item.Then[0].Request, &item.Then[1].Request}
		for step, r := range reqs {
			if want := c.Chosen(9, n, step); (r.Cancel != nil) != want || (want && *r.Cancel != c.After) {
				t.Errorf("item %d step %d: cancel %v, want chosen %v", n, step, r.Cancel, want)
			}
			if r.Cancel != nil {
				marked++
			}
		}
	}
	if marked == 0 || items[0].Then[0].Request.Cancel != nil || items[0].Then[1].Request.Cancel != nil {
		t.Errorf("%d marked; the workload's own steps must stay unmarked", marked)
	}
}

type sliceWorkload struct{ items []Item }

func (s *sliceWorkload) Next() (Item, bool) {
	if len(s.items) == 0 {
		return Item{}, false
	}
	it := s.items[0]
	s.items = s.items[1:]
	return it, true
}
