package admission_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/admission"
)

func ExamplePool() {
	// One worker, no queue, shed when busy.
	pool, err := admission.NewPool(admission.Config{Workers: 1, QueueCapacity: 0, Policy: admission.PolicyReject})
	if err != nil {
		panic(err)
	}
	release, err := pool.Acquire(context.Background())
	if err != nil {
		panic(err)
	}
	_, err = pool.Acquire(context.Background())
	fmt.Println("second request shed:", errors.Is(err, rag.ErrOverloaded))
	release()
	s := pool.Stats()
	fmt.Printf("in flight %d, admitted %d, rejected %d\n", s.InFlight, s.Admitted, s.Rejected)
	// Output:
	// second request shed: true
	// in flight 0, admitted 1, rejected 1
}
