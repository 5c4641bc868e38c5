package profile

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/google/pprof/profile"
)

// FunctionStat is one function of a profile summary: its self value (samples whose leaf frame is
// the function) and total value (samples with the function anywhere on the stack, counted once
// per sample however often it recurses), in the unit of the summary's sample type.
type FunctionStat struct {
	Name     string  `json:"name"`
	Self     int64   `json:"self"`
	Total    int64   `json:"total"`
	SelfPct  float64 `json:"self_pct"`
	TotalPct float64 `json:"total_pct"`
}

// Summary is what GET /debug/profiles answers in JSON: the sum of the sample type over the
// matching samples and the top functions by self value. In the wall view (type wall) a
// function's self value is the time goroutines spent with it as their innermost frame outside
// the runtime, sync and internal packages (the wait site), not their leaf, which is
// runtime.gopark for every parked goroutine.
type Summary struct {
	Type      string         `json:"type"`
	Unit      string         `json:"unit"`
	From      string         `json:"from"`
	Until     string         `json:"until"`
	Windows   int            `json:"windows"`
	Samples   int64          `json:"samples"`
	Functions []FunctionStat `json:"functions"`
	// Stages is the time per rag_stage, longest first: CPU seconds in the CPU view; in the
	// wall-clock view the seconds the stage had at least one goroutine (fanned-out goroutines
	// count once). Stage "" holds labelled samples outside any stage.
	Stages []StageStat `json:"stages,omitempty"`
	// MaxIntervalSec, in the wall view, is the longest interval between the snapshots merged:
	// each stage's time is within it at each of the stage's ends.
	MaxIntervalSec float64 `json:"max_interval_seconds,omitempty"`
	// Empty says why the view holds no sample, in an answer carrying both views.
	Empty string `json:"empty,omitempty"`
}

// StageStat is one stage's time in a Summary and its share of the summary's stage time.
type StageStat struct {
	Stage   string  `json:"stage"`
	Seconds float64 `json:"seconds"`
	Share   float64 `json:"share"`
}

// stageStats orders per-stage nanoseconds, longest first, with their shares.
func stageStats(nanos map[string]int64) []StageStat {
	var sum int64
	for _, n := range nanos {
		sum += n
	}
	out := make([]StageStat, 0, len(nanos))
	for stage, n := range nanos {
		share := 0.0
		if sum > 0 {
			share = math.Round(float64(n)/float64(sum)*1e4) / 1e4
		}
		out = append(out, StageStat{Stage: stage, Seconds: float64(n) / 1e9, Share: share})
	}
	slices.SortFunc(out, func(a, b StageStat) int {
		if c := cmp.Compare(b.Seconds, a.Seconds); c != 0 {
			return c
		}
		return cmp.Compare(a.Stage, b.Stage)
	})
	return out
}

// topFunctions ranks the functions of p by self value of the sample type named sampleType
// (the first sample type when p has none of that name), then by total, then by name, and returns
// the first n with the sum over all samples.
func topFunctions(p *profile.Profile, sampleType string, n int) (fns []FunctionStat, sum int64, unit string) {
	idx := 0
	for i, st := range p.SampleType {
		if st.Type == sampleType {
			idx = i
			break
		}
	}
	if idx < len(p.SampleType) {
		unit = p.SampleType[idx].Unit
	}
	byName := make(map[string]*FunctionStat)
	stat := func(name string) *FunctionStat {
		f, ok := byName[name]
		if !ok {
			f = &FunctionStat{Name: name}
			byName[name] = f
		}
		return f
	}
	// In the wall view nearly every goroutine is parked, its leaf runtime.gopark: self goes to
	// the wait site, the innermost frame outside the runtime (chan receive in the engine client,
	// a shard's response, a write to the client).
	waitSite := sampleType == ProfileWall
	var onStack []string
	for _, s := range p.Sample {
		if idx >= len(s.Value) || len(s.Location) == 0 {
			continue
		}
		v := s.Value[idx]
		sum += v
		onStack = onStack[:0]
		selfDone := false
		for li, loc := range s.Location {
			names := frameNames(loc)
			if !selfDone && waitSite {
				for _, name := range names {
					if !strings.HasPrefix(name, "runtime.") && !strings.HasPrefix(name, "internal/") &&
						!strings.HasPrefix(name, "sync.") {
						stat(name).Self += v
						selfDone = true
						break
					}
				}
				if !selfDone && li == len(s.Location)-1 {
					stat(frameNames(s.Location[0])[0]).Self += v
					selfDone = true
				}
			}
			if li == 0 && !waitSite {
				// Line[0] is the innermost of the functions inlined at the leaf location.
				stat(names[0]).Self += v
			}
			for _, name := range names {
				if !slices.Contains(onStack, name) {
					onStack = append(onStack, name)
					stat(name).Total += v
				}
			}
		}
	}
	fns = make([]FunctionStat, 0, len(byName))
	for _, f := range byName {
		f.SelfPct = percent(f.Self, sum)
		f.TotalPct = percent(f.Total, sum)
		fns = append(fns, *f)
	}
	slices.SortFunc(fns, func(a, b FunctionStat) int {
		if c := cmp.Compare(b.Self, a.Self); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Total, a.Total); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	if len(fns) > n {
		fns = fns[:n]
	}
	return fns, sum, unit
}

// frameNames names the functions at a location, innermost first; an unsymbolized location is
// named by its address.
func frameNames(loc *profile.Location) []string {
	if len(loc.Line) == 0 {
		return []string{fmt.Sprintf("0x%x", loc.Address)}
	}
	names := make([]string, 0, len(loc.Line))
	for _, l := range loc.Line {
		if l.Function == nil || l.Function.Name == "" {
			names = append(names, fmt.Sprintf("0x%x", loc.Address))
			continue
		}
		names = append(names, l.Function.Name)
	}
	return names
}

// percent is part/whole in percent, rounded to two decimals.
func percent(part, whole int64) float64 {
	if whole == 0 {
		return 0
	}
	return math.Round(float64(part)/float64(whole)*1e4) / 100
}
