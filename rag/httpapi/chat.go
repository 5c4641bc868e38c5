package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/openai"
	"github.com/ragtail/ragtail/rag/pipeline"
)

// UserIDHeader is the request header whose value the pipeline records as rag.user.id.
const UserIDHeader = "X-User-ID"

// MaxUserIDLen is the longest UserIDHeader value accepted, in bytes; a longer one gets a 400
// rather than being stored on every span of the request.
const MaxUserIDLen = 256

// chatCompletions serves POST /v1/chat/completions, streamed or not.
func (a *API) chatCompletions(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, openai.MaxBodyBytes)
	req, err := openai.DecodeChatRequest(r.Body)
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	q, err := req.Query(a.cfg.limits)
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	q.ID = openai.NewCompletionID()
	q.UserID = r.Header.Get(UserIDHeader)
	if len(q.UserID) > MaxUserIDLen {
		openai.WriteError(w, &openai.HTTPError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_header",
			Message: fmt.Sprintf("%s is %d bytes long; at most %d are accepted", UserIDHeader, len(q.UserID), MaxUserIDLen), Err: rag.ErrInvalidRequest})
		return
	}
	w.Header().Set("X-Request-ID", q.ID)

	// The coupling is resolved here, once, from one snapshot of the pipeline's configuration:
	// what the response streams and what the run does cannot disagree.
	pr := a.p.Prepare(q)
	if req.Stream {
		a.stream(w, r, req, &pr)
		return
	}
	a.complete(w, r, &pr)
}

// complete answers a non-streamed request: the whole answer in one JSON body, Server-Timing as a
// header.
func (a *API) complete(w http.ResponseWriter, r *http.Request, q *pipeline.Request) {
	sink := collectSink{cut: newCut(r.Context())}
	res, err := a.p.Do(r.Context(), q, &sink)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client is gone; nobody to answer
		}
		a.logFailure(r.Context(), q, err)
		openai.WriteError(w, err)
		return
	}
	w.Header().Set("Server-Timing", res.ServerTiming())
	openai.WriteJSON(w, http.StatusOK, openai.Completion(q.ID, q.Model, sink.text.String(), res.FinishReason, res.Usage))
}

// collectSink gathers the answer of a non-streamed request.
type collectSink struct {
	text strings.Builder
	cut  tokenCut
}

func (s *collectSink) Progress(pipeline.Progress) error { return nil }

func (s *collectSink) Delta(d rag.Delta) error {
	if err := s.cut.before(); err != nil {
		return err
	}
	s.text.WriteString(d.Text)
	s.cut.wrote(d.Tokens)
	return nil
}

// tokenCut ends an answer with a route fault rule's error once its token count is written.
type tokenCut struct {
	limit, sent int
	err         error
}

func newCut(ctx context.Context) tokenCut {
	d := routeCut(ctx)
	return tokenCut{limit: d.CutAfterTokens, err: d.CutErr}
}

// before returns the cut's error when the answer has reached it.
func (c *tokenCut) before() error {
	if c.limit > 0 && c.sent >= c.limit {
		return c.err
	}
	return nil
}

func (c *tokenCut) wrote(tokens int) { c.sent += tokens }

// stream answers a streamed request. Headers go out with the first event, so that every error
// before it (unknown model, overload, a dead retriever) still gets its proper status code. In
// async coupling the first events are retrieval progress comments; otherwise the first token.
// Server-Timing is sent as a trailer and repeated on the last chunk.
func (a *API) stream(w http.ResponseWriter, r *http.Request, req *openai.ChatRequest, q *pipeline.Request) {
	includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	w.Header().Set("Trailer", "Server-Timing")
	sink := &streamSink{cs: openai.NewChatStream(w, q.ID, q.Model, includeUsage), progress: q.Coupling == rag.CouplingAsync || q.Mode == rag.ModeAgentic,
		cut: newCut(r.Context())}
	res, err := a.p.Do(r.Context(), q, sink)
	switch {
	case err == nil:
		timing := res.ServerTiming()
		w.Header().Set("Server-Timing", timing)
		_ = sink.cs.Finish(res.FinishReason, res.Usage, timing)
	case r.Context().Err() != nil || errors.Is(err, errClientGone):
		// The client disconnected: generation was cancelled downstream; nothing to write.
	case !sink.started:
		w.Header().Del("Trailer")
		a.logFailure(r.Context(), q, err)
		openai.WriteError(w, err)
	default:
		a.logFailure(r.Context(), q, err)
		_ = sink.cs.Fail(err)
	}
}

// progressEvent is the JSON of a retrieval progress comment (": rag {...}").
type progressEvent struct {
	Stage     rag.Stage `json:"stage"`
	Shard     int       `json:"shard"`
	Hits      int       `json:"hits"`
	Late      bool      `json:"late,omitempty"`
	Failed    bool      `json:"failed,omitempty"`
	ElapsedMS float64   `json:"elapsed_ms"`
	Message   string    `json:"message"`
	Step      int       `json:"step,omitempty"` // agentic: the model call that asked for a search
}

// errClientGone marks a failed write to the client, so the pipeline stops generating.
var errClientGone = errors.New("client connection lost")

// streamSink writes pipeline events as OpenAI chunks. Progress events become SSE comments (which
// OpenAI clients ignore) only when progress streaming is on.
type streamSink struct {
	cs       *openai.ChatStream
	progress bool
	started  bool
	cut      tokenCut
}

func (s *streamSink) Progress(ev pipeline.Progress) error {
	if !s.progress {
		return nil
	}
	s.started = true
	b, err := json.Marshal(progressEvent{
		Stage: ev.Stage, Shard: ev.Shard, Hits: ev.Hits, Late: ev.Late, Failed: ev.Failed,
		ElapsedMS: float64(ev.Elapsed) / float64(time.Millisecond), Message: ev.Message, Step: ev.Step,
	})
	if err != nil {
		return err
	}
	if err := s.cs.Start(); err != nil {
		return errors.Join(errClientGone, err)
	}
	if err := s.cs.Comment("rag " + string(b)); err != nil {
		return errors.Join(errClientGone, err)
	}
	return nil
}

func (s *streamSink) Delta(d rag.Delta) error {
	if err := s.cut.before(); err != nil {
		return err
	}
	s.started = true
	s.cut.wrote(d.Tokens)
	if d.Text == "" {
		return nil
	}
	if err := s.cs.Content(d.Text); err != nil {
		return errors.Join(errClientGone, err)
	}
	return nil
}

// logFailure logs a failed request, at most logBurst lines at once and then one a second per
// status code, with the model name and the error text cut to pipeline.MaxRecordedLen.
func (a *API) logFailure(ctx context.Context, q *pipeline.Request, err error) {
	he := openai.ToHTTPError(err)
	ok, suppressed := a.failures.allow(he.Status)
	if !ok {
		return
	}
	level := slog.LevelWarn
	if he.Status >= 500 {
		level = slog.LevelError
	}
	attrs := []any{"request_id", q.ID, "model", pipeline.Truncate(q.Model, pipeline.MaxRecordedLen),
		"stage", string(rag.StageOf(err)), "status", he.Status, "err", pipeline.Truncate(err.Error(), pipeline.MaxRecordedLen)}
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed)
	}
	a.cfg.logger.Log(ctx, level, "chat completion failed", attrs...)
}
