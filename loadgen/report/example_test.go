package report_test

import (
	"fmt"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/report"
)

// Two generators measured 100 requests each; merging their benches gives the figures of all
// 200, as if one generator had measured them (e2el 100..199 ms twice over: the median is the
// 100th of 200 values, 149 ms).
func ExampleMerge() {
	run := func(offset time.Duration) *report.Bench {
		res := &loadgen.Result{Start: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
		for i := range 100 {
			at := offset + time.Duration(i)*10*time.Millisecond
			res.Records = append(res.Records, loadgen.Record{Index: i, Intended: at, Sent: at,
				FirstToken: at + 50*time.Millisecond, End: at + time.Duration(100+i)*time.Millisecond, Status: 200})
			res.Duration = max(res.Duration, res.Records[i].End)
		}
		return report.Summarize(res, report.Options{})
	}
	merged, err := report.Merge(run(0), run(5*time.Millisecond))
	if err != nil {
		panic(err)
	}
	e2el, _ := merged.Metric(report.MetricE2EL)
	fmt.Println(merged.Completed, merged.MergedFrom, e2el.Median.Round(time.Millisecond))
	// Output: 200 2 149ms
}

func ExampleParsePercentileSLO() {
	slo, err := report.ParsePercentileSLO("e2el:p95:2000")
	if err != nil {
		panic(err)
	}
	fmt.Println(slo.Metric, slo.Percentile, slo.Limit)
	// Output: e2el 95 2s
}
