package dataset

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
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
