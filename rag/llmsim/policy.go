package llmsim

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/openai"
)

// SchedulingPolicy orders the engine's waiting queue and chooses whom to preempt, as vLLM's
// --scheduling-policy does.
type SchedulingPolicy string

const (
	// PolicyFCFS serves requests in arrival order; preempted sequences go back to the front of
	// the queue and the most recently admitted running sequence is preempted first.
	PolicyFCFS SchedulingPolicy = "fcfs"
	// PolicyPriority serves requests by their priority (lower runs first, ties by arrival) and,
	// when KV blocks run out, preempts the running sequence with the highest priority value
	// (the latest arrival among equals).
	PolicyPriority SchedulingPolicy = "priority"
)

// MaxPriority bounds the absolute value of a request's priority.
const MaxPriority = openai.MaxPriority

// ParseSchedulingPolicy parses "fcfs" or "priority"; "" means fcfs.
func ParseSchedulingPolicy(s string) (SchedulingPolicy, error) {
	switch SchedulingPolicy(s) {
	case "", PolicyFCFS:
		return PolicyFCFS, nil
	case PolicyPriority:
		return PolicyPriority, nil
	}
	return "", fmt.Errorf("%w: scheduling policy %.32q is not fcfs or priority", rag.ErrInvalidRequest, s)
}

// WithSchedulingPolicy sets the engine's scheduling policy (default PolicyFCFS).
func WithSchedulingPolicy(p SchedulingPolicy) Option {
	return optionFunc(func(c *config) { c.policy = p })
}

// SchedulingPolicy returns the engine's current scheduling policy.
func (e *Engine) SchedulingPolicy() SchedulingPolicy {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.policy
}

// SetSchedulingPolicy changes the scheduling policy of a running engine. Switching to priority
// reorders the waiting queue by priority and arrival; switching to fcfs keeps its order.
func (e *Engine) SetSchedulingPolicy(p SchedulingPolicy) error {
	p, err := ParseSchedulingPolicy(string(p))
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.policy = p
	if p == PolicyPriority {
		slices.SortStableFunc(e.waiting, comparePriority)
	}
	return nil
}

// comparePriority orders sequences by priority value, then by arrival.
func comparePriority(a, b *sequence) int {
	return cmp.Or(cmp.Compare(a.priority, b.priority), cmp.Compare(a.order, b.order))
}

// enqueue puts s in the waiting queue: at the back under fcfs (at the front when it was
// preempted), at its place by priority and arrival under priority.
func (e *Engine) enqueue(s *sequence, preempted bool) {
	switch {
	case e.policy == PolicyPriority:
		i, _ := slices.BinarySearchFunc(e.waiting, s, comparePriority)
		e.waiting = slices.Insert(e.waiting, i, s)
	case preempted:
		e.waiting = slices.Insert(e.waiting, 0, s)
	default:
		e.waiting = append(e.waiting, s)
	}
}

// victim is the running sequence to preempt when blocks run out: the most recently admitted
// under fcfs, the highest priority value (latest arrival among equals) under priority.
func (e *Engine) victim() *sequence {
	if e.policy == PolicyPriority {
		return slices.MaxFunc(e.running, comparePriority)
	}
	return e.running[len(e.running)-1]
}
