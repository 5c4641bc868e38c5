package client_test

import (
	"fmt"

	"github.com/ragtail/ragtail/loadgen/client"
)

func ExampleParseServerTiming() {
	st := client.ParseServerTiming(`embed;dur=0.3, retrieve;dur=12.1;desc="4 shards, top 5", generate;dur=812.5`)
	fmt.Println(st["embed"], st["retrieve"], st["generate"])
	// Output:
	// 0.3 12.1 812.5
}
