package fault_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/fault"
	"github.com/ragtail/ragtail/rag/openai"
)

func ExampleParseRule() {
	// The compact form of a --fault flag: laws contain commas, so pairs are separated by ';'.
	r, err := fault.ParseRule("name=slow-retrieve;stage=retrieve;percent=10;delay=pareto:10ms,1.5")
	if err != nil {
		panic(err)
	}
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
	fmt.Println(r)
	// Output:
	// {"name":"slow-retrieve","stage":"retrieve","percent":10,"delay":"pareto:10ms,1.5"}
	// name=slow-retrieve;stage=retrieve;percent=10;delay=pareto:10ms,1.5
}

func ExampleInjector() {
	in, err := fault.NewInjector([]fault.Rule{
		// The article's relative rule without its jitter: max(100ms, baseline x 1.8).
		{Name: "session", Stage: rag.StageRetrieve, Percent: 100,
			Relative: &fault.Relative{Floor: 100 * time.Millisecond, Factor: 1.8}},
		{Name: "outage", Route: "/v1/chat/completions", Percent: 100, Abort: &fault.Abort{Status: 503}},
	}, 1)
	if err != nil {
		panic(err)
	}
	// The pipeline reports each stage's own latency; the rule follows its rolling median.
	for _, ms := range []int{80, 100, 120} {
		in.Observe(rag.StageRetrieve, time.Duration(ms)*time.Millisecond)
	}
	dec := in.Decide(rag.StageRetrieve, "")
	fmt.Println(dec.Fired[0].Rule, dec.Delay)

	_, err = in.Apply(context.Background(), "", "/v1/chat/completions")
	fmt.Println(openai.ToHTTPError(err).Status, err)
	// Output:
	// session 180ms
	// 503 Service Unavailable (injected by fault rule "outage")
}
