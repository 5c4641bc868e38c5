package profile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grafana/pyroscope-go/upstream"
	"github.com/grafana/pyroscope-go/upstream/remote"
)

// PushStats counts the windows sent to a Pyroscope server.
type PushStats struct {
	// Pushed windows were accepted (HTTP 200).
	Pushed uint64 `json:"pushed"`
	// Failed windows were sent and refused, or the server could not be reached in time.
	Failed uint64 `json:"failed"`
	// Dropped windows were never sent: the queue was full or the profiler stopped first.
	Dropped uint64 `json:"dropped"`
	// Failing is true from the first failure or drop until the next accepted window.
	Failing bool `json:"failing"`
}

// errQueueFull is the outage cause logged when windows arrive faster than Pyroscope takes them.
var errQueueFull = errors.New("push queue full")

// maxResponseBody bounds what is read of a Pyroscope answer (remote reads all of it).
const maxResponseBody = 64 << 10

// pusher forwards upload jobs to pyroscope-go's remote upstream (the regular POST /ingest
// client) through a bounded queue, one job at a time, so that a Pyroscope that is slow, down or
// answering errors costs at most the queue's memory: Upload never blocks, excess windows are
// dropped and counted, and each outage is logged once when it starts and once when it ends.
type pusher struct {
	remote  *remote.Remote
	client  *http.Client
	queue   chan *upstream.UploadJob
	log     *slog.Logger
	address string // redacted, for logs
	timeout time.Duration

	ctx    context.Context // cancelled when the profiler stops and the drain deadline passes
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex // guards closed, the queue's close, and the outage state
	closed  bool
	failing bool
	// failed and dropped since the outage began, for the recovery line
	outageFailed, outageDropped uint64

	// result of the current upload attempt, set by the HTTP client wrapper; only the forwarder
	// goroutine runs attempts, one at a time
	attempted bool
	result    error

	pushed, failed, dropped atomic.Uint64
}

func newPusher(address, user, password, tenant string, queue int, timeout time.Duration, log *slog.Logger) (*pusher, error) {
	u, err := url.Parse(address)
	if err != nil {
		return nil, fmt.Errorf("pyroscope address: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("pyroscope address %q: want http://host:port or https://host:port", u.Redacted())
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxConnsPerHost = 2
	p := &pusher{
		client: &http.Client{
			Transport: transport,
			// remote does not follow redirects either: a redirect would drop the auth header.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		queue:   make(chan *upstream.UploadJob, queue),
		log:     log,
		address: u.Redacted(),
		timeout: timeout,
		done:    make(chan struct{}),
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.remote, err = remote.NewRemote(remote.Config{
		BasicAuthUser:     user,
		BasicAuthPassword: password,
		TenantID:          tenant,
		Address:           address,
		Threads:           1, // jobs reach remote one at a time anyway
		Timeout:           timeout,
		Logger:            debugLogger{log.With("component", "pyroscope-remote")},
		HTTPClient:        pushClient{p},
	})
	if err != nil {
		p.cancel()
		return nil, fmt.Errorf("pyroscope upstream: %w", err)
	}
	p.remote.Start()
	go p.forward()
	return p, nil
}

// enqueue hands job to the forwarder without ever blocking.
func (p *pusher) enqueue(job *upstream.UploadJob) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		p.dropLocked()
		return
	}
	select {
	case p.queue <- job:
	default:
		p.dropLocked()
		p.failLocked(errQueueFull)
	}
}

// forward sends the queued jobs one by one through remote and waits for each: remote.Flush
// returns when the job it was given is done, so remote's own queue never fills and never logs.
func (p *pusher) forward() {
	defer close(p.done)
	for job := range p.queue {
		if p.ctx.Err() != nil {
			p.mu.Lock()
			p.dropLocked()
			p.mu.Unlock()
			continue
		}
		p.attempted, p.result = false, nil
		p.remote.Upload(job)
		p.remote.Flush()
		err := p.result
		if !p.attempted {
			err = errors.New("upload not attempted (see debug log)")
		}
		p.mu.Lock()
		if err != nil {
			p.failed.Add(1)
			p.outageFailed++
			if p.ctx.Err() == nil {
				p.failLocked(err)
			}
		} else {
			p.pushed.Add(1)
			p.recoverLocked()
		}
		p.mu.Unlock()
	}
}

// dropLocked counts a dropped window; p.mu is held.
func (p *pusher) dropLocked() {
	p.dropped.Add(1)
	p.outageDropped++
}

// failLocked enters the outage state, logging its start once; p.mu is held.
func (p *pusher) failLocked(err error) {
	if p.failing {
		return
	}
	p.failing = true
	p.log.Warn("profile push to pyroscope failing; windows stay in the in-process store, "+
		"and are dropped for pyroscope until it answers again (logged once per outage)",
		"address", p.address, "error", err)
}

// recoverLocked leaves the outage state, logging its end with what it cost; p.mu is held.
func (p *pusher) recoverLocked() {
	if p.failing {
		p.log.Info("profile push to pyroscope recovered",
			"address", p.address, "failed", p.outageFailed, "dropped", p.outageDropped)
		p.failing = false
	}
	p.outageFailed, p.outageDropped = 0, 0
}

// stats returns the push counters.
func (p *pusher) stats() PushStats {
	p.mu.Lock()
	failing := p.failing
	p.mu.Unlock()
	return PushStats{Pushed: p.pushed.Load(), Failed: p.failed.Load(), Dropped: p.dropped.Load(), Failing: failing}
}

// stop lets the forwarder push what is queued for at most drain, then abandons the rest (counted
// as dropped) and releases remote's goroutines and the idle connections.
func (p *pusher) stop(drain time.Duration) {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.queue)
	}
	p.mu.Unlock()
	t := time.NewTimer(drain)
	select {
	case <-p.done:
		t.Stop()
	case <-t.C:
		p.cancel()
		<-p.done
	}
	p.cancel()
	p.remote.Stop()
	p.client.CloseIdleConnections()
	if st := p.stats(); st.Failing {
		p.log.Warn("profiler stopped while pyroscope push was failing",
			"address", p.address, "pushed", st.Pushed, "failed", st.Failed, "dropped", st.Dropped)
	}
}

// pushClient is the HTTP client remote uses: it bounds each request by the push timeout and the
// profiler's lifetime, bounds the answer remote reads, and records the outcome for the forwarder
// (remote only logs it).
type pushClient struct{ p *pusher }

// Do implements remote.HTTPClient.
func (c pushClient) Do(req *http.Request) (*http.Response, error) {
	c.p.attempted = true
	ctx, cancel := context.WithTimeout(c.p.ctx, c.p.timeout)
	resp, err := c.p.client.Do(req.WithContext(ctx))
	if err != nil {
		cancel()
		c.p.result = err
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		c.p.result = fmt.Errorf("pyroscope answered %s", resp.Status)
	}
	resp.Body = cancelOnClose{Reader: io.LimitReader(resp.Body, maxResponseBody), body: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelOnClose releases a request's context once its answer is read.
type cancelOnClose struct {
	io.Reader
	body   io.Closer
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	err := c.body.Close()
	c.cancel()
	return err
}

// debugLogger routes a pyroscope-go component's messages to slog at debug level: the profiler
// logs what matters itself, once per event rather than once per window.
type debugLogger struct{ log *slog.Logger }

func (l debugLogger) Infof(format string, args ...any)  { logf(l.log, slog.LevelDebug, format, args) }
func (l debugLogger) Debugf(format string, args ...any) { logf(l.log, slog.LevelDebug, format, args) }
func (l debugLogger) Errorf(format string, args ...any) { logf(l.log, slog.LevelDebug, format, args) }

// sessionLogger routes the session's messages to slog: its start-up banner to debug, its errors
// (a CPU profile that cannot start, a heap dump that fails) to error.
type sessionLogger struct{ log *slog.Logger }

func (l sessionLogger) Infof(format string, args ...any)  { logf(l.log, slog.LevelDebug, format, args) }
func (l sessionLogger) Debugf(format string, args ...any) { logf(l.log, slog.LevelDebug, format, args) }
func (l sessionLogger) Errorf(format string, args ...any) { logf(l.log, slog.LevelError, format, args) }

// logf formats only when the level is enabled: the session logs at debug level on every window.
func logf(log *slog.Logger, level slog.Level, format string, args []any) {
	if log.Enabled(context.Background(), level) {
		log.Log(context.Background(), level, fmt.Sprintf(format, args...))
	}
}
