package profile_test

import (
	"bytes"
	"fmt"
	"time"

	pprofile "github.com/google/pprof/profile"

	"github.com/ragtail/ragtail/telemetry/profile"
)

// ExampleStore_Query keeps the samples of one trace from a stored CPU window.
func ExampleStore_Query() {
	fn := &pprofile.Function{ID: 1, Name: "main.retrieve"}
	loc := &pprofile.Location{ID: 1, Line: []pprofile.Line{{Function: fn}}}
	window := &pprofile.Profile{
		SampleType: []*pprofile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &pprofile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:     10_000_000,
		Function:   []*pprofile.Function{fn},
		Location:   []*pprofile.Location{loc},
		Sample: []*pprofile.Sample{
			{Location: []*pprofile.Location{loc}, Value: []int64{30, 300_000_000},
				Label: map[string][]string{"trace_id": {"4bf92f3577b34da6a3ce929d0e0e4736"}, "rag_stage": {"retrieve"}}},
			{Location: []*pprofile.Location{loc}, Value: []int64{12, 120_000_000},
				Label: map[string][]string{"trace_id": {"0af7651916cd43dd8448eb211c80319c"}}},
		},
	}
	var buf bytes.Buffer
	if err := window.Write(&buf); err != nil {
		panic(err)
	}
	from := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	store := profile.NewStore(60, 0)
	if err := store.Add(profile.KindCPU, from, from.Add(10*time.Second), buf.Bytes()); err != nil {
		panic(err)
	}

	p, err := store.Query(profile.Query{TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", Stage: "retrieve"})
	if err != nil {
		panic(err)
	}
	for _, s := range p.Sample {
		fmt.Println(s.Location[0].Line[0].Function.Name, s.Value[0], "samples")
	}
	// Output:
	// main.retrieve 30 samples
}
