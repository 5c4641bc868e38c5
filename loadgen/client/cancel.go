package client

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"

	"github.com/ragtail/ragtail/loadgen"
)

// errAbandoned is the cause of a request's context when the client abandons the request at
// its cancel point (loadgen.Request.Cancel).
var errAbandoned = errors.New("abandoned at its cancel point")

// abandoner abandons one request at its cancel point: it cancels the request's context, which
// makes either transport close the connection, so the server sees the client go as when a
// user closes a tab.
type abandoner struct {
	point   loadgen.CancelPoint
	origin  time.Time
	rec     *loadgen.Record
	abandon context.CancelCauseFunc
	at      atomic.Int64 // offset from origin when it abandoned; 0 before
	timer   *time.Timer
	// Of the body reads, on the reading goroutine only.
	body   io.Reader
	chunks int // chunks of rec counted into tokens
	tokens int
}

// newAbandoner returns ctx cancellable by the abandoner of p, and the abandoner. A point by
// time from the send starts its timer now.
func newAbandoner(ctx context.Context, p loadgen.CancelPoint, origin time.Time, rec *loadgen.Record) (context.Context, *abandoner) {
	ctx, cancel := context.WithCancelCause(ctx)
	a := &abandoner{point: p, origin: origin, rec: rec, abandon: cancel}
	if p.Tokens == 0 && !p.AfterFirstToken {
		a.timer = time.AfterFunc(p.Delay, a.fire)
	}
	return ctx, a
}

// fire abandons the request now.
func (a *abandoner) fire() {
	a.at.CompareAndSwap(0, max(int64(time.Since(a.origin)), 1))
	a.abandon(errAbandoned)
}

// wrap returns body read through a, which checks the cancel point before each read: the
// tokens counted so far, or the first token's arrival that starts the timer of ttft+DELAY.
// The check runs between reads, so a read that brought several chunks may let the count pass
// N before the request is abandoned.
func (a *abandoner) wrap(body io.Reader) io.Reader {
	if a.point.Tokens == 0 && !a.point.AfterFirstToken {
		return body
	}
	a.body = body
	return a
}

func (a *abandoner) Read(p []byte) (int, error) {
	if a.at.Load() == 0 {
		a.check()
	}
	if a.at.Load() != 0 {
		return 0, errAbandoned
	}
	return a.body.Read(p)
}

// check abandons the request, or starts the timer, when the stream reached the cancel point.
func (a *abandoner) check() {
	switch {
	case a.point.Tokens > 0:
		for ; a.chunks < len(a.rec.Chunks); a.chunks++ {
			a.tokens += a.rec.Chunks[a.chunks].Tokens
		}
		if a.tokens >= a.point.Tokens {
			a.fire()
		}
	case a.rec.FirstToken != 0 && a.timer == nil:
		due := a.origin.Add(a.rec.FirstToken + a.point.Delay)
		if wait := time.Until(due); wait > 0 {
			a.timer = time.AfterFunc(wait, a.fire)
		} else {
			a.fire()
		}
	}
}

// finish marks rec cancelled when the request was abandoned and ended because of it: its
// error, if any, is the abandonment's, not the server's. A response that ended whole before
// the abandonment took effect stays a completed request.
func (a *abandoner) finish() {
	if a.timer != nil {
		a.timer.Stop()
	}
	at := a.at.Load()
	a.abandon(nil)
	if at == 0 || a.rec.ErrKind == "" {
		return
	}
	a.rec.Cancelled, a.rec.CancelledAt = true, time.Duration(at)
	a.rec.ErrKind, a.rec.Err = "", ""
	if a.rec.End < a.rec.CancelledAt {
		a.rec.End = time.Since(a.origin)
	}
}
