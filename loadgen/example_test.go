package loadgen_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/shape"
)

// instant is a Doer that answers at once; a real run uses loadgen/client.
type instant struct{}

func (instant) Do(_ context.Context, _ *loadgen.Request, origin time.Time, rec *loadgen.Record) {
	rec.Sent = time.Since(origin)
	rec.Status = 200
	rec.End = time.Since(origin)
}

func ExampleRun() {
	arrivals, _ := shape.Constant(100) // a request every 10 ms
	prompts, _ := shape.Synthetic([]shape.Length{shape.Short}, 1)
	res, err := loadgen.Run(context.Background(), loadgen.Config{
		Workload: shape.Open(arrivals, prompts),
		Client:   instant{},
		NumItems: 3,
	})
	if err != nil {
		panic(err)
	}
	for _, r := range res.Records {
		fmt.Println(r.Index, r.Intended, r.OK())
	}
	// Output:
	// 0 0s true
	// 1 10ms true
	// 2 20ms true
}
