package pipeline_test

import (
	"fmt"
	"time"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/pipeline"
)

func ExampleResult_ServerTiming() {
	res := &pipeline.Result{Timings: []rag.StageTiming{
		{Stage: rag.StageAdmission, Duration: 12 * time.Microsecond},
		{Stage: rag.StageEmbed, Duration: 300 * time.Microsecond},
		{Stage: rag.StageRetrieve, Duration: 12100 * time.Microsecond},
		{Stage: rag.StageFetch, Duration: 3 * time.Millisecond},
		{Stage: rag.StageGenerate, Duration: 812500 * time.Microsecond},
		{Stage: rag.StageStream, Duration: 900 * time.Microsecond},
	}}
	fmt.Println("Server-Timing: " + res.ServerTiming())
	// Output:
	// Server-Timing: admission;dur=0.012, embed;dur=0.300, retrieve;dur=12.100, fetch;dur=3.000, generate;dur=812.500, stream;dur=0.900
}
