package link_test

import (
	"fmt"

	"github.com/ragtail/ragtail/rag/link"
)

// ExampleParse shows the text form of a link's toxics and its canonical spelling.
func ExampleParse() {
	spec, err := link.Parse("jitter:1ms, latency:5ms, bandwidth:2MB/s")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(spec.Latency, spec.Jitter, spec.BandwidthKBps)
	fmt.Println(spec)
	_, err = link.Parse("latency:5ms,jitter:9ms")
	fmt.Println(err)
	// Output:
	// 5ms 1ms 2000
	// latency:5ms,jitter:1ms,bandwidth:2000KB/s
	// invalid request: link spec: jitter 9ms exceeds latency 5ms: a delay cannot be negative
}
