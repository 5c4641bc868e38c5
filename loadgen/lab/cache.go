package lab

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/dataset"
	"github.com/ragtail/ragtail/loadgen/report"
	"github.com/ragtail/ragtail/loadgen/shape"
	"github.com/ragtail/ragtail/loadgen/stats"
)

// DefaultStoreConcurrency is the in-memory doc store's capacity in the in-process lab: lookups
// it serves at once, each holding a slot for its fetch latency, so that cache misses queue.
const DefaultStoreConcurrency = 2

// cacheSize is the cache of the cache-penetration experiment: room for the hot set and a little
// more, far less than the key space, so that cold keys evict hot ones under LRU.
const cacheSize = 64

// hotKeys is the size of the hot set of the cache-penetration experiment.
const hotKeys = 50

// storeFetchLaw is the backing store's per-lookup service time in the experiment, paid while
// the lookup holds one of the store's slots (or pool connections). Its median, 50 ms, keeps
// a miss well above what a hit costs on a loaded machine: at 20 ms the hot-only arm's tail
// (scheduling on 2 shared cores at 400 req/s) reached 13 ms, past the fastest fifth of misses.
const storeFetchLaw = "lognormal:50ms,0.5,1s"

// The pre-registered rule for the cache-penetration load: the request rate at which the cold
// share of the 10%-cold arms alone would take storeShare of the store's capacity measured by
// the calibration, rate = storeShare x capacity / remedyCold, at most maxKeyRate (what a small
// machine drives with the service in the same process).
const (
	storeShare  = 0.5
	remedyCold  = 0.10
	maxKeyRate  = 500.0
	calibUsers  = 16 // closed-loop users of the calibration: more than any store's slots here
	calibShare  = 8  // the calibration runs for an arm's duration / calibShare
	minKeyRate  = 10.0
	warmPasses  = 2 // the hot set is read twice before each arm, so 2Q and ARC promote it too
	bloomFPRate = 0.01
)

// The pre-registered statistic of the cold-key verdict and its sample size. The P99 of a mix
// with 1% cold keys sits on the boundary between the hot and the cold requests, so whether its
// interval reaches the cold ones is a coin toss; the P99.7 lies well into them even when the
// seeded schedule holds fewer than 1% (the arm's holds about 0.75% over its first thousands of
// keys, which left the P99.5 one cold key short of its interval at the n a binomial 1% asked
// for). The hot-only and hot+1% cold arms each run until they hold n requests: the least n from
// which S ~ Binomial(n, 1%) slow requests reach the interval's lower rank with verdictPower
// (every miss slower than every hit: a miss pays a store lookup a hit does not), raised until
// the arm's own seeded key schedule holds, for every count from n to tailSpan x n, tailSlack
// more cold keys than the interval's lower rank needs (a miss or two may be as fast as the
// hot-only tail); at most maxTailStretch times an arm's share of the load time.
const (
	tailQ          = 0.997
	tailName       = "P99.7"
	tailSpan       = 1.25 // the counts a run of sampleMargin x n requests lands on
	tailSlack      = 2
	maxTailStretch = 4
)

// scheduleTailNeeded is the least n at or above n0 such that, for every m from n to tailSpan x
// n, the first m keys of the seeded schedule keys hold at least tailSlack more cold keys than
// the q-quantile's interval needs slow samples (m - l + 1, l its lower rank); false when no n
// up to maxPowerN does. isCold tells a cold key.
func scheduleTailNeeded(keys shape.Source, isCold func(string) bool, n0 int64, q float64) (int64, bool) {
	ok := make([]bool, maxPowerN+1) // ok[m]: the first m keys suffice
	cold := int64(0)
	for m := int64(1); m <= maxPowerN; m++ {
		if isCold(keys.Next().Key) {
			cold++
		}
		if l, _, fine := stats.QuantileRanks(m, q, verdictConfidence); fine {
			ok[m] = cold >= m-l+1+tailSlack
		}
	}
	for n := max(n0, 1); float64(n)*tailSpan <= maxPowerN; n++ {
		hi := int64(math.Ceil(float64(n) * tailSpan))
		bad := int64(0)
		for m := hi; m >= n; m-- {
			if !ok[m] {
				bad = m
				break
			}
		}
		if bad == 0 {
			return n, true
		}
		n = bad // every n up to the failing count fails too
	}
	return 0, false
}

// keyRate is the experiment's request rate for a store that completed capacity lookups per
// second in the calibration.
func keyRate(capacity float64) float64 {
	if math.IsNaN(capacity) || capacity <= 0 {
		return minKeyRate
	}
	return math.Round(min(max(storeShare*capacity/remedyCold, minKeyRate), maxKeyRate))
}

// cacheArm is one key mix and cache of the cache-penetration experiment.
type cacheArm struct {
	name             string
	cold, invalid    float64
	bloom            bool
	policy           string // the cache's eviction policy
	p50Claim, p99Clm string
}

var cacheArms = []cacheArm{
	{"hot-only", 0, 0, true, "lru", "5 ms", "18 ms"},
	{"hot+1% cold", 0.01, 0, true, "lru", "6 ms", "142 ms"},
	{"hot+10% cold", remedyCold, 0, true, "lru", "—", "—"},
	{"hot+10% cold, 2q", remedyCold, 0, true, "2q", "—", "—"},
	{"hot+10% cold, arc", remedyCold, 0, true, "arc", "—", "—"},
	{"hot+30% invalid, bloom off", 0, 0.30, false, "lru", "—", "—"},
	{"hot+30% invalid, bloom on", 0, 0.30, true, "lru", "—", "—"},
}

// Indices into cacheArms the verdict reads.
const (
	armHot, armCold1, armCold10, arm2Q, armARC, armGuardOff, armGuardOn = 0, 1, 2, 3, 4, 5, 6
)

// guardHeld applies the guard half of the rule: with the guard on, the share of invalid keys
// that reached the store is consistent with the filter's false-positive rate (the lower end of
// its Wilson interval is at most fpRate); with it off, some reached it.
func guardHeld(on, off map[string]float64, fpRate float64) bool {
	passed, blocked := on["store_missing_lookups"], on["bloom_blocked"]
	_, lo, _ := binomialCI(passed, passed+blocked)
	return passed+blocked > 0 && lo <= fpRate && off["store_missing_lookups"] > 0
}

// keyQuantile is the q-quantile, with its 95% interval, of the end-to-end latency of the
// successful requests whose key keep accepts, and how many there were.
func keyQuantile(recs []loadgen.Record, keep func(key string) bool, q float64) (report.PercentileStat, int) {
	var lat []time.Duration
	for i := range recs {
		r := &recs[i]
		if r.Warmup || r.NotSent || !r.OK() || !keep(r.Key) {
			continue
		}
		lat = append(lat, r.E2EL())
	}
	slices.Sort(lat)
	v, lo, hi, ok := stats.QuantileCI(lat, q, verdictConfidence)
	return report.PercentileStat{P: 100 * q, Value: v, Lo: lo, Hi: hi, HasCI: ok}, len(lat)
}

// missCost is the store's mean time per lookup by Little's law on the calibration's closed
// loop: the lookups in progress at once (the store's slots, or every user when it has more
// slots than users or none) over the lookups completed per second.
func missCost(slots, capacity float64) time.Duration {
	inFlight := float64(calibUsers)
	if slots > 0 {
		inFlight = min(slots, inFlight)
	}
	return time.Duration(inFlight / capacity * float64(time.Second))
}

// hotSet returns the keys of the hot set.
func hotSet() map[string]bool {
	m := make(map[string]bool, hotKeys)
	for i := range hotKeys {
		m[fmt.Sprintf(shape.DefaultKeyPattern, i)] = true
	}
	return m
}

// memoryPolicy reports whether policy names an in-memory cache whose eviction the lab can
// switch (a remote tier such as Redis evicts by its own rules).
func memoryPolicy(policy string) bool {
	return policy == "lru" || policy == "2q" || policy == "arc"
}

// cacheRun is what one arm of the experiment measured.
type cacheRun struct {
	v       *Variant
	p99     report.PercentileStat
	tail    report.PercentileStat // the tailQ quantile of all keys, the verdict's statistic
	n       int                   // the requests tail rests on
	hotP99  report.PercentileStat // hot keys only
	coldP50 report.PercentileStat // keys outside the hot set: what a miss costs a user
	nCold   int
}

// runCachePenetration drives GET /v1/documents/{id} with hot, cold and invalid keys against a
// cache smaller than the key space and a store of finite capacity, after a calibration of the
// store's capacity fixes the request rate.
func runCachePenetration(ctx context.Context, e *env) (*Result, error) {
	cfg, err := e.getConfig(ctx)
	if err != nil {
		return nil, err
	}
	tier := "lru"
	if cfg.Cache != nil && cfg.Cache.Policy != nil {
		tier = *cfg.Cache.Policy
	}
	binomial, powered := tailSamplesNeeded(cacheArms[armCold1].cold, tailQ, verdictConfidence, verdictPower)
	var need int64
	if powered {
		schedule, err := armKeys(cacheArms[armCold1], e.o.Seed+armSeed(armCold1))
		if err != nil {
			return nil, err
		}
		hot := hotSet()
		need, powered = scheduleTailNeeded(schedule, func(k string) bool { return !hot[k] }, binomial, tailQ)
	}
	if !powered {
		return nil, fmt.Errorf("no sample size up to %d gives the cold-key verdict %.0f%% power", maxPowerN, 100*verdictPower)
	}
	st, err := e.stats(ctx)
	if err != nil {
		return nil, err
	}
	base := &Settings{FetchLatency: ptr(storeFetchLaw), Faults: noFaults()}
	per := e.dur / time.Duration(len(cacheArms))
	capacity, calib, err := e.calibrateStore(ctx, base, per/calibShare)
	if err != nil {
		return nil, err
	}
	rate := keyRate(capacity)
	cost := missCost(st.Docs.Backend.Concurrency, capacity)
	compared := armDuration(need, true, rate, per, maxTailStretch*per)
	e.logf("  store capacity %.1f lookups/s (mean lookup %v) -> rate %.0f req/s (%.1f x capacity / %.0f%% cold share, at most %.0f); %d requests per compared arm (%d by the binomial) -> %v",
		capacity, cost.Round(100*time.Microsecond), rate, storeShare, 100*remedyCold, maxKeyRate, need, binomial, compared)
	variants := []Variant{*calib}
	rows := []Row{
		{"calibration: store capacity (cache off, closed loop of 16)", "", fmt.Sprintf("%.1f lookups/s -> request rate %.0f req/s", capacity, rate)},
		{"store miss cost: mean lookup time (calibration, Little's law: lookups at once / lookups per s)", "not stated", msStr(cost) + " ms"},
		{"sample size: requests per compared arm for the " + tailName + " intervals to separate at 1% cold keys with 90% probability, and the seeded schedule's cold keys to reach them", "", fmt.Sprintf("%d (%d by the binomial; hot-only and hot+1%% cold run %v at %.0f req/s)", need, binomial, compared, rate)},
	}
	runs := make([]*cacheRun, len(cacheArms))
	for i, a := range cacheArms {
		if !memoryPolicy(tier) && a.policy != "lru" {
			rows = append(rows, Row{a.name, "scan-resistant cache keeps the hot set", fmt.Sprintf("not run: the cache tier is %s, whose eviction is its own", tier)})
			continue
		}
		d := per
		if i == armHot || i == armCold1 {
			d = compared
		}
		run, err := e.cacheArm(ctx, base, a, memoryPolicy(tier), rate, d, armSeed(i))
		if err != nil {
			return nil, err
		}
		runs[i] = run
		variants = append(variants, *run.v)
		rows = append(rows, cacheRows(a, run)...)
	}
	out, why := cacheVerdict(runs, need, cost)
	return &Result{
		Setup: fmt.Sprintf("GET /v1/documents/{id}: %d docs, hot set %d (Zipf 1.2), cache of %d entries (%s unless the arm says), store lookup %s holding one of the %s store's %s; Poisson %.0f req/s from a calibration of the store (%.1f lookups/s), %v per arm (hot-only and hot+1%% cold: %v, for %d requests)",
			shape.DefaultKeyCount, hotKeys, cacheSize, tier, storeFetchLaw, st.Docs.Backend.Kind, slotsOf(st.Docs.Backend.Concurrency), rate, capacity, per.Round(time.Second), compared, need),
		Variants: variants,
		Document: map[string]any{"hot_p50_ms": 5, "hot_p99_ms": 18, "cold1pct_p50_ms": 6, "cold1pct_p99_ms": 142},
		Rows:     rows, Verdict: Verdict{out, why},
	}, nil
}

// calibrateStore measures the backing store's capacity: completed lookups per second of a
// closed loop of calibUsers users on cold keys with the cache off, so every lookup reaches the
// store.
func (e *env) calibrateStore(ctx context.Context, base *Settings, d time.Duration) (float64, *Variant, error) {
	s := clone(base)
	s.Cache = &CacheSettings{Enabled: ptr(false)}
	s.Bloom = &BloomSettings{Enabled: ptr(true), FPRate: ptr(bloomFPRate)}
	src, err := shape.Keys(shape.KeyConfig{Pattern: shape.DefaultKeyPattern, Count: shape.DefaultKeyCount, Hot: hotKeys, ColdFraction: 1}, e.o.Seed+29)
	if err != nil {
		return 0, nil, err
	}
	p, err := shape.Poisson(1, e.o.Seed+29) // a closed loop ignores the arrival times
	if err != nil {
		return 0, nil, err
	}
	v, _, err := e.run(ctx, "calibration: store capacity", s, load{workload: shape.Open(p, src), shape: "closed loop of 16 users, cold keys, cache off",
		concurrency: calibUsers, closed: true, duration: max(d, 500*time.Millisecond)})
	if err != nil {
		return 0, nil, err
	}
	if v.Bench.Completed == 0 || v.Bench.Duration <= 0 {
		return 0, nil, fmt.Errorf("store calibration: no lookup completed (%d failed)", v.Bench.Failed)
	}
	return float64(v.Bench.Completed) / v.Bench.Duration.Seconds(), v, nil
}

// cacheArm runs one arm: its cache policy and guard, the hot set warmed, then the key mix.
func (e *env) cacheArm(ctx context.Context, base *Settings, a cacheArm, switchable bool, rate float64, d time.Duration, seed uint64) (*cacheRun, error) {
	s := clone(base)
	s.Cache = &CacheSettings{Enabled: ptr(true), Size: ptr(cacheSize)}
	if switchable {
		s.Cache.Policy = ptr(a.policy)
	}
	s.Bloom = &BloomSettings{Enabled: ptr(a.bloom), FPRate: ptr(bloomFPRate)}
	if err := e.put(ctx, s); err != nil {
		return nil, err
	}
	// Warm the cache with the hot set, so that every arm starts from the steady state a
	// hot-only load reaches (the first arm would otherwise pay the cold start).
	for range warmPasses {
		if err := e.warm(ctx, hotKeys); err != nil {
			return nil, err
		}
	}
	before, err := e.stats(ctx)
	if err != nil {
		return nil, err
	}
	p, err := shape.Poisson(rate, e.o.Seed+seed)
	if err != nil {
		return nil, err
	}
	src, err := armKeys(a, e.o.Seed+seed)
	if err != nil {
		return nil, err
	}
	v, res, err := e.run(ctx, a.name, nil, load{workload: shape.Open(p, src), shape: fmt.Sprintf("poisson(rate=%.0f)", rate), rate: rate, duration: d})
	if err != nil {
		return nil, err
	}
	v.Settings = s
	after, err := e.stats(ctx)
	if err != nil {
		return nil, err
	}
	v.Counters = docCounters(before, after)
	hot := hotSet()
	run := &cacheRun{v: v, p99: pct(v.Bench, report.MetricE2EL, 99)}
	run.tail, run.n = keyQuantile(res.Records, func(string) bool { return true }, tailQ)
	run.hotP99, _ = keyQuantile(res.Records, func(k string) bool { return hot[k] }, 0.99)
	run.coldP50, run.nCold = keyQuantile(res.Records, func(k string) bool { return !hot[k] }, 0.5)
	return run, nil
}

// armSeed is the seed offset of arm i's arrivals and keys.
func armSeed(i int) uint64 { return uint64(30 + i) }

// armKeys is arm a's key schedule from seed.
func armKeys(a cacheArm, seed uint64) (shape.Source, error) {
	return shape.Keys(shape.KeyConfig{Pattern: shape.DefaultKeyPattern, Count: shape.DefaultKeyCount, Hot: hotKeys, Alpha: 1.2,
		ColdFraction: a.cold, InvalidFraction: a.invalid}, seed)
}

// slotsOf names a store's capacity: its slots (or pool connections), or none.
func slotsOf(n float64) string {
	if n <= 0 {
		return "unbounded slots"
	}
	return fmt.Sprintf("%.0f slots (lookups at once)", n)
}

// docCounters are the doc store's counter deltas over an arm.
func docCounters(before, after serverStats) map[string]float64 {
	d, b := after.Docs, before.Docs
	return map[string]float64{
		"store_lookups":         d.StoreLookups - b.StoreLookups,
		"store_missing_lookups": d.StoreMissingLookups - b.StoreMissingLookups,
		"store_queued":          d.Backend.Waited - b.Backend.Waited,
		"store_wait_seconds":    d.Backend.WaitSeconds - b.Backend.WaitSeconds,
		"bloom_blocked":         d.Blocked - b.Blocked,
		"cache_hits":            d.Hits - b.Hits,
		"cache_misses":          d.Misses - b.Misses,
	}
}

// cacheRows are the table rows of one arm.
func cacheRows(a cacheArm, r *cacheRun) []Row {
	c := r.v.Counters
	hits, misses, lookups, queued := c["cache_hits"], c["cache_misses"], c["store_lookups"], c["store_queued"]
	wait := "—"
	if queued > 0 {
		wait = msStr(time.Duration(c["store_wait_seconds"]/queued*float64(time.Second))) + " ms"
	}
	rows := []Row{
		{a.name + " P50 / P99", a.p50Claim + " / " + a.p99Clm, fmtPct(pct(r.v.Bench, report.MetricE2EL, 50)) + " / " + fmtPct(r.p99) + failedNote(r.v.Bench)},
		{a.name + " " + tailName + " (the verdict's statistic)", "", fmt.Sprintf("%s (%d requests)", fmtPct(r.tail), r.n)},
		{a.name + " hot keys' own P99", "hot keys are the victims", fmtPct(r.hotP99)},
		{a.name + " cache hit ratio", "", fmtRate(hits, hits+misses)},
		{a.name + " store: lookups / queued for a slot (mean wait) / invalid keys", "invalid keys reach the store without a guard",
			fmt.Sprintf("%.0f / %s (%s) / %.0f", lookups, fmtRate(queued, lookups), wait, c["store_missing_lookups"])},
	}
	if a.cold > 0 {
		rows = append(rows, Row{a.name + " cold keys' own P50 (a miss as a user sees it)", "", fmt.Sprintf("%s (%d requests)", fmtPct(r.coldP50), r.nCold)})
	}
	return rows
}

// cacheVerdict applies the rule to the arms' figures, need being the requests each compared arm
// must hold, and states the remedy's comparison.
func cacheVerdict(runs []*cacheRun, need int64, cost time.Duration) (string, string) {
	hot, cold1, cold10 := runs[armHot], runs[armCold1], runs[armCold10]
	off, on := runs[armGuardOff].v.Counters, runs[armGuardOn].v.Counters
	out := compare(cold1.tail, hot.tail)
	why := fmt.Sprintf("1%% cold keys: %s %s -> %s over %d and %d requests (P99 %s -> %s, article 18 -> 142 ms), a miss costs a cold key %s at P50 (store lookup %s ms), 10%% cold: P99 %s, hot keys' own P99 %s -> %s; invalid keys reaching the store: %.0f with the Bloom guard off, %.0f with it on",
		tailName, fmtPct(hot.tail), fmtPct(cold1.tail), hot.n, cold1.n, fmtPct(hot.p99), fmtPct(cold1.p99), fmtPct(cold1.coldP50), msStr(cost), fmtPct(cold10.p99), fmtPct(hot.hotP99), fmtPct(cold10.hotP99), off["store_missing_lookups"], on["store_missing_lookups"])
	guard := guardHeld(on, off, bloomFPRate)
	switch {
	case int64(min(hot.n, cold1.n)) < need:
		out = Underpowered
		why = fmt.Sprintf("underpowered: the rule needs %d requests in each of the hot-only and hot+1%% cold arms (run longer, or --duration): %s", need, why)
	case out == Reproduced && guard:
		why = "reproduced: " + why
	case out == Reproduced:
		out = NotReproduced
		why = "the cold-key tail appeared but the Bloom guard did not hold: " + why
	case out == Opposite:
		why = "the cold-key " + tailName + " came out lower than the hot-only one: " + why
	default:
		why = "the hot+1% cold " + tailName + " interval does not lie above the hot-only one: " + why
	}
	return out, why + "; " + remedyNote(cold10, runs[arm2Q], runs[armARC])
}

// remedyNote compares the hot keys' P99 and the hit ratio of the scan-resistant caches with
// LRU's under the same 10% cold keys.
func remedyNote(lru *cacheRun, alts ...*cacheRun) string {
	var parts []string
	for _, alt := range alts {
		if alt == nil {
			continue
		}
		name := strings.TrimPrefix(alt.v.Name, "hot+10% cold, ")
		rel := "within the intervals of"
		switch compare(lru.hotP99, alt.hotP99) {
		case Reproduced:
			rel = "below"
		case Opposite:
			rel = "above"
		}
		parts = append(parts, fmt.Sprintf("%s hot keys' P99 %s, %s LRU's %s (hit ratio %s vs %s)", name, fmtPct(alt.hotP99), rel, fmtPct(lru.hotP99),
			hitRatio(alt.v.Counters), hitRatio(lru.v.Counters)))
	}
	if len(parts) == 0 {
		return "remedy not run: the cache tier's eviction cannot be switched"
	}
	return "remedy at 10% cold keys: " + strings.Join(parts, "; ")
}

// hitRatio formats an arm's cache hit ratio without its interval.
func hitRatio(c map[string]float64) string {
	h, m := c["cache_hits"], c["cache_misses"]
	if h+m == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", 100*h/(h+m))
}

// warm GETs the first n documents once.
func (e *env) warm(ctx context.Context, n int) error {
	for i := range n {
		u := strings.TrimRight(e.t.URL, "/") + "/v1/documents/" + dataset.EscapeKey(fmt.Sprintf(shape.DefaultKeyPattern, i))
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		resp, err := e.t.HTTP.Do(req)
		if err != nil {
			return fmt.Errorf("warm the cache: %w", err)
		}
		_ = resp.Body.Close()
	}
	return nil
}
