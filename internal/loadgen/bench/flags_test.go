package bench

import (
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/dataset"
	"github.com/ragtail/ragtail/loadgen/report"
	"github.com/ragtail/ragtail/loadgen/shape"
	"github.com/ragtail/ragtail/loadgen/stats"
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
	if !o.OverrideMaxTokens || o.SendTemperature || o.MaxTokens != 64 || !slices.Equal(o.Rates, []float64{1, 2}) || !o.Bisect || o.Article.Ranks == 0 {
		t.Errorf("sweep options after parse: %+v", o)
	}
}

// TestTypedFlagDefaults pins the defaults of the flags read into typed values: they are what
// --help shows and what the manifests' flag checks compare against.
func TestTypedFlagDefaults(t *testing.T) {
	t.Parallel()
	want := map[string]string{
		"shape": "poisson", "dataset": "mixed", "goodput": "", "percentile-metrics": "all",
		"metric-percentiles": "50,90,95,99,99.9", "extra-body": "", "http-client": "h1",
		"request-rate": "inf", "segment": "", "start-at": "",
	}
	var o Options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	o.RegisterFlags(fs)
	for name, def := range want {
		if f := fs.Lookup(name); f == nil || f.DefValue != def {
			t.Errorf("--%s: default %+v, want %q", name, f, def)
		}
	}
	if o.Shape.Article || o.Shape.Process.Name != shape.ProcessPoisson || len(o.Dataset.Lengths) != 3 || o.Dataset.File != "" ||
		!slices.Equal(o.PercentileMetrics, report.AllMetrics) || !slices.Equal(o.Percentiles, report.DefaultPercentiles) ||
		o.Goodput != nil || o.Segment != nil || !o.StartAt.IsZero() {
		t.Errorf("typed defaults: %+v", o)
	}
	var so SweepOptions
	sfs := flag.NewFlagSet("sweep", flag.ContinueOnError)
	so.RegisterFlags(sfs)
	for _, name := range []string{"rates", "concurrencies", "slo", "segment", "start-at"} {
		if f := sfs.Lookup(name); f == nil || f.DefValue != "" {
			t.Errorf("sweep --%s: default %+v, want none", name, f)
		}
	}
}

// TestTypedFlagValues reads each typed flag and writes it back as the flag reads it.
func TestTypedFlagValues(t *testing.T) {
	t.Parallel()
	var o Options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	o.RegisterFlags(fs)
	args := []string{"--shape", "Ramp:1,50,60s", "--dataset", "synthetic:100-200", "--goodput", "ttft:300,e2el:2000",
		"--percentile-metrics", "e2el,ttft", "--metric-percentiles", "99.9,50", "--extra-body", `{"ignore_eos":true}`,
		"--http-client", "net/http", "--segment", "1/4", "--start-at", "4102444800"}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if !o.Shape.profiled() || o.Shape.Process.Profile[0] != (shape.Segment{From: 1, To: 50, For: time.Minute}) {
		t.Errorf("shape %+v", o.Shape)
	}
	if !slices.Equal(o.Dataset.Lengths, []shape.Length{{Min: 100, Max: 200}}) || o.Dataset.String() != "synthetic:100-200" {
		t.Errorf("dataset %+v", o.Dataset)
	}
	if l, ok := o.Goodput.Limit(stats.SLOE2EL); !ok || l != 2*time.Second || len(o.Goodput) != 2 {
		t.Errorf("goodput %v", o.Goodput)
	}
	if !slices.Equal(o.PercentileMetrics, []string{report.MetricTTFT, report.MetricE2EL}) || !slices.Equal(o.Percentiles, []float64{50, 99.9}) {
		t.Errorf("metrics %v, percentiles %v", o.PercentileMetrics, o.Percentiles)
	}
	if o.ExtraBody["ignore_eos"] != true || o.HTTPClient != "net/http" || *o.Segment != (loadgen.SegmentOf{Index: 1, Count: 4}) ||
		!o.StartAt.Equal(time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("extra body %v, http client %q, segment %v, start %v", o.ExtraBody, o.HTTPClient, o.Segment, o.StartAt)
	}
	written := map[string]string{"shape": "Ramp:1,50,60s", "goodput": "ttft:300,e2el:2000", "percentile-metrics": "ttft,e2el",
		"metric-percentiles": "50,99.9", "extra-body": `{"ignore_eos":true}`, "segment": "1/4", "start-at": "2100-01-01T00:00:00Z"}
	for name, want := range written {
		if got := fs.Lookup(name).Value.String(); got != want {
			t.Errorf("--%s written %q, want %q", name, got, want)
		}
	}
}

func TestParseDataset(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "short") // a file named like a length is the file
	if err := os.WriteFile(file, []byte(`[]`), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		spec string
		want Dataset
		err  string
	}{
		{spec: "mixed", want: Dataset{Lengths: []shape.Length{shape.Short, shape.Medium, shape.Long}}},
		{spec: "64", want: Dataset{Lengths: []shape.Length{{Min: 64, Max: 64}}}},
		{spec: "synthetic:short", want: Dataset{Lengths: []shape.Length{shape.Short}}},
		{spec: file, want: Dataset{File: file}},
		{spec: "keys", want: Dataset{Keys: true}},
		{spec: "keys:ids.txt", want: Dataset{Keys: true, File: "ids.txt"}},
		{spec: "azure:trace.csv", want: Dataset{Trace: dataset.Azure, File: "trace.csv"}},
		{spec: "Mooncake:t.jsonl", want: Dataset{Trace: dataset.Mooncake, File: "t.jsonl"}},
		{spec: "synthetic:0", err: "synthetic length"},
		{spec: "keys:", err: "keys:FILE"},
		{spec: "nothing-here.json", err: "neither a file nor"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			got, err := ParseDataset(tt.spec)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			tt.want.spec = tt.spec
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// TestCancelFlag: --cancel is read when the command line is, a bad value names the flag, and
// a token or first-token point needs streaming.
func TestCancelFlag(t *testing.T) {
	t.Parallel()
	parse := func(args ...string) (Options, error) {
		var o Options
		fs := flag.NewFlagSet("bench", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.RegisterFlags(fs)
		err := fs.Parse(args)
		o.FlagsParsed(fs)
		return o, err
	}
	o, err := parse("--cancel", "fraction=0.1,after=ttft+200ms")
	if err != nil || o.Cancel != (loadgen.Cancellations{Fraction: 0.1, After: loadgen.CancelPoint{AfterFirstToken: true, Delay: 200 * time.Millisecond}}) {
		t.Fatalf("--cancel read as %+v, %v", o.Cancel, err)
	}
	if err := o.validate(); err != nil {
		t.Errorf("validate: %v", err)
	}
	if _, err := parse("--cancel", "fraction=2,after=1s"); err == nil || !strings.Contains(err.Error(), "-cancel") {
		t.Errorf("bad --cancel: %v, want an error naming the flag", err)
	}
	o, err = parse("--cancel", "fraction=0.5,after=tokens:20", "--stream=false")
	if err != nil {
		t.Fatal(err)
	}
	if err := o.validate(); err == nil || !strings.Contains(err.Error(), "--cancel") {
		t.Errorf("tokens:20 without streaming: %v, want an error naming --cancel", err)
	}
	o, _ = parse("--cancel", "fraction=0.5,after=2s", "--stream=false")
	if err := o.validate(); err != nil {
		t.Errorf("a time from the send needs no streaming: %v", err)
	}
}
