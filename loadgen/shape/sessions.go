package shape

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/dataset"
)

// SessionSource yields sessions in the order they start.
type SessionSource interface {
	Next() (dataset.Session, bool)
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
func Replay(sessions []dataset.Session) SessionSource { return &replay{s: sessions} }

type replay struct {
	s []dataset.Session
	i int
}

func (r *replay) Next() (dataset.Session, bool) {
	if r.i >= len(r.s) {
		return dataset.Session{}, false
	}
	r.i++
	return r.s[r.i-1], true
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

func (s *syntheticSessions) Next() (dataset.Session, bool) {
	sess := dataset.Session{ID: fmt.Sprintf("s%06d", s.n)}
	s.n++
	for p := pageSearch; p != pageExit && len(sess.Steps) < s.cfg.MaxSteps; p = s.next(p) {
		think := time.Duration(0)
		if len(sess.Steps) > 0 {
			think = time.Duration(float64(s.cfg.Think) * math.Exp(0.75*s.rng.NormFloat64()))
		}
		sess.Steps = append(sess.Steps, dataset.SessionStep{Think: think, Request: s.request(p)})
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
