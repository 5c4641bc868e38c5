package pipeline

import (
	"context"
	"runtime/pprof"
	"sync/atomic"
	"time"
)

// fanTask is one branch of a stage's fan-out: a shard's search, a chunk's lookup.
type fanTask interface {
	// branch runs branch i.
	branch(i int)
}

// fanJob is a branch to run on a fan-out worker, with the context whose pprof labels it runs
// under.
type fanJob struct {
	task fanTask
	i    int
	ctx  context.Context
}

// run runs j under its context's pprof labels, and leaves the goroutine unlabelled: a worker
// waiting for its next branch belongs to no request.
func (j fanJob) run() {
	pprof.SetGoroutineLabels(j.ctx)
	j.task.branch(j.i)
	pprof.SetGoroutineLabels(context.Background())
}

// fanWorkers runs the branches of the pipeline's fan-outs on goroutines that outlive them.
//
// A goroutine per branch, the plain way, starts each on a small stack (the runtime's average of
// the stacks it scanned at the last collection, 2 KB at least) that the search or the lookup
// outgrows: the runtime then copies the stack to one twice its size, frame by frame. On
// BenchmarkPipelineTelemetry's tiny corpus that copying was about a tenth of a request's CPU,
// telemetry on or off; a worker keeps its grown stack from branch to branch (until a collection
// finds it mostly unused and shrinks it), and spares the goroutine's start and its closure too.
//
// A branch goes to a worker waiting for one; when none waits, a new worker starts, up to
// maxFanWorkers, and past that the branch runs on a goroutine of its own, so that a branch never
// queues behind another. A worker that has waited fanWorkerIdle for a branch exits.
type fanWorkers struct {
	jobs    chan fanJob   // unbuffered: a send succeeds only into a waiting worker's hands
	max     int32         // workers kept at most
	idle    time.Duration // how long a worker waits for a branch before it exits
	workers atomic.Int32  // workers running, busy or waiting
}

const (
	// maxFanWorkers bounds the workers kept: enough for the branches of tens of concurrent
	// requests; branches beyond it run on goroutines of their own.
	maxFanWorkers = 256
	// fanWorkerIdle is how long a worker waits for a branch before it exits.
	fanWorkerIdle = 10 * time.Second
)

// newFanWorkers returns fan-out workers keeping at most max workers, each waiting idle for a
// branch before it exits.
func newFanWorkers(maxWorkers int32, idle time.Duration) *fanWorkers {
	return &fanWorkers{jobs: make(chan fanJob), max: maxWorkers, idle: idle}
}

// fanout is the process's fan-out workers, shared by every pipeline.
var fanout = newFanWorkers(maxFanWorkers, fanWorkerIdle)

// goBranch runs branch i of task on a worker (or a goroutine of its own), under ctx's pprof
// labels.
func (w *fanWorkers) goBranch(ctx context.Context, task fanTask, i int) {
	j := fanJob{task: task, i: i, ctx: ctx}
	select {
	case w.jobs <- j:
		return
	default:
	}
	if w.workers.Add(1) <= w.max {
		go w.work(j)
		return
	}
	w.workers.Add(-1)
	go j.run()
}

// work runs j, then the branches handed to it, until none comes for w.idle.
func (w *fanWorkers) work(j fanJob) {
	defer w.workers.Add(-1)
	idle := time.NewTimer(w.idle)
	defer idle.Stop()
	for {
		j.run()
		j = fanJob{} // hold no request's state while waiting
		idle.Reset(w.idle)
		select {
		case j = <-w.jobs:
		case <-idle.C:
			return
		}
	}
}
