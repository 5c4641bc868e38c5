package profile

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/pprof/profile"
	"github.com/grafana/pyroscope-go/upstream"
)

// batcher groups the session's short windows (Config.StoreWindow, what the in-process store
// keeps) into the windows pushed to Pyroscope (Config.Window, the upload rate), one group per
// kind: CPU, mutex and block windows and the allocation counts of memory windows are deltas
// and are summed; in-use memory and goroutine snapshots are points in time and the group's last
// one is pushed. A kind this package does not know is pushed as it comes. A batcher is safe for
// concurrent use.
type batcher struct {
	window time.Duration // the pushed window
	short  time.Duration // the session's window

	mu      sync.Mutex
	pending map[Kind][]*upstream.UploadJob
	failed  uint64 // groups that could not be merged (their windows are pushed one by one)
}

func newBatcher(window, short time.Duration) *batcher {
	return &batcher{window: window, short: short, pending: make(map[Kind][]*upstream.UploadJob)}
}

// add takes one short window and returns the jobs to push now: none while a group fills, the
// merged group once it spans the pushed window within half a short window (pyroscope-go's CPU
// windows last two session periods, its other windows one).
func (b *batcher) add(job *upstream.UploadJob) []*upstream.UploadJob {
	k := kindOf(job)
	if k == "" || b.window <= b.short {
		return []*upstream.UploadJob{job}
	}
	b.mu.Lock()
	group := append(b.pending[k], job)
	// Push once the group is within half a window of the push window: the next window would
	// overshoot it by more than that.
	half := job.EndTime.Sub(job.StartTime) / 2
	if job.EndTime.Sub(group[0].StartTime) < b.window-half {
		b.pending[k] = group
		b.mu.Unlock()
		return nil
	}
	delete(b.pending, k)
	b.mu.Unlock()
	return b.merge(k, group)
}

// flush returns the partial groups, merged, for the last push at Stop.
func (b *batcher) flush() []*upstream.UploadJob {
	b.mu.Lock()
	pending := b.pending
	b.pending = make(map[Kind][]*upstream.UploadJob)
	b.mu.Unlock()
	kinds := make([]Kind, 0, len(pending))
	for k := range pending {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	var out []*upstream.UploadJob
	for _, k := range kinds {
		out = append(out, b.merge(k, pending[k])...)
	}
	return out
}

// merge makes one job of a group of consecutive windows of kind k; when a window cannot be
// parsed, the group is pushed as it came rather than lost.
func (b *batcher) merge(k Kind, group []*upstream.UploadJob) []*upstream.UploadJob {
	if len(group) == 1 {
		return group
	}
	last := group[len(group)-1]
	out := *last
	out.StartTime = group[0].StartTime
	switch k {
	case KindGoroutine, KindGoroutineLeak:
		return []*upstream.UploadJob{&out} // the snapshot at the end of the pushed window
	}
	data, err := mergeWindows(k, group)
	if err != nil {
		b.mu.Lock()
		b.failed++
		b.mu.Unlock()
		return group
	}
	out.Profile = data
	return []*upstream.UploadJob{&out}
}

// mergeWindows sums the windows' profiles; for memory windows only the last window's in-use
// values are kept, since in-use memory is a level, not a count.
func mergeWindows(k Kind, group []*upstream.UploadJob) ([]byte, error) {
	profiles := make([]*profile.Profile, 0, len(group))
	for i, job := range group {
		p, err := profile.ParseData(job.Profile)
		if err != nil {
			return nil, fmt.Errorf("parse window %d of %d: %w", i+1, len(group), err)
		}
		if k == KindMemory && i < len(group)-1 {
			for vi, st := range p.SampleType {
				if st.Type == "inuse_objects" || st.Type == "inuse_space" {
					for _, s := range p.Sample {
						s.Value[vi] = 0
					}
				}
			}
		}
		profiles = append(profiles, p)
	}
	merged, err := profile.Merge(profiles)
	if err != nil {
		return nil, fmt.Errorf("merge %d windows: %w", len(group), err)
	}
	merged.TimeNanos = profiles[0].TimeNanos
	if first, last := group[0].StartTime, group[len(group)-1].EndTime; !first.IsZero() && !last.IsZero() {
		merged.DurationNanos = last.Sub(first).Nanoseconds()
	}
	var buf bytes.Buffer
	if err := merged.Write(&buf); err != nil {
		return nil, fmt.Errorf("encode merged window: %w", err)
	}
	return buf.Bytes(), nil
}
