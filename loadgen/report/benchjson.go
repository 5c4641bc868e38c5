package report

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/stats"
)

// The ragtail.bench/v1 document: its tagged structs, and a Bench written to them and read from
// them (see json.go for the values, the keyed objects and the percentile keys).

// benchFile is the ragtail.bench/v1 document (without its schema, a point of a sweep): its
// static keys before and after the metrics' keys.
type benchFile struct {
	benchHead
	metrics metricKeys
	phases  metricKeys // the HTTP phases' keys, after the metrics'; read back from their histograms
	benchRest
}

// MarshalJSON writes the document's keys in order.
func (f benchFile) MarshalJSON() ([]byte, error) {
	return members{f.benchHead, f.metrics, f.phases, f.benchRest}.MarshalJSON()
}

// UnmarshalJSON reads the document: its static keys, then its metrics' keys.
func (f *benchFile) UnmarshalJSON(b []byte) error {
	static := struct {
		*benchHead
		*benchRest
	}{&f.benchHead, &f.benchRest}
	if err := json.Unmarshal(b, &static); err != nil {
		return err
	}
	return f.metrics.UnmarshalJSON(b)
}

// benchHead are the keys of a bench document before its metrics': the run's description and
// counts, the token details, the workload's counts and the throughputs.
type benchHead struct {
	Schema     string      `json:"schema,omitempty"`
	Start      timestamp   `json:"start"`
	Config     configJSON  `json:"config"`
	Options    optionsJSON `json:"options"`
	Clock      *clockJSON  `json:"clock,omitempty"`
	MergedFrom count       `json:"merged_from,omitempty"` // written from 2 runs on
	Sources    []string    `json:"sources,omitempty"`
	Completed  count       `json:"completed"`
	Failed     count       `json:"failed"`
	// Cancelled counts the requests abandoned on purpose (--cancel), in neither count above;
	// Cancellations details them.
	Cancelled         count              `json:"cancelled,omitempty"`
	Cancellations     *cancellationsJSON `json:"cancellations,omitempty"`
	ErrorRate         derived[number]    `json:"error_rate"` // failed / (completed + failed), null for none
	Warmup            count              `json:"warmup,omitempty"`
	DurationS         seconds            `json:"duration_s"`
	TotalInputTokens  count              `json:"total_input_tokens"`
	TotalOutputTokens count              `json:"total_output_tokens"`
	tokenDetailsJSON
	workloadJSON
	RequestThroughput    amount                `json:"request_throughput"`
	OutputThroughput     amount                `json:"output_throughput"`
	TotalTokenThroughput amount                `json:"total_token_throughput"`
	Goodput              *amount               `json:"goodput"`
	GoodputRequests      *count                `json:"goodput_requests,omitempty"`
	Cost                 *derived[*costJSON]   `json:"cost,omitempty"`
	Energy               *derived[*energyJSON] `json:"energy,omitempty"`
	NewConnections       count                 `json:"new_connections,omitempty"`
	ReusedConnections    count                 `json:"reused_connections,omitempty"`
}

// configJSON is the file form of loadgen.RunInfo.
type configJSON struct {
	URL          string       `json:"url"`
	Model        string       `json:"model"`
	Shape        string       `json:"shape"`
	RequestRate  rate         `json:"request_rate"`
	Burstiness   amount       `json:"burstiness"`
	Concurrency  count        `json:"concurrency"`
	NumPrompts   count        `json:"num_prompts"`
	MaxTokens    count        `json:"max_tokens"`
	Seed         uint64       `json:"seed"`
	InFlightCap  count        `json:"in_flight_cap,omitempty"` // the open loop's default cap, when it applied
	Segment      *segmentJSON `json:"segment,omitempty"`
	ScheduleHash string       `json:"schedule_hash,omitempty"`
	Interrupted  bool         `json:"interrupted,omitempty"`
	Dataset      string       `json:"dataset,omitempty"`
	Stream       *bool        `json:"stream,omitempty"`
	Temperature  *amount      `json:"temperature,omitempty"`
	Version      string       `json:"version,omitempty"`
	Command      string       `json:"command,omitempty"`
	HTTPClient   string       `json:"http_client,omitempty"`
	Cancel       string       `json:"cancel,omitempty"`
}

type segmentJSON struct {
	Index count `json:"index"`
	Count count `json:"count"`
}

type optionsJSON struct {
	Percentiles        []float64 `json:"percentiles"`
	Metrics            []string  `json:"metrics"`
	Confidence         number    `json:"confidence"`
	Goodput            *string   `json:"goodput"`
	SessionStepLimitMS *millis   `json:"session_step_limit_ms"`
	USDPerGPUHour      *amount   `json:"usd_per_gpu_hour,omitempty"`
	GPUs               *count    `json:"gpus,omitempty"`
}

// costJSON is Bench.Cost as written (derived: recomputed when read).
type costJSON struct {
	USD                    amount  `json:"usd"`
	USDPerRequest          *amount `json:"usd_per_request"`
	USDPerMillionInputTok  *amount `json:"usd_per_million_input_tokens"`
	USDPerMillionOutputTok *amount `json:"usd_per_million_output_tokens"`
}

// energyJSON is Bench.Energy as written (derived: recomputed from server_metrics when read).
type energyJSON struct {
	Source             string  `json:"source"`
	Joules             amount  `json:"joules"`
	JoulesPerOutputTok *amount `json:"joules_per_output_token"`
	MeanWatts          amount  `json:"mean_watts"`
	ScrapedSpanSeconds amount  `json:"scraped_span_s"`
}

type clockJSON struct {
	OffsetMS      offsetMillis `json:"offset_ms"`
	UncertaintyMS millis       `json:"uncertainty_ms"`
	Samples       count        `json:"samples"`
	Method        string       `json:"method"`
}

// benchRest are the keys of a bench document after its metrics': stages, tails, sessions and
// turns, then the requests, the timeline, the errors, the distributions and the histograms.
type benchRest struct {
	Stages        keyed[stageJSON]   `json:"stages"`
	Tail          keyed[tailJSON]    `json:"tail"`
	Sessions      *sessionsJSON      `json:"sessions,omitempty"`
	Turns         []turnJSON         `json:"turns,omitempty"`
	Agent         *agentJSON         `json:"agent,omitempty"`
	Slowest       []slowJSON         `json:"slowest"`
	Timeline      []timelineJSON     `json:"timeline"`
	Slices        []sliceJSON        `json:"slices,omitempty"`
	HoldSLO       *HoldSLO           `json:"hold_slo,omitempty"`
	Errors        keyed[count]       `json:"errors"`
	ErrorExamples keyed[string]      `json:"error_examples"`
	TokenLengths  tokenLengthsJSON   `json:"token_lengths"`
	ServerMetrics *serverMetricsJSON `json:"server_metrics,omitempty"`
	Histograms    histogramsJSON     `json:"histograms"`
}

// histogramsJSON are the histograms as stats.Histogram writes them, decoded when the file
// becomes a Bench so that their errors name their key.
type histogramsJSON struct {
	Metrics keyed[json.RawMessage] `json:"metrics"`
	Stages  keyed[json.RawMessage] `json:"stages"`
	Phases  keyed[json.RawMessage] `json:"phases,omitempty"`
}

// stageJSON is a stage's count and mean, then its percentiles.
type stageJSON struct {
	stageHead
	percentiles percentileKeys
}

type stageHead struct {
	Count  count  `json:"count"`
	MeanMS millis `json:"mean_ms"`
}

// MarshalJSON writes the count, the mean and the percentiles.
func (s stageJSON) MarshalJSON() ([]byte, error) {
	return members{s.stageHead, s.percentiles}.MarshalJSON()
}

// UnmarshalJSON reads the count, the mean and the percentiles.
func (s *stageJSON) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &s.stageHead); err != nil {
		return err
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		return err
	}
	var err error
	s.percentiles.stats, err = readPercentiles(keys, "")
	return err
}

type sessionsJSON struct {
	Count                   count           `json:"count"`
	Completed               count           `json:"completed"`
	Interrupted             count           `json:"interrupted"`
	Truncated               count           `json:"truncated"`
	CompletionRate          derived[number] `json:"completion_rate"`
	InterruptionRate        derived[number] `json:"interruption_rate"`
	FirstSteps              count           `json:"first_steps"`
	FirstStepsCompleted     count           `json:"first_steps_completed"`
	FirstStepCompletionRate derived[number] `json:"first_step_completion_rate"`
	StepLimitMS             *millis         `json:"step_limit_ms"`
}

// maxStages bounds the stages of one request read from a file.
const maxStages = 64

type slowJSON struct {
	Index        count          `json:"index"`
	TraceID      string         `json:"trace_id"`
	Session      string         `json:"session,omitempty"`
	IntendedS    seconds        `json:"intended_s"`
	E2ELMS       millis         `json:"e2el_ms"`
	TTFTMS       *millis        `json:"ttft_ms"`
	Status       count          `json:"status"`
	Error        string         `json:"error,omitempty"`
	ServerTiming keyed[*amount] `json:"server_timing,omitempty"`
}

type timelineJSON struct {
	TS         seconds `json:"t_s"`
	DtS        seconds `json:"dt_s"`
	Sent       count   `json:"sent"`
	Completed  count   `json:"completed"`
	Failed     count   `json:"failed"`
	Output     count   `json:"output_tokens"`
	N          count   `json:"n"`
	MeanE2ELMS *millis `json:"mean_e2el_ms"`
	MaxE2ELMS  *millis `json:"max_e2el_ms"`
	P50E2ELMS  *millis `json:"p50_e2el_ms"`
	P99E2ELMS  *millis `json:"p99_e2el_ms"`
	NTTFT      count   `json:"n_ttft"`
	MeanTTFTMS *millis `json:"mean_ttft_ms"`
	MaxTTFTMS  *millis `json:"max_ttft_ms"`
	P50TTFTMS  *millis `json:"p50_ttft_ms"`
	P99TTFTMS  *millis `json:"p99_ttft_ms"`
}

type tailJSON struct {
	N              count           `json:"n"`
	EmpiricalP99MS *millis         `json:"empirical_p99_ms"`
	Hill           *hillJSON       `json:"hill"`
	Fits           []fitJSON       `json:"fits"`
	Best           *string         `json:"best"`
	Verdict        derived[string] `json:"verdict"`
}

type hillJSON struct {
	Alpha       sixDigits `json:"alpha"`
	SE          sixDigits `json:"se"`
	K           count     `json:"k"`
	ThresholdMS millis    `json:"threshold_ms"`
}

type fitJSON struct {
	Model  string           `json:"model"`
	Params keyed[sixDigits] `json:"params"`
	// LogLikelihood and AIC are any numbers; P99MS may lie beyond the histograms' range (a
	// heavy tail's extrapolation), and is read saturating.
	LogLikelihood sixDigits       `json:"log_likelihood"`
	AIC           sixDigits       `json:"aic"`
	P99MS         amount          `json:"p99_ms"`
	P99ErrorPct   derived[number] `json:"p99_error_pct"`
}

// modelParams lists each model's parameters in order.
var modelParams = map[string][]string{
	stats.ModelExponential: {"rate_per_ms"},
	stats.ModelLognormal:   {"mu", "sigma"},
	stats.ModelPareto:      {"xm_ms", "alpha"},
}

// ---- Bench to file ----

// MarshalJSON writes the ragtail.bench/v1 document.
func (b *Bench) MarshalJSON() ([]byte, error) {
	f, err := b.file(SchemaBench)
	if err != nil {
		return nil, err
	}
	return marshalJSON(f)
}

// file is the document of b, with the schema key given ("" for none).
func (b *Bench) file(schema string) (benchFile, error) {
	rest, err := b.rest()
	return benchFile{benchHead: b.head(schema), metrics: b.metricKeys(), phases: b.phaseKeys(), benchRest: rest}, err
}

func (b *Bench) head(schema string) benchHead {
	h := benchHead{
		Schema: schema, Start: timestamp(b.Start), Config: configObject(b.Config),
		Options: optionsJSON{
			Percentiles: orEmpty(b.Percentiles), Metrics: orEmpty(b.Metrics), Confidence: number(b.Confidence),
			SessionStepLimitMS: msWhen(b.SessionStepLimit > 0, b.SessionStepLimit),
		},
		Sources: b.Sources, Completed: count(b.Completed), Failed: count(b.Failed),
		ErrorRate: derived[number]{number(sig(b.ErrorRate()))}, Warmup: count(max(b.Warmup, 0)),
		DurationS: seconds(b.Duration), TotalInputTokens: count(b.InputTokens), TotalOutputTokens: count(b.OutputTokens),
		tokenDetailsJSON:     b.tokenDetails(),
		workloadJSON:         b.workloadCounts(),
		RequestThroughput:    amount(sig(b.RequestThroughput)),
		OutputThroughput:     amount(sig(b.OutputThroughput)),
		TotalTokenThroughput: amount(sig(b.TotalTokenThroughput)),
	}
	if len(b.Goodput) > 0 {
		h.Options.Goodput = ptr(b.Goodput.String())
	}
	if b.Cancellations != nil {
		h.Cancelled, h.Cancellations = count(b.Cancellations.Done), b.cancellationsObject()
	}
	if len(b.Goodput.Requests()) > 0 {
		h.GoodputRequests = ptr(count(b.GoodRequests))
	}
	if b.GoodputRate != nil {
		h.Goodput = ptr(amount(sig(*b.GoodputRate)))
	}
	h.Options.USDPerGPUHour, h.Options.GPUs, h.Cost, h.Energy = b.costAndEnergy()
	if c := b.Clock; c != nil {
		h.Clock = &clockJSON{OffsetMS: offsetMillis(c.Offset), UncertaintyMS: millis(c.Uncertainty), Samples: count(c.Samples), Method: c.Method}
	}
	if b.MergedFrom > 1 {
		h.MergedFrom = count(b.MergedFrom)
	}
	h.NewConnections, h.ReusedConnections = count(b.NewConns), count(b.ReusedConns)
	return h
}

func configObject(c loadgen.RunInfo) configJSON {
	o := configJSON{
		URL: c.URL, Model: c.Model, Shape: c.Shape, RequestRate: rate(c.RequestRate), Burstiness: amount(sig(c.Burstiness)),
		Concurrency: count(c.Concurrency), NumPrompts: count(c.NumPrompts), MaxTokens: count(c.MaxTokens), Seed: c.Seed,
		InFlightCap: count(c.InFlightCap), ScheduleHash: c.ScheduleHash, Interrupted: c.Interrupted,
		Dataset: c.Dataset, Stream: c.Stream, Version: c.Version, Command: c.Command, HTTPClient: c.HTTPClient,
		Cancel: c.Cancel,
	}
	if c.Temperature != nil {
		o.Temperature = ptr(amount(sig(*c.Temperature)))
	}
	if c.Segment != nil {
		o.Segment = &segmentJSON{Index: count(c.Segment.Index), Count: count(c.Segment.Count)}
	}
	return o
}

// metricKeys are the keys of b's metrics.
func (b *Bench) metricKeys() metricKeys {
	out := make(metricKeys, 0, len(b.Stats))
	for _, s := range b.Stats {
		has := s.Count > 0
		out = append(out, metricJSON{metric: s.Metric, mean: msWhen(has, s.Mean), median: msWhen(has, s.Median), std: msWhen(has, s.Std),
			percentiles: percentileKeys{metric: s.Metric, ps: b.Percentiles, stats: s.Percentiles}})
	}
	return out
}

func (b *Bench) rest() (benchRest, error) {
	r := benchRest{
		Stages: keyed[stageJSON]{}, Tail: keyed[tailJSON]{}, Sessions: sessionsObject(b.Sessions),
		Slowest:  make([]slowJSON, 0, len(b.Slowest)),
		Timeline: make([]timelineJSON, 0, len(b.Timeline)), Errors: keyed[count]{}, ErrorExamples: keyed[string]{},
		TokenLengths: tokenLengthsObject(b.TokenLengths),
	}
	for _, s := range b.Stages {
		r.Stages = append(r.Stages, entry[stageJSON]{s.Stage, stageJSON{stageHead{count(s.Count), millis(s.Mean)},
			percentileKeys{ps: b.Percentiles, stats: s.Percentiles}}})
	}
	for _, t := range b.Tails {
		r.Tail = append(r.Tail, entry[tailJSON]{t.Metric, tailObject(t.Tail)})
	}
	for _, s := range b.Slowest {
		r.Slowest = append(r.Slowest, slowObject(s))
	}
	for _, t := range b.Timeline {
		r.Timeline = append(r.Timeline, timelineObject(t))
	}
	r.Slices = b.slicesJSON()
	r.HoldSLO = b.HoldSLO
	for _, e := range b.Errors {
		r.Errors = append(r.Errors, entry[count]{e.Kind, count(e.Count)})
		if e.Example != "" {
			r.ErrorExamples = append(r.ErrorExamples, entry[string]{e.Kind, e.Example})
		}
	}
	if b.ServerMetrics != nil {
		r.ServerMetrics = ptr(serverMetricsValue(b.ServerMetrics))
	}
	var err error
	if r.Turns, err = b.turnsJSON(); err != nil {
		return r, err
	}
	if r.Agent, err = b.agentObject(); err != nil {
		return r, err
	}
	r.Histograms, err = b.histogramsJSON()
	return r, err
}

func (b *Bench) histogramsJSON() (histogramsJSON, error) {
	h := histogramsJSON{Metrics: keyed[json.RawMessage]{}, Stages: keyed[json.RawMessage]{}}
	for _, m := range AllMetrics {
		if hist := b.Histograms[m]; hist != nil {
			raw, err := hist.MarshalJSON()
			if err != nil {
				return h, fmt.Errorf("histograms.metrics.%s: %w", m, err)
			}
			h.Metrics = append(h.Metrics, entry[json.RawMessage]{m, raw})
		}
	}
	for _, st := range stageOrder(b.StageHistograms) {
		raw, err := b.StageHistograms[st].MarshalJSON()
		if err != nil {
			return h, fmt.Errorf("histograms.stages.%s: %w", st, err)
		}
		h.Stages = append(h.Stages, entry[json.RawMessage]{st, raw})
	}
	var err error
	h.Phases, err = b.phaseHistogramsJSON()
	return h, err
}

func sessionsObject(s *Sessions) *sessionsJSON {
	if s == nil {
		return nil
	}
	return &sessionsJSON{
		Count: count(s.Count), Completed: count(s.Completed), Interrupted: count(s.Interrupted), Truncated: count(s.Truncated),
		CompletionRate:   derived[number]{number(sig(s.CompletionRate()))},
		InterruptionRate: derived[number]{number(sig(s.InterruptionRate()))},
		FirstSteps:       count(s.FirstSteps), FirstStepsCompleted: count(s.FirstStepsGood),
		FirstStepCompletionRate: derived[number]{number(sig(s.FirstStepCompletionRate()))},
		StepLimitMS:             msWhen(s.StepLimit > 0, s.StepLimit),
	}
}

func slowObject(s SlowRequest) slowJSON {
	out := slowJSON{Index: count(s.Index), TraceID: s.TraceID, Session: s.Session, IntendedS: seconds(s.Intended),
		E2ELMS: millis(s.E2EL), TTFTMS: msWhen(s.TTFT > 0, s.TTFT), Status: count(s.Status), Error: s.ErrKind}
	// The stages of one request in pipeline order, in ms to the microsecond.
	keys := make(map[string]*stats.Histogram, len(s.ServerTiming))
	for k := range s.ServerTiming {
		keys[k] = nil
	}
	for _, k := range stageOrder(keys) {
		out.ServerTiming = append(out.ServerTiming, entry[*amount]{k, ptr(amount(roundTo(s.ServerTiming[k], 3)))})
	}
	return out
}

func timelineObject(t TimelineBin) timelineJSON {
	opt := func(d *time.Duration) *millis {
		if d == nil {
			return nil
		}
		return ptr(millis(*d))
	}
	return timelineJSON{
		TS: seconds(t.T), DtS: seconds(t.Width),
		Sent: count(t.Sent), Completed: count(t.Completed), Failed: count(t.Failed), Output: count(t.OutputTokens), N: count(t.N),
		MeanE2ELMS: msWhen(t.N > 0, t.MeanE2EL), MaxE2ELMS: msWhen(t.N > 0, t.MaxE2EL),
		P50E2ELMS: opt(t.P50E2EL), P99E2ELMS: opt(t.P99E2EL),
		NTTFT:      count(t.NTTFT),
		MeanTTFTMS: msWhen(t.NTTFT > 0, t.MeanTTFT), MaxTTFTMS: msWhen(t.NTTFT > 0, t.MaxTTFT),
		P50TTFTMS: opt(t.P50TTFT), P99TTFTMS: opt(t.P99TTFT),
	}
}

func tailObject(t stats.Tail) tailJSON {
	out := tailJSON{N: count(t.N), EmpiricalP99MS: msWhen(t.N >= stats.MinTailSamples, t.EmpiricalP99),
		Fits: make([]fitJSON, 0, len(t.Fits)), Verdict: derived[string]{t.Verdict()}}
	if h := t.Hill; h != nil {
		out.Hill = &hillJSON{Alpha: sixDigits(h.Alpha), SE: sixDigits(h.SE), K: count(h.K), ThresholdMS: millis(h.Threshold)}
	}
	if t.Best != "" {
		out.Best = &t.Best
	}
	for _, f := range t.Fits {
		params := keyed[sixDigits]{}
		for _, p := range f.Params {
			params = append(params, entry[sixDigits]{p.Name, sixDigits(p.Value)}, entry[sixDigits]{p.Name + "_se", sixDigits(p.SE)})
		}
		out.Fits = append(out.Fits, fitJSON{
			Model: f.Model, Params: params, LogLikelihood: sixDigits(f.LogLikelihood), AIC: sixDigits(f.AIC),
			P99MS: amount(msv(f.P99)), P99ErrorPct: derived[number]{number(roundTo(100*f.RelativeError(t.EmpiricalP99), 2))},
		})
	}
	return out
}

// ---- file to Bench ----

// checker collects the first error met while a file becomes a Bench, naming its key.
type checker struct {
	path string // of the object read: "" for a document, "points[2]" for a sweep's point
	err  error
}

func (c *checker) key(key string) string {
	if c.path == "" {
		return key
	}
	return c.path + "." + key
}

func (c *checker) fail(key, format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%s: %s", c.key(key), fmt.Sprintf(format, args...))
	}
}

func (c *checker) failErr(key string, err error) {
	if c.err == nil && err != nil {
		c.err = fmt.Errorf("%s: %w", c.key(key), err)
	}
}

// bounded is s, when it is at most limit bytes long.
func (c *checker) bounded(key, s string, limit int) string {
	if len(s) > limit {
		c.fail(key, "longer than %d bytes", limit)
		return ""
	}
	return s
}

// UnmarshalJSON reads a ragtail.bench/v1 document (the schema key may be absent, as in the
// points of a sweep, but must be right when present).
func (b *Bench) UnmarshalJSON(data []byte) error {
	var f benchFile
	if err := f.UnmarshalJSON(data); err != nil {
		return readable(err)
	}
	if f.Schema != "" && f.Schema != SchemaBench {
		return fmt.Errorf("schema %q is not %s", f.Schema, SchemaBench)
	}
	nb, err := f.bench("")
	if err != nil {
		return err
	}
	*b = *nb
	return nil
}

// bench is the Bench of the document, whose path is given for errors ("" for a file).
func (f *benchFile) bench(path string) (*Bench, error) {
	c := &checker{path: path}
	b := &Bench{Start: time.Time(f.Start), Config: f.Config.runInfo(c), Histograms: map[string]*stats.Histogram{},
		StageHistograms: map[string]*stats.Histogram{}}
	f.readOptions(c, b)
	f.readCounts(b)
	f.readHistograms(c, b)
	f.readPhases(c, b)
	f.readSlices(b)
	b.HoldSLO = f.HoldSLO
	b.readWorkloads(c, f)
	b.readAgents(c, f.Agent)
	f.readMetrics(b)
	f.readAnalysis(c, b)
	f.readRequests(c, b)
	b.TokenLengths = f.TokenLengths.lengths(c)
	if f.ServerMetrics != nil {
		b.ServerMetrics = f.ServerMetrics.metrics(c, "server_metrics")
	}
	checkCounts(c, b)
	if c.err != nil {
		return nil, c.err
	}
	b.finishTurns()
	if b.Agents != nil {
		b.Agents.finish(b.Percentiles, b.Confidence, b.Duration)
	}
	return b, nil
}

// runInfo is the loadgen.RunInfo of the config.
func (cf *configJSON) runInfo(c *checker) loadgen.RunInfo {
	r := loadgen.RunInfo{
		URL: cf.URL, Model: cf.Model, Shape: cf.Shape, RequestRate: float64(cf.RequestRate), Burstiness: float64(cf.Burstiness),
		Concurrency: int(cf.Concurrency), InFlightCap: int(min(cf.InFlightCap, 1<<30)), NumPrompts: int(cf.NumPrompts),
		MaxTokens: int(cf.MaxTokens), Seed: cf.Seed, Interrupted: cf.Interrupted, Stream: cf.Stream,
		ScheduleHash: c.bounded("config.schedule_hash", cf.ScheduleHash, 64),
		Dataset:      c.bounded("config.dataset", cf.Dataset, maxSettingBytes),
		Version:      c.bounded("config.version", cf.Version, maxSettingBytes),
		Command:      c.bounded("config.command", cf.Command, maxCommandBytes),
		HTTPClient:   c.bounded("config.http_client", cf.HTTPClient, maxSettingBytes),
		Cancel:       c.bounded("config.cancel", cf.Cancel, maxSettingBytes),
	}
	if s := cf.Segment; s != nil {
		seg := loadgen.SegmentOf{Index: int(min(s.Index, 1<<30)), Count: int(min(s.Count, 1<<30))}
		if err := seg.Validate(); err != nil {
			c.failErr("config.segment", err)
		} else {
			r.Segment = &seg
		}
	}
	if t := cf.Temperature; t != nil {
		if *t > 100 {
			c.fail("config.temperature", "want a number from 0 to 100, got %g", float64(*t))
		}
		r.Temperature = ptr(float64(*t))
	}
	return r
}

// Bounds on the recorded settings read from a file: what loadgen.RunInfo.WithProvenance keeps,
// with room to spare.
const (
	maxSettingBytes = 4 << 10
	maxCommandBytes = 128 << 10
)

// readOptions reads what the summary was computed with, and the clock.
func (f *benchFile) readOptions(c *checker, b *Bench) {
	o := &f.Options
	b.Percentiles, b.Metrics, b.Confidence = o.Percentiles, o.Metrics, float64(o.Confidence)
	for _, p := range b.Percentiles {
		if !(p > 0 && p < 100) {
			c.fail("options.percentiles", "percentile %g out of (0, 100)", p)
		}
	}
	if !(b.Confidence > 0 && b.Confidence < 1) {
		b.Confidence = DefaultConfidence
	}
	if o.Goodput != nil {
		slos, err := stats.ParseGoodput(*o.Goodput)
		c.failErr("options.goodput", err)
		b.Goodput = slos
	}
	if o.SessionStepLimitMS != nil {
		b.SessionStepLimit = time.Duration(*o.SessionStepLimitMS)
	}
	if o.USDPerGPUHour != nil || o.GPUs != nil {
		if o.USDPerGPUHour != nil {
			b.Pricing.USDPerGPUHour = float64(*o.USDPerGPUHour)
		}
		if o.GPUs != nil {
			b.Pricing.GPUs = int(min(*o.GPUs, MaxGPUs+1))
		}
		c.failErr("options", b.Pricing.Validate())
	}
	if cl := f.Clock; cl != nil {
		b.Clock = &Clock{Offset: time.Duration(cl.OffsetMS), Uncertainty: time.Duration(cl.UncertaintyMS),
			Samples: int(min(cl.Samples, 1<<40)), Method: cl.Method}
	}
}

// readCounts reads the run's counts and throughputs.
func (f *benchFile) readCounts(b *Bench) {
	b.MergedFrom, b.Sources = int(min(f.MergedFrom, 1<<30)), f.Sources
	b.Completed, b.Failed, b.Warmup, b.Duration = int64(f.Completed), int64(f.Failed), int64(f.Warmup), time.Duration(f.DurationS)
	b.InputTokens, b.OutputTokens = int64(f.TotalInputTokens), int64(f.TotalOutputTokens)
	f.readCancellations(b)
	b.CachedTokens, b.ReasoningTokens = int64(f.TotalCachedTokens), int64(f.TotalReasoningTokens)
	b.RequestThroughput, b.OutputThroughput = float64(f.RequestThroughput), float64(f.OutputThroughput)
	b.TotalTokenThroughput = float64(f.TotalTokenThroughput)
	if f.Goodput != nil {
		b.GoodputRate = ptr(float64(*f.Goodput))
	}
	if f.GoodputRequests != nil {
		b.GoodRequests = int64(*f.GoodputRequests)
	}
}

// readHistograms decodes the metrics' histograms (of AllMetrics; others are ignored) and the
// stages'.
func (f *benchFile) readHistograms(c *checker, b *Bench) {
	for _, e := range f.Histograms.Metrics {
		if slices.Contains(AllMetrics, e.key) {
			b.Histograms[e.key] = readHistogram(c, "histograms.metrics."+e.key, e.value)
		}
	}
	for _, e := range f.Histograms.Stages {
		b.StageHistograms[e.key] = readHistogram(c, "histograms.stages."+e.key, e.value)
	}
	maps.DeleteFunc(b.Histograms, func(_ string, h *stats.Histogram) bool { return h == nil })
	maps.DeleteFunc(b.StageHistograms, func(_ string, h *stats.Histogram) bool { return h == nil })
}

// readHistogram decodes one histogram; nil for a bad one.
func readHistogram(c *checker, key string, raw json.RawMessage) *stats.Histogram {
	h := stats.NewHistogram()
	if err := h.UnmarshalJSON(raw); err != nil {
		c.failErr(key, err)
		return nil
	}
	return h
}

// readMetrics reads the statistics of the metrics the options list, else of those with keys,
// that the bench reports (see Bench.reports, after readWorkloads).
func (f *benchFile) readMetrics(b *Bench) {
	if len(b.Metrics) == 0 {
		for _, m := range f.metrics {
			b.Metrics = append(b.Metrics, m.metric)
		}
	}
	b.Metrics = canonicalMetrics(b.Metrics)
	for _, m := range b.Metrics {
		if !b.reports(m) {
			continue
		}
		s := MetricStats{Metric: m}
		if h := b.Histograms[m]; h != nil {
			s.Count = h.Count()
		}
		if i := slices.IndexFunc(f.metrics, func(k metricJSON) bool { return k.metric == m }); i >= 0 {
			k := f.metrics[i]
			s.Mean, s.Median, s.Std = k.mean.duration(), k.median.duration(), k.std.duration()
			s.Percentiles = k.percentiles.stats
		}
		b.Stats = append(b.Stats, s)
	}
	if len(b.Percentiles) == 0 && len(b.Stats) > 0 {
		for _, p := range b.Stats[0].Percentiles {
			b.Percentiles = append(b.Percentiles, p.P)
		}
	}
}

// duration is the latency, 0 for none.
func (m *millis) duration() time.Duration {
	if m == nil {
		return 0
	}
	return time.Duration(*m)
}

// readAnalysis reads the stages, the tails and the sessions.
func (f *benchFile) readAnalysis(c *checker, b *Bench) {
	stages := map[string]*stats.Histogram{}
	byName := map[string]stageJSON{}
	for _, e := range f.Stages {
		stages[e.key], byName[e.key] = nil, e.value
	}
	for _, k := range stageOrder(stages) {
		s := byName[k]
		b.Stages = append(b.Stages, StageStats{Stage: k, Count: int64(s.Count), Mean: time.Duration(s.MeanMS), Percentiles: s.percentiles.stats})
	}
	tails := slices.Clone(f.Tail)
	slices.SortStableFunc(tails, func(a, b entry[tailJSON]) int { return rankIn(TailMetrics, a.key) - rankIn(TailMetrics, b.key) })
	for _, e := range tails {
		b.Tails = append(b.Tails, MetricTail{Metric: e.key, Tail: e.value.tail(c, "tail."+e.key)})
	}
	if s := f.Sessions; s != nil {
		b.Sessions = &Sessions{Count: int64(s.Count), Completed: int64(s.Completed), Interrupted: int64(s.Interrupted),
			Truncated: int64(s.Truncated), FirstSteps: int64(s.FirstSteps), FirstStepsGood: int64(s.FirstStepsCompleted),
			StepLimit: s.StepLimitMS.duration()}
	}
}

func rankIn(list []string, s string) int {
	if i := slices.Index(list, s); i >= 0 {
		return i
	}
	return len(list)
}

// tail is the stats.Tail of the file's tail object at key.
func (t *tailJSON) tail(c *checker, key string) stats.Tail {
	out := stats.Tail{N: int64(t.N)}
	if out.N >= stats.MinTailSamples { // as written: fewer samples have no empirical P99
		out.EmpiricalP99 = t.EmpiricalP99MS.duration()
	}
	if h := t.Hill; h != nil {
		out.Hill = &stats.Hill{Alpha: float64(h.Alpha), SE: float64(h.SE), K: int64(h.K), Threshold: time.Duration(h.ThresholdMS)}
	}
	for i, fj := range t.Fits {
		names, ok := modelParams[fj.Model]
		if !ok {
			c.fail(fmt.Sprintf("%s.fits[%d].model", key, i), "unknown model %q", fj.Model)
			continue
		}
		fit := stats.Fit{Model: fj.Model, LogLikelihood: float64(fj.LogLikelihood), AIC: float64(fj.AIC),
			P99: msDuration(roundTo(float64(fj.P99MS), 3))}
		for _, n := range names {
			fit.Params = append(fit.Params, stats.Param{Name: n, Value: fj.param(n), SE: fj.param(n + "_se")})
		}
		out.Fits = append(out.Fits, fit)
	}
	if t.Best != nil {
		out.Best = *t.Best
	}
	return out
}

// param is the fit's parameter name, 0 when the file has none.
func (f *fitJSON) param(name string) float64 {
	if i := slices.IndexFunc(f.Params, func(e entry[sixDigits]) bool { return e.key == name }); i >= 0 {
		return float64(f.Params[i].value)
	}
	return 0
}

// readRequests reads the slowest requests, the timeline and the errors.
func (f *benchFile) readRequests(c *checker, b *Bench) {
	for i, s := range f.Slowest {
		if len(s.ServerTiming) > maxStages {
			c.fail(fmt.Sprintf("slowest[%d].server_timing", i), "%d stages, more than %d", len(s.ServerTiming), maxStages)
		}
		r := SlowRequest{Index: int(min(s.Index, 1<<40)), TraceID: s.TraceID, Session: s.Session, Intended: time.Duration(s.IntendedS),
			E2EL: time.Duration(s.E2ELMS), TTFT: s.TTFTMS.duration(), Status: int(min(s.Status, 1000)), ErrKind: s.Error}
		if s.ServerTiming != nil {
			r.ServerTiming = make(map[string]float64, len(s.ServerTiming))
			for _, e := range s.ServerTiming {
				if e.value != nil {
					r.ServerTiming[e.key] = float64(*e.value)
				}
			}
		}
		b.Slowest = append(b.Slowest, r)
	}
	sortSlowest(b.Slowest)
	for _, t := range f.Timeline {
		b.Timeline = append(b.Timeline, TimelineBin{T: time.Duration(t.TS), Width: time.Duration(t.DtS),
			Sent: int64(t.Sent), Completed: int64(t.Completed), Failed: int64(t.Failed), OutputTokens: int64(t.Output), N: int64(t.N),
			MeanE2EL: t.MeanE2ELMS.duration(), MaxE2EL: t.MaxE2ELMS.duration(), P50E2EL: t.P50E2ELMS.optional(), P99E2EL: t.P99E2ELMS.optional(),
			NTTFT: int64(t.NTTFT), MeanTTFT: t.MeanTTFTMS.duration(), MaxTTFT: t.MaxTTFTMS.duration(),
			P50TTFT: t.P50TTFTMS.optional(), P99TTFT: t.P99TTFTMS.optional()})
	}
	examples := map[string]string{}
	for _, e := range f.ErrorExamples {
		examples[e.key] = e.value
	}
	errs := map[string]*ErrorCount{}
	for _, e := range f.Errors {
		errs[e.key] = &ErrorCount{Kind: e.key, Count: int64(e.value), Example: examples[e.key]}
	}
	b.Errors = sortErrors(errs)
}

// optional is the latency, nil for none.
func (m *millis) optional() *time.Duration {
	if m == nil {
		return nil
	}
	return ptr(time.Duration(*m))
}
