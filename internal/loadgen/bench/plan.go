package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/client"
	"github.com/ragtail/ragtail/loadgen/dataset"
	"github.com/ragtail/ragtail/loadgen/shape"
)

// plan is the workload of a run and how to describe it. The files it needs are read once, when
// it is made; workload builds the same seeded workload from them each time it is called (for
// the schedule's hash, the preflight request and the run itself).
type plan struct {
	desc       string  // RunInfo.Shape
	rate       float64 // RunInfo.RequestRate
	burstiness float64
	closedLoop bool
	build      func() (loadgen.Workload, error)
	// overrideMaxTokens drops the output lengths the workload's requests bring.
	overrideMaxTokens bool
}

// workload builds the plan's workload afresh.
func (p plan) workload() (loadgen.Workload, error) {
	w, err := p.build()
	if err != nil {
		return nil, err
	}
	if p.overrideMaxTokens {
		w = maxTokensOverride{w}
	}
	return w, nil
}

// plan makes the plan of o at the given rate (+Inf for none) and concurrency: a trace replayed
// on its timestamps, the article's shaper, or arrivals and what each sends.
func (o *Load) plan(rate float64, concurrency int) (plan, error) {
	var p plan
	var err error
	switch {
	case o.Dataset.Trace != "":
		p, err = o.tracePlan(rate)
	case o.Shape.Article:
		p = o.articlePlan(rate)
	default:
		p, err = o.arrivalsPlan(rate, concurrency)
	}
	if err != nil {
		return p, err
	}
	p.overrideMaxTokens = o.OverrideMaxTokens
	// The first build finds what the settings and the files' contents make impossible.
	_, err = p.workload()
	return p, err
}

// articlePlan is the plan of the article's shaper, at rate unless it is +Inf.
func (o *Load) articlePlan(rate float64) plan {
	cfg, seed := o.Article, o.Seed
	if !math.IsInf(rate, 1) {
		cfg = cfg.WithRate(rate)
	}
	return plan{desc: cfg.String(), rate: cfg.MeanRate(), build: func() (loadgen.Workload, error) {
		w, err := shape.Article(cfg, seed)
		if err != nil {
			return nil, fmt.Errorf("--shape article: %w", err)
		}
		return w, nil
	}}
}

// arrivalsPlan is the plan of arrivals (a closed loop, or --shape's arrival process) and what
// each sends (sources).
func (o *Load) arrivalsPlan(rate float64, concurrency int) (plan, error) {
	p, arrivals, err := o.arrivals(rate, concurrency)
	if err != nil {
		return p, err
	}
	src, err := o.sources()
	if err != nil {
		return p, err
	}
	if src.ownStarts {
		p.desc, p.closedLoop, arrivals = "sessions replayed at their start times", false, nil
	}
	p.desc = strings.TrimPrefix(p.desc+src.what, ", ")
	p.build = func() (loadgen.Workload, error) { return src.workload(arrivals) }
	return p, nil
}

// newProcess builds an arrival process afresh.
type newProcess func() (shape.Process, error)

// arrivals plans the arrivals at rate: a closed loop's when the rate is infinite, users are
// given and the shape sets no rate of its own, else --shape's arrival process.
func (o *Load) arrivals(rate float64, concurrency int) (plan, newProcess, error) {
	p := plan{rate: rate}
	profiled := o.Shape.profiled()
	if p.closedLoop = math.IsInf(rate, 1) && concurrency > 0 && !profiled; p.closedLoop {
		// The report says "closed loop of N users" from the rate and the concurrency; the
		// shape only names what else there is (sessions).
		return p, func() (shape.Process, error) { return shape.Infinite(), nil }, nil
	}
	spec, burstiness, seed := o.Shape.Process, o.Burstiness, o.Seed
	arrivals := func() (shape.Process, error) {
		proc, err := spec.Process(rate, burstiness, seed)
		if err != nil {
			return nil, fmt.Errorf("--shape: %w", err)
		}
		return proc, nil
	}
	proc, err := arrivals()
	if err != nil {
		return p, nil, err
	}
	p.desc = proc.String()
	if spec.Name == shape.ProcessGamma || profiled {
		p.burstiness = burstiness
	}
	if profiled {
		p.rate = 0
	}
	return p, arrivals, nil
}

// sources are what a plan's arrivals send, built afresh for each workload: the dataset's
// requests, or sessions.
type sources struct {
	requests  func() (shape.Source, error)        // when sessions is nil
	sessions  func() (shape.SessionSource, error) // nil for requests
	what      string                              // for the plan's description, e.g. ", synthetic sessions"
	ownStarts bool                                // the sessions bring their start times: no arrival process
}

// workload builds the workload of s on the arrivals of newProc (nil for none).
func (s sources) workload(newProc newProcess) (loadgen.Workload, error) {
	var proc shape.Process
	if newProc != nil {
		var err error
		if proc, err = newProc(); err != nil {
			return nil, err
		}
	}
	if s.sessions != nil {
		src, err := s.sessions()
		if err != nil {
			return nil, err
		}
		return shape.Sessions(proc, src), nil
	}
	src, err := s.requests()
	if err != nil {
		return nil, err
	}
	return shape.Open(proc, src), nil
}

// sources reads what each arrival sends: --sessions, the conversations of --multi-turn, or the
// requests of --dataset.
func (o *Load) sources() (sources, error) {
	switch {
	case o.Sessions == "synthetic":
		return o.syntheticSessions()
	case o.Sessions != "":
		return o.sessionsFile()
	case o.MultiTurn:
		return o.conversations()
	}
	return o.datasetRequests()
}

// syntheticSessions are --sessions synthetic: search, product and cart paths, the products
// drawn from key lookups when --dataset asks for them.
func (o *Load) syntheticSessions() (sources, error) {
	cfg, seed := shape.SessionConfig{Think: o.Think}, o.Seed
	var products func() (shape.Source, error)
	if o.isKeyLookups() {
		var err error
		if products, err = o.keys(); err != nil {
			return sources{}, err
		}
	}
	return sources{what: ", synthetic sessions", sessions: func() (shape.SessionSource, error) {
		c := cfg
		if products != nil {
			var err error
			if c.Products, err = products(); err != nil {
				return nil, err
			}
		}
		src, err := shape.SyntheticSessions(c, seed)
		if err != nil {
			return nil, fmt.Errorf("--sessions: %w", err)
		}
		return src, nil
	}}, nil
}

// sessionsFile reads the sessions of --sessions FILE, each continuing its conversation with
// --multi-turn.
func (o *Load) sessionsFile() (sources, error) {
	f, err := os.Open(o.Sessions)
	if err != nil {
		return sources{}, fmt.Errorf("--sessions: %w", err)
	}
	sessions, err := dataset.ReadSessions(f)
	_ = f.Close() // read only
	if err != nil {
		return sources{}, fmt.Errorf("--sessions %s: %w", o.Sessions, err)
	}
	if o.MultiTurn {
		shape.ContinueConversations(sessions)
	}
	s := sources{sessions: func() (shape.SessionSource, error) { return shape.Replay(sessions), nil }}
	if sessions[0].HasStart {
		s.ownStarts = true
	} else {
		s.what = ", sessions from " + filepath.Base(o.Sessions)
	}
	return s, nil
}

// conversations reads the conversations of --dataset FILE --multi-turn, replayed turn by turn
// as sessions.
func (o *Load) conversations() (sources, error) {
	if !o.Dataset.isPrompts() {
		return sources{}, fmt.Errorf("--multi-turn needs a ShareGPT or OpenAI-messages --dataset file (or --sessions FILE), not %q", o.Dataset)
	}
	f, err := os.Open(o.Dataset.File)
	if err != nil {
		return sources{}, fmt.Errorf("--multi-turn needs a ShareGPT or OpenAI-messages --dataset file (or --sessions FILE): %w", err)
	}
	defer func() { _ = f.Close() }() // read only
	convs, err := dataset.ReadConversations(f)
	if err != nil {
		return sources{}, fmt.Errorf("--dataset %s: %w", o.Dataset, err)
	}
	think, seed := o.Think, o.Seed
	return sources{what: ", conversations from " + filepath.Base(o.Dataset.File), sessions: func() (shape.SessionSource, error) {
		src, err := shape.ConversationSessions(convs, think, seed)
		if err != nil {
			return nil, fmt.Errorf("--multi-turn: %w", err)
		}
		return src, nil
	}}, nil
}

// datasetRequests are the requests of --dataset, embedded --embed-batch at a time by an
// /embeddings URL.
func (o *Load) datasetRequests() (sources, error) {
	requests, err := o.prompts()
	if err != nil || !o.isEmbeddings() {
		return sources{requests: requests}, err
	}
	batch := max(o.EmbedBatch, 1)
	return sources{what: fmt.Sprintf(", embeddings of %d inputs a request", batch), requests: func() (shape.Source, error) {
		src, err := requests()
		if err != nil {
			return nil, err
		}
		if src, err = shape.Embeddings(src, batch); err != nil {
			return nil, fmt.Errorf("--embed-batch: %w", err)
		}
		return src, nil
	}}, nil
}

// prompts reads the prompts of --dataset: key lookups, synthetic lengths or a file's prompts.
func (o *Load) prompts() (func() (shape.Source, error), error) {
	d, seed := o.Dataset, o.Seed
	switch {
	case d.Keys:
		return o.keys()
	case d.File == "":
		lengths := d.lengths()
		return func() (shape.Source, error) { return shape.Synthetic(lengths, seed) }, nil
	}
	f, err := os.Open(d.File)
	if err != nil {
		return nil, fmt.Errorf("--dataset: %w", err)
	}
	defer func() { _ = f.Close() }() // read only
	prompts, err := dataset.ReadDataset(f)
	if err != nil {
		return nil, fmt.Errorf("--dataset %s: %w", d, err)
	}
	return func() (shape.Source, error) {
		src, err := shape.Prompts(prompts, seed)
		if err != nil {
			return nil, fmt.Errorf("--dataset %s: %w", d, err)
		}
		return src, nil
	}, nil
}

// keys reads the key lookups of --dataset keys[:FILE] and the --key-* flags.
func (o *Load) keys() (func() (shape.Source, error), error) {
	cfg := shape.KeyConfig{Pattern: o.Keys.Pattern, Count: o.Keys.Count, Hot: o.Keys.Hot, Alpha: o.Article.Alpha,
		ColdFraction: o.Keys.Cold, InvalidFraction: o.Keys.Invalid}
	if file := o.Dataset.File; file != "" {
		f, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("--dataset: %w", err)
		}
		cfg.Keys, err = dataset.ReadKeys(f)
		_ = f.Close() // read only
		if err != nil {
			return nil, fmt.Errorf("--dataset %s: %w", file, err)
		}
	}
	seed := o.Seed
	return func() (shape.Source, error) {
		src, err := shape.Keys(cfg, seed)
		if err != nil {
			return nil, fmt.Errorf("--dataset keys: %w", err)
		}
		return src, nil
	}, nil
}

// maxTokensOverride drops the output lengths a dataset or a session brings, so that a
// --max-tokens given on the command line applies to every request.
type maxTokensOverride struct{ loadgen.Workload }

func (m maxTokensOverride) Next() (loadgen.Item, bool) {
	item, ok := m.Workload.Next()
	item.Request.MaxTokens = 0
	if len(item.Then) > 0 {
		then := make([]loadgen.Step, len(item.Then))
		copy(then, item.Then)
		for i := range then {
			then[i].Request.MaxTokens = 0
		}
		item.Then = then
	}
	return item, ok
}

// preflight sends the first request of p's workload once, before the run: a dead URL, a wrong
// model or a bad key stops here with the server's whole message.
func (o *Load) preflight(ctx context.Context, c *client.Client, p plan) error {
	w, err := p.workload()
	if err != nil {
		return err
	}
	item, ok := w.Next()
	if !ok {
		return errors.New("the workload has no request")
	}
	pctx, cancel := context.WithTimeout(ctx, max(o.Timeout, 0)+time.Minute)
	defer cancel()
	err = c.Preflight(pctx, &item.Request)
	var pe *client.PreflightError
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return errors.New("interrupted during the preflight request")
	case o.isKeyLookups() && errors.As(err, &pe) && pe.Status == http.StatusNotFound:
		return nil // a key that does not exist is an answer (--invalid-keys asks for some)
	}
	return err
}
