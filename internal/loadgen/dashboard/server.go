package dashboard

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

//go:embed page.html
var page []byte

// TickInterval is the time between two points of a Server's Store.
const TickInterval = time.Second

// Server serves a Store's page, its JSON and the final report, and ticks the Store every
// TickInterval while it runs.
type Server struct {
	store *Store
	ln    net.Listener
	srv   *http.Server

	stopTicks chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// Listen binds addr (host:port; port 0 picks a free one) and starts serving store on it and
// ticking it. The caller closes the Server.
func Listen(ctx context.Context, addr string, store *Store) (*Server, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	h := Handler(store)
	if ip, ok := ln.Addr().(*net.TCPAddr); ok && ip.IP.IsLoopback() {
		h = loopbackHosts(h)
	}
	s := &Server{store: store, ln: ln, stopTicks: make(chan struct{}),
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
			WriteTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 16 << 10}}
	s.wg.Go(func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.closeErr = err
		}
	})
	s.wg.Go(s.tick)
	return s, nil
}

// URL is the page's address, http://host:port/.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() + "/" }

// tick closes a point of the store every TickInterval until Close.
func (s *Server) tick() {
	t := time.NewTicker(TickInterval)
	defer t.Stop()
	for {
		select {
		case now := <-t.C:
			s.store.Tick(now)
		case <-s.stopTicks:
			return
		}
	}
}

// Close stops ticking and shuts the server down, waiting until ctx is done for the responses
// under way. It is idempotent.
func (s *Server) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		close(s.stopTicks)
		err := s.srv.Shutdown(ctx)
		if err != nil {
			_ = s.srv.Close()
		}
		s.wg.Wait()
		s.closeErr = errors.Join(s.closeErr, err)
	})
	return s.closeErr
}

// Linger keeps the server up after the run until a page has loaded the final report, d has
// passed, or ctx is done, whichever comes first, then closes it. A ctx already done when
// Linger is called (the Ctrl-C that stopped the run) does not cut the wait; stop, when it
// fires (a further Ctrl-C), does.
func (s *Server) Linger(ctx context.Context, d time.Duration, stop <-chan struct{}) error {
	if d > 0 {
		t := time.NewTimer(d)
		done := ctx.Done()
		if ctx.Err() != nil {
			done = nil
		}
		select {
		case <-t.C:
		case <-s.store.FinalSeen():
			// The page fetched the report; let its last poll see the final state too.
			select {
			case <-time.After(TickInterval + 200*time.Millisecond):
			case <-done:
			case <-stop:
			}
		case <-done:
		case <-stop:
		}
		t.Stop()
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	return s.Close(sctx)
}

// Handler serves store: the page at /, its JSON at /api/state?from=SEQ (the points from that
// sequence number on; the page polls it every second), and the final report at /report once
// the run ended.
func Handler(store *Store) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		secure(w)
		_, _ = w.Write(page)
	})
	mux.HandleFunc("GET /api/state", func(w http.ResponseWriter, r *http.Request) {
		from := int64(0)
		if v := r.URL.Query().Get("from"); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				http.Error(w, "from: want a point's sequence number, 0 or more", http.StatusBadRequest)
				return
			}
			from = n
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if err := json.NewEncoder(w).Encode(store.State(from, time.Now())); err != nil {
			return // the page went away
		}
	})
	mux.HandleFunc("GET /report", func(w http.ResponseWriter, r *http.Request) {
		html := store.finalHTML()
		if html == nil {
			http.Error(w, "the run has not ended: its report comes at the end", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(html)
	})
	return mux
}

// loopbackHosts refuses requests whose Host is not a loopback address or localhost: a page of
// another site that rebinds its name to 127.0.0.1 cannot read a dashboard that listens there.
func loopbackHosts(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		ip := net.ParseIP(strings.Trim(host, "[]"))
		if !strings.EqualFold(host, "localhost") && (ip == nil || !ip.IsLoopback()) {
			http.Error(w, "the dashboard answers requests for a loopback address or localhost only", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// secure sets the headers that keep the page to itself: no script or request to another
// origin, and no framing by another site.
func secure(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; frame-src 'self'; frame-ancestors 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
}
