package bench

import (
	"flag"
	"io"
	"math"
	"testing"
)

func TestOptionsFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                 string
		args                 []string
		numPrompts           int
		rate                 float64
		sendTemp, overrideMT bool
	}{
		{name: "defaults", numPrompts: 1000, rate: math.Inf(1)},
		{name: "duration lifts the request limit", args: []string{"--duration", "5s"}, rate: math.Inf(1)},
		{name: "both limits given", args: []string{"--duration", "5s", "--num-prompts", "7"}, numPrompts: 7, rate: math.Inf(1)},
		{name: "given at their defaults, still sent", args: []string{"--temperature", "0", "--max-tokens", "256", "--request-rate", "2.5"},
			numPrompts: 1000, rate: 2.5, sendTemp: true, overrideMT: true},
		{name: "inf in any case", args: []string{"--request-rate", "INF"}, numPrompts: 1000, rate: math.Inf(1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var o Options
			fs := flag.NewFlagSet("bench", flag.ContinueOnError)
			o.RegisterFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			o.FlagsParsed(fs)
			if o.NumPrompts != tt.numPrompts || o.RequestRate != tt.rate || o.SendTemperature != tt.sendTemp || o.OverrideMaxTokens != tt.overrideMT {
				t.Errorf("num-prompts %d, rate %v, send temperature %v, override max-tokens %v; want %d, %v, %v, %v",
					o.NumPrompts, o.RequestRate, o.SendTemperature, o.OverrideMaxTokens, tt.numPrompts, tt.rate, tt.sendTemp, tt.overrideMT)
			}
		})
	}
}

func TestRequestRateFlagRejects(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
