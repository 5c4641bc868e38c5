package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragtail/ragtail/internal/testwait"
)

// probe is a fan-out task whose branches report that they started, then wait to be released.
type probe struct {
	started chan int
	release chan struct{}
	during  func(i int) // called in the branch before it waits; may be nil
}

func newProbe() *probe {
	return &probe{started: make(chan int, 64), release: make(chan struct{})}
}

func (p *probe) branch(i int) {
	if p.during != nil {
		p.during(i)
	}
	p.started <- i
	<-p.release
}

// TestFanWorkersNeverQueue checks that every branch runs at once, past the workers kept too:
// a branch never waits for another to finish.
func TestFanWorkersNeverQueue(t *testing.T) {
	w := newFanWorkers(2, time.Minute)
	p := newProbe()
	const n = 5
	go func() { // not on the test's goroutine: a goBranch that waited would hang it
		for i := range n {
			w.goBranch(context.Background(), p, i)
		}
	}()
	seen := map[int]bool{}
	for range n {
		select {
		case i := <-p.started:
			seen[i] = true
		case <-time.After(2 * time.Second):
			t.Fatalf("only branches %v started while the others ran: a branch waited for another", seen)
		}
	}
	if got := w.workers.Load(); got != 2 {
		t.Errorf("workers = %d with %d branches running, want the 2 kept", got, n)
	}
	close(p.release)
}

// TestFanWorkersReuse checks that a branch goes to a waiting worker rather than a new goroutine.
func TestFanWorkersReuse(t *testing.T) {
	w := newFanWorkers(8, time.Minute)
	p := newProbe()
	close(p.release)
	goroutines := map[string]bool{}
	p.during = func(int) { goroutines[goroutineID()] = true }
	for i := range 20 {
		// The worker is waiting again once it sits in its select; until then a branch may
		// rightly start a second worker.
		w.goBranch(context.Background(), p, i)
		<-p.started
		testwait.For(t, "the worker to wait for a branch", func() bool { return w.waiting() == 1 })
	}
	if len(goroutines) != 1 {
		t.Errorf("20 branches one after another ran on %d goroutines, want 1 worker", len(goroutines))
	}
}

// TestFanWorkersExitWhenIdle checks that a worker exits once it has waited its idle time for a
// branch.
func TestFanWorkersExitWhenIdle(t *testing.T) {
	w := newFanWorkers(8, 20*time.Millisecond)
	p := newProbe()
	close(p.release)
	for i := range 3 {
		w.goBranch(context.Background(), p, i)
	}
	for range 3 {
		<-p.started
	}
	testwait.For(t, "the idle workers to exit", func() bool { return w.workers.Load() == 0 && w.waiting() == 0 })
}

// TestFanWorkersLabels checks that a branch runs under its context's pprof labels and that the
// worker drops them when it is done: a waiting worker belongs to no request, and the wall-clock
// sampler must not charge it to one.
func TestFanWorkersLabels(t *testing.T) {
	w := newFanWorkers(8, time.Minute)
	p := newProbe()
	var during string
	var once sync.Once
	p.during = func(int) { once.Do(func() { during = goroutineProfile(t) }) }
	ctx := pprof.WithLabels(context.Background(), pprof.Labels(ProfileLabel, "fetch", ProfileSpanIDLabel, "00f067aa0ba902b7"))
	w.goBranch(ctx, p, 0)
	<-p.started
	if !hasRecord(during, `"rag_stage":"fetch"`, "(*probe).branch") || !hasRecord(during, `"span_id":"00f067aa0ba902b7"`, "(*probe).branch") {
		t.Errorf("the branch's goroutine does not carry its context's labels:\n%s", during)
	}
	close(p.release)
	testwait.For(t, "the worker to wait for a branch", func() bool { return w.waiting() == 1 })
	after := goroutineProfile(t)
	for rec := range strings.SplitSeq(after, "\n\n") {
		if strings.Contains(rec, "(*fanWorkers).work") && strings.Contains(rec, "# labels:") {
			t.Errorf("a waiting worker still carries labels:\n%s", rec)
		}
	}
}

// goroutineProfile returns the goroutine profile in its text form, labels included.
func goroutineProfile(t *testing.T) string {
	t.Helper()
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// hasRecord reports whether a record of the goroutine profile holds both label and frame.
func hasRecord(profile, label, frame string) bool {
	for rec := range strings.SplitSeq(profile, "\n\n") {
		if strings.Contains(rec, label) && strings.Contains(rec, frame) {
			return true
		}
	}
	return false
}

// goroutineID returns the calling goroutine's id, from its stack's header.
func goroutineID() string {
	var buf [64]byte
	id, _, _ := strings.Cut(strings.TrimPrefix(string(buf[:runtime.Stack(buf[:], false)]), "goroutine "), " ")
	return id
}

// waiting counts w's workers waiting for a branch.
func (w *fanWorkers) waiting() int {
	_, idle := countGoroutines(AllStacks(), fmt.Sprintf("%p", w))
	return idle
}

// AllStacks returns the stacks of every goroutine, as runtime.Stack writes them.
func AllStacks() string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}

// BusyGoroutines counts the goroutines in stacks (AllStacks) but the fan-out workers waiting for
// a branch. Leak checks count these: the workers kept are bounded and exit when idle, and one
// still running a branch counts.
func BusyGoroutines(stacks string) int {
	all, idle := countGoroutines(stacks, "")
	return all - idle
}

// countGoroutines counts the goroutines in stacks, and the fan-out workers among them waiting
// for a branch (in a select, the worker's loop their innermost frame): those of the fanWorkers
// at address w, or of any when w is empty.
func countGoroutines(stacks, w string) (all, idle int) {
	for rec := range strings.SplitSeq(stacks, "\n\n") {
		header, frames, _ := strings.Cut(rec, "\n")
		if !strings.HasPrefix(header, "goroutine ") {
			continue
		}
		all++
		if strings.Contains(header, " [select") && strings.HasPrefix(frames, "github.com/ragtail/ragtail/rag/pipeline.(*fanWorkers).work("+w) {
			idle++
		}
	}
	return all, idle
}
