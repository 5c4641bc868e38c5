package dataset_test

import (
	"fmt"

	"github.com/ragtail/ragtail/loadgen/dataset"
)

func ExampleEscapeKey() {
	fmt.Println(dataset.DefaultKeyPath + dataset.EscapeKey("guides/kv cache.md#2"))
	// Output:
	// /v1/documents/guides/kv%20cache.md%232
}
