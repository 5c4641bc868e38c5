package bench

import (
	"flag"
	"io"
	"math"
	"testing"
)

func TestOptionsFlags(t *testing.T) {
	for _, tc := range []struct {
		args                 []string
		numPrompts           int
		rate                 float64
		sendTemp, overrideMT bool
	}{
		{nil, 1000, math.Inf(1), false, false},
		{[]string{"--duration", "5s"}, 0, math.Inf(1), false, false},
		{[]string{"--duration", "5s", "--num-prompts", "7"}, 7, math.Inf(1), false, false},
		{[]string{"--temperature", "0", "--max-tokens", "256", "--request-rate", "2.5"}, 1000, 2.5, true, true},
		{[]string{"--request-rate", "INF"}, 1000, math.Inf(1), false, false},
	} {
		var o Options
		fs := flag.NewFlagSet("bench", flag.ContinueOnError)
		o.RegisterFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		o.FlagsParsed(fs)
		if o.NumPrompts != tc.numPrompts || o.RequestRate != tc.rate || o.SendTemperature != tc.sendTemp || o.OverrideMaxTokens != tc.overrideMT {
			t.Errorf("%q: num-prompts %d, rate %v, send temperature %v, override max-tokens %v; want %d, %v, %v, %v",
				tc.args, o.NumPrompts, o.RequestRate, o.SendTemperature, o.OverrideMaxTokens, tc.numPrompts, tc.rate, tc.sendTemp, tc.overrideMT)
		}
	}
}

func TestRequestRateFlagRejects(t *testing.T) {
	for _, v := range []string{"0", "-1", "nan", "+Inf", "x"} {
		var o Options
		fs := flag.NewFlagSet("bench", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.RegisterFlags(fs)
		if err := fs.Parse([]string{"--request-rate", v}); err == nil {
			t.Errorf("--request-rate %s accepted (rate %v)", v, o.RequestRate)
		}
	}
}

func TestSweepOptionsFlags(t *testing.T) {
	var o SweepOptions
	fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
	o.RegisterFlags(fs)
	if err := fs.Parse([]string{"--max-tokens", "64", "--rates", "1,2"}); err != nil {
		t.Fatal(err)
	}
	o.FlagsParsed(fs)
	if !o.OverrideMaxTokens || o.SendTemperature || o.MaxTokens != 64 || o.Rates != "1,2" || !o.Bisect || o.Article.Ranks == 0 {
		t.Errorf("sweep options after parse: %+v", o)
	}
}
