package shape

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/ragtail/ragtail/loadgen"
)

// Session is a user session to replay: steps sent one after another, each Think after the
// previous step's response ended.
type Session struct {
	ID       string
	Start    time.Duration // when the first step is due, if HasStart
	HasStart bool          // false: the workload's arrival process says when the session starts
	Steps    []SessionStep
}

// SessionStep is one step of a session.
type SessionStep struct {
	Think   time.Duration // wait after the previous step's response; ignored for the first step
	Request loadgen.Request
}

// SessionSource yields sessions in the order they start.
type SessionSource interface {
	Next() (Session, bool)
}

// Sessions returns the workload of a session source: each session starts at its own Start
// when it has one, else at the process's next arrival (p may be nil when every session has a
// start). It ends when the source (or the process) does.
func Sessions(p Process, src SessionSource) loadgen.Workload { return &sessions{p: p, src: src} }

type sessions struct {
	p    Process
	src  SessionSource
	last time.Duration
}

func (w *sessions) Next() (loadgen.Item, bool) {
	s, ok := w.src.Next()
	if !ok || len(s.Steps) == 0 {
		return loadgen.Item{}, false
	}
	at := s.Start
	if !s.HasStart {
		if w.p == nil {
			return loadgen.Item{}, false
		}
		if at, ok = w.p.Next(); !ok {
			return loadgen.Item{}, false
		}
	}
	at = max(at, w.last) // starts never go back in time
	w.last = at
	item := loadgen.Item{At: at, Request: s.Steps[0].Request, Session: s.ID}
	if len(s.Steps) > 1 {
		item.Then = make([]loadgen.Step, len(s.Steps)-1)
		for i, st := range s.Steps[1:] {
			item.Then[i] = loadgen.Step{Think: st.Think, Request: st.Request}
		}
	}
	return item, true
}

// Replay returns a source of the given sessions, once each, in order.
func Replay(sessions []Session) SessionSource { return &replay{s: sessions} }

type replay struct {
	s []Session
	i int
}

func (r *replay) Next() (Session, bool) {
	if r.i >= len(r.s) {
		return Session{}, false
	}
	r.i++
	return r.s[r.i-1], true
}

// ReadSessions reads sessions from JSONL, one step a line:
//
//	{"session": "u1", "step": 0, "start_ms": 0, "request": {"messages": [{"role": "user", "content": "red shoes"}]}}
//	{"session": "u1", "step": 1, "think_ms": 1800, "request": {"key": "doc-00042#0"}}
//	{"session": "u1", "step": 2, "think_ms": 950, "request": {"path": "/v1/documents/doc-00007%230"}}
//
// "session" is a string or number; "step" orders the steps of a session (they need not be
// contiguous, nor the lines in order); "think_ms" is the user's pause after the previous step's
// response; "start_ms", optional but then on every session's first step, replays when the
// session began (offset from the run's start), else sessions start at the run's arrival
// process. "request" is what a dataset entry may be (OpenAI messages, a prompt, a ShareGPT
// conversation), or a document lookup: {"key": id} (GET /v1/documents/{id}) or {"path": p}.
// Sessions come out ordered by start (by first appearance without starts).
func ReadSessions(r io.Reader) ([]Session, error) {
	type line struct {
		Session json.RawMessage `json:"session"`
		Step    *int            `json:"step"`
		ThinkMS *float64        `json:"think_ms"`
		StartMS *float64        `json:"start_ms"`
		Request json.RawMessage `json:"request"`
	}
	type stepAt struct {
		step int
		st   SessionStep
	}
	byID := map[string]int{}
	var out []Session
	var steps [][]stepAt
	withStart := 0
	err := readLines(r, func(n int, raw json.RawMessage) error {
		var l line
		if err := json.Unmarshal(raw, &l); err != nil {
			return err
		}
		id, err := sessionID(l.Session)
		if err != nil {
			return err
		}
		if l.Step == nil || *l.Step < 0 {
			return errors.New(`"step" must be a non-negative integer`)
		}
		think, err := millis("think_ms", l.ThinkMS)
		if err != nil {
			return err
		}
		req, err := decodeStepRequest(l.Request)
		if err != nil {
			return fmt.Errorf("request: %w", err)
		}
		i, seen := byID[id]
		if !seen {
			i = len(out)
			byID[id] = i
			out = append(out, Session{ID: id})
			steps = append(steps, nil)
		}
		if l.StartMS != nil {
			start, err := millis("start_ms", l.StartMS)
			if err != nil {
				return err
			}
			if out[i].HasStart && out[i].Start != start {
				return fmt.Errorf("session %q has two start_ms", id)
			}
			if !out[i].HasStart {
				withStart++
			}
			out[i].Start, out[i].HasStart = start, true
		}
		for _, s := range steps[i] {
			if s.step == *l.Step {
				return fmt.Errorf("session %q has step %d twice", id, *l.Step)
			}
		}
		steps[i] = append(steps[i], stepAt{*l.Step, SessionStep{Think: think, Request: req}})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sessions: %w", err)
	}
	if len(out) == 0 {
		return nil, errors.New("sessions: no steps")
	}
	if withStart != 0 && withStart != len(out) {
		return nil, fmt.Errorf("sessions: %d of %d sessions have a start_ms: give it to every session or to none", withStart, len(out))
	}
	for i := range out {
		slices.SortFunc(steps[i], func(a, b stepAt) int { return cmp.Compare(a.step, b.step) })
		out[i].Steps = make([]SessionStep, len(steps[i]))
		for j, s := range steps[i] {
			out[i].Steps[j] = s.st
		}
	}
	if withStart > 0 {
		slices.SortStableFunc(out, func(a, b Session) int { return cmp.Compare(a.Start, b.Start) })
	}
	return out, nil
}

func sessionID(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", errors.New(`"session" is missing`)
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil || s == "" {
			return "", errors.New(`"session" must be a non-empty string or a number`)
		}
		return s, nil
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return "", errors.New(`"session" must be a non-empty string or a number`)
	}
	return n.String(), nil
}

// maxMillis bounds think and start times: a year.
const maxMillis = 365 * 24 * 3600 * 1000.0

func millis(name string, v *float64) (time.Duration, error) {
	if v == nil {
		return 0, nil
	}
	if *v < 0 || *v > maxMillis || math.IsNaN(*v) {
		return 0, fmt.Errorf("%q must be between 0 and a year in ms, got %v", name, *v)
	}
	return time.Duration(*v * float64(time.Millisecond)), nil
}

// decodeStepRequest decodes a session step's request: a lookup or a dataset entry.
func decodeStepRequest(raw json.RawMessage) (loadgen.Request, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return loadgen.Request{}, errors.New("missing")
	}
	var lookup struct {
		Key  *string `json:"key"`
		Path *string `json:"path"`
	}
	if err := json.Unmarshal(raw, &lookup); err != nil {
		return loadgen.Request{}, err
	}
	switch {
	case lookup.Key != nil:
		if *lookup.Key == "" {
			return loadgen.Request{}, errors.New(`"key" is empty`)
		}
		return loadgen.Request{Path: DefaultKeyPath + EscapeKey(*lookup.Key), Key: *lookup.Key}, nil
	case lookup.Path != nil:
		if !strings.HasPrefix(*lookup.Path, "/") || strings.ContainsAny(*lookup.Path, " \r\n") {
			return loadgen.Request{}, fmt.Errorf(`"path" %q must be an escaped absolute path`, *lookup.Path)
		}
		return loadgen.Request{Path: *lookup.Path}, nil
	}
	p, ok, err := decodePrompt(raw)
	if err != nil {
		return loadgen.Request{}, err
	}
	if !ok {
		return loadgen.Request{}, errors.New("no prompt, key or path")
	}
	tokens := 0
	for _, m := range p.Messages {
		tokens += EstimateTokens(m.Content)
	}
	return loadgen.Request{Messages: p.Messages, MaxTokens: p.MaxTokens, PromptTokens: tokens, Extra: p.Extra}, nil
}

// SessionConfig shapes synthetic shopping sessions (PITFALLS.md, section 6: search -> product
// -> cart paths).
type SessionConfig struct {
	// Think is the median pause between steps; pauses are lognormal around it (sigma 0.75,
	// so one in ten is over 2.6 times the median). Default 1 s.
	Think time.Duration
	// MaxSteps ends a session after this many steps. Default 12.
	MaxSteps int
	// Products, if set, makes product views document lookups from this key source; otherwise
	// they are chat requests describing a product.
	Products Source
}

// page is a step of a synthetic session.
type page int

const (
	pageSearch page = iota
	pageProduct
	pageCart
	pageCheckout
	pageExit
)

// transitions[p] are the probabilities of the next page after p, in page order: a user who
// searched opens a product or searches again; from a product, adds it to the cart, opens
// another, searches or leaves; from the cart, checks out or goes back.
var transitions = [...][5]float64{
	pageSearch:   {0.15, 0.60, 0, 0, 0.25},
	pageProduct:  {0.15, 0.25, 0.35, 0, 0.25},
	pageCart:     {0, 0.20, 0, 0.60, 0.20},
	pageCheckout: {0, 0, 0, 0, 1},
}

// SyntheticSessions returns an endless source of shopping sessions walking the transitions
// above from a search, with lognormal think times.
func SyntheticSessions(cfg SessionConfig, seed uint64) (SessionSource, error) {
	if cfg.Think == 0 {
		cfg.Think = time.Second
	}
	if cfg.MaxSteps == 0 {
		cfg.MaxSteps = 12
	}
	if cfg.Think < 0 || cfg.MaxSteps < 1 {
		return nil, fmt.Errorf("synthetic sessions: think time (%v) must not be negative and max steps (%d) must be positive", cfg.Think, cfg.MaxSteps)
	}
	return &syntheticSessions{cfg: cfg, rng: newRand(seed, streamSessions)}, nil
}

type syntheticSessions struct {
	cfg SessionConfig
	rng *rand.Rand
	n   int
}

func (s *syntheticSessions) Next() (Session, bool) {
	sess := Session{ID: fmt.Sprintf("s%06d", s.n)}
	s.n++
	for p := pageSearch; p != pageExit && len(sess.Steps) < s.cfg.MaxSteps; p = s.next(p) {
		think := time.Duration(0)
		if len(sess.Steps) > 0 {
			think = time.Duration(float64(s.cfg.Think) * math.Exp(0.75*s.rng.NormFloat64()))
		}
		sess.Steps = append(sess.Steps, SessionStep{Think: think, Request: s.request(p)})
	}
	return sess, true
}

func (s *syntheticSessions) next(p page) page {
	u := s.rng.Float64()
	for q, prob := range transitions[p] {
		if u < prob {
			return page(q)
		}
		u -= prob
	}
	return pageExit
}

func (s *syntheticSessions) request(p page) loadgen.Request {
	chat := func(prefix string, words, maxTokens int) loadgen.Request {
		return loadgen.Request{
			Messages:     []loadgen.Message{{Role: "user", Content: prefix + syntheticText(s.rng, 0, words, words)}},
			MaxTokens:    maxTokens,
			PromptTokens: words + 4,
		}
	}
	switch p {
	case pageSearch:
		return chat("Search the catalogue for: ", 6+s.rng.IntN(12), 64)
	case pageProduct:
		if s.cfg.Products != nil {
			return s.cfg.Products.Next()
		}
		return chat("Describe this product: ", 20+s.rng.IntN(40), 128)
	case pageCart:
		return chat("Compare the items in my cart: ", 80+s.rng.IntN(160), 128)
	default:
		return chat("Confirm my order: ", 10+s.rng.IntN(10), 32)
	}
}
