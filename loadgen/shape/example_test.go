package shape_test

import (
	"fmt"

	"github.com/ragtail/ragtail/loadgen/shape"
)

func ExampleParseProcess() {
	// Ten requests a second for half a second, then thirty, evenly spaced (burstiness 0).
	p, err := shape.ParseProcess("step:10@500ms,30@100ms", 0, 0, 1)
	if err != nil {
		panic(err)
	}
	fmt.Println(p)
	for at, ok := p.Next(); ok; at, ok = p.Next() {
		fmt.Print(at, " ")
	}
	fmt.Println()
	// Output:
	// profile(10@500ms,30@100ms;even)
	// 0s 100ms 200ms 300ms 400ms 500ms 533.333333ms 566.666666ms 600ms
}

func ExampleArticleConfig_MeanRate() {
	// The article's shaper: a 100 ms gap shrunk to 100 ms / (b + 1) by Poisson(2.75) bursts.
	c := shape.DefaultArticle()
	fmt.Printf("%.1f req/s\n", c.MeanRate())
	fmt.Printf("%v\n", c.WithRate(10).Gap)
	// Output:
	// 29.4 req/s
	// 293.780776ms
}
