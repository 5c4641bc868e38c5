package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Timeouts bound how long a client may hold a connection without doing its part. There is no
// write timeout: a streamed answer lasts as long as generation does, which the pipeline bounds.
type Timeouts struct {
	// Header is the longest a client may take to send the request headers.
	Header time.Duration
	// Body is the longest a client may take to send the request body, from the start of the
	// request; a connection that stalls after its headers is closed when it passes.
	Body time.Duration
	// Idle is the longest a keep-alive connection may wait for its next request.
	Idle time.Duration
}

// DefaultTimeouts are the timeouts of every ragtail listener.
var DefaultTimeouts = Timeouts{Header: 10 * time.Second, Body: 30 * time.Second, Idle: 120 * time.Second}

// MaxHeaderBytes bounds the request headers of every ragtail listener.
const MaxHeaderBytes = 64 << 10

// NewServer returns an http.Server for h with the timeouts t (zero fields take
// DefaultTimeouts') and logger for the server's own errors.
//
// The body timeout is a read deadline set when the request starts and cleared once the body has
// been read, rather than http.Server.ReadTimeout: that deadline would stay on the connection and
// cancel a streamed answer running past it.
func NewServer(h http.Handler, t Timeouts, logger *slog.Logger) *http.Server {
	if t.Header <= 0 {
		t.Header = DefaultTimeouts.Header
	}
	if t.Body <= 0 {
		t.Body = DefaultTimeouts.Body
	}
	if t.Idle <= 0 {
		t.Idle = DefaultTimeouts.Idle
	}
	srv := &http.Server{Handler: bodyDeadline(t.Body, h), ReadHeaderTimeout: t.Header, IdleTimeout: t.Idle,
		MaxHeaderBytes: MaxHeaderBytes}
	if logger != nil {
		srv.ErrorLog = slog.NewLogLogger(logger.Handler(), slog.LevelWarn)
	}
	return srv
}

// bodyDeadline gives every request d to deliver its body: a read deadline on the connection from
// the start of the request, cleared when the body is read to its end or closed.
func bodyDeadline(d time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			next.ServeHTTP(w, r)
			return
		}
		if err := rc.SetReadDeadline(time.Now().Add(d)); err != nil {
			next.ServeHTTP(w, r) // not a connection that takes deadlines (a test recorder)
			return
		}
		r.Body = &deadlineBody{ReadCloser: r.Body, clear: func() { _ = rc.SetReadDeadline(time.Time{}) }}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody clears the connection's read deadline once the body is done.
type deadlineBody struct {
	io.ReadCloser
	clear   func()
	cleared bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.cleared {
		b.cleared = true
		b.clear()
	}
	return n, err
}

func (b *deadlineBody) Close() error {
	if !b.cleared {
		b.cleared = true
		b.clear()
	}
	return b.ReadCloser.Close()
}

// Serve serves each server on its listener until ctx is done or one fails, then shuts them all
// down, letting running requests finish within grace.
func Serve(ctx context.Context, servers []*http.Server, listeners []net.Listener, grace time.Duration, logger *slog.Logger) error {
	errc := make(chan error, len(servers))
	for i, s := range servers {
		go func() { errc <- s.Serve(listeners[i]) }()
	}
	var serveErr error
	select {
	case <-ctx.Done():
		logger.Info("shutting down", "grace", grace)
	case serveErr = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	var errs []error
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		errs = append(errs, serveErr)
	}
	for _, s := range servers {
		if err := s.Shutdown(sctx); err != nil {
			errs = append(errs, fmt.Errorf("shutdown: %w (requests still running after %s were cut)", err, grace))
			_ = s.Close()
		}
	}
	return errors.Join(errs...)
}
