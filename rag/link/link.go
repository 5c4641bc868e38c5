// Package link puts network links between ragtail and its backends: a Link listens on
// loopback, forwards every connection to a backend address, and applies toxiproxy's toxics
// (latency, jitter, bandwidth, slow close, timeout, reset, data limit) to the traffic, so that a
// backend on the same machine answers as one across a zone or a region would. Toxiproxy runs
// in-process as a library (its toxics and toxic chains); no toxiproxy server is involved. A
// Link's toxics change at run time (Set) and it counts its connections and bytes (Stats).
package link

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/stream"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/rs/zerolog"

	"github.com/ragtail/ragtail/rag"
)

// Defaults of New.
const (
	// DefaultListen is the address a Link listens on: loopback, on a port the kernel picks.
	DefaultListen = "127.0.0.1:0"
	// DefaultDialTimeout bounds connecting to the backend for each accepted connection.
	DefaultDialTimeout = 5 * time.Second
)

// meterType is the toxic type of the hidden first toxic of each direction, which counts bytes.
const meterType = "ragtail_meter"

// resetType is the toxic type behind reset_peer. It replaces toxiproxy's reset_peer, whose
// chain requires both connections to be bare *net.TCPConn and which stops reading its input
// once it has reset, leaving the toxics before it blocked for good.
const resetType = "ragtail_reset_peer"

func init() {
	toxics.Register(meterType, new(meterToxic))
	toxics.Register(resetType, new(resetToxic))
}

var linkName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

type config struct {
	listen      string
	dialTimeout time.Duration
}

// Option configures New.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithListen sets the address the link listens on (default DefaultListen).
func WithListen(addr string) Option { return optionFunc(func(c *config) { c.listen = addr }) }

// WithDialTimeout bounds connecting to the backend (default DefaultDialTimeout). A connection
// whose backend cannot be reached in time is closed and counted in Stats.DialErrors.
func WithDialTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.dialTimeout = d
		}
	})
}

// Stats is a snapshot of a Link's counters.
type Stats struct {
	Name            string `json:"name"`
	Listen          string `json:"listen"`           // the address clients connect to
	Upstream        string `json:"upstream"`         // the backend address
	Toxics          string `json:"toxics"`           // the current Spec in its text form
	Connections     uint64 `json:"connections"`      // connections accepted, in total
	Active          int64  `json:"active"`           // connections open now
	DialErrors      uint64 `json:"dial_errors"`      // accepted connections whose backend could not be reached
	BytesUpstream   uint64 `json:"bytes_upstream"`   // bytes from clients to the backend
	BytesDownstream uint64 `json:"bytes_downstream"` // bytes from the backend to clients
}

// Link is a TCP proxy from a loopback listener to a backend, with toxics. It is safe for
// concurrent use.
type Link struct {
	name, upstream string
	dialTimeout    time.Duration
	ln             net.Listener
	server         *toxiproxy.ApiServer
	proxy          *toxiproxy.Proxy

	mu       sync.Mutex // guards spec and conns, and serialises Set
	spec     Spec
	conns    map[uint64][2]net.Conn
	nextConn uint64
	starting uint64 // the connection whose toxic links are being started, for meterToxic.NewState
	closed   bool

	connections, dialErrors atomic.Uint64
	active                  atomic.Int64
	bytesUp, bytesDown      atomic.Uint64

	accepting sync.WaitGroup
}

// New starts a link named name (lower-case letters, digits, '-' and '_', for stats and metric
// labels) that forwards connections to upstream (host:port) with the toxics of spec. Close it
// when done.
func New(name, upstream string, spec Spec, opts ...Option) (*Link, error) {
	cfg := config{listen: DefaultListen, dialTimeout: DefaultDialTimeout}
	for _, o := range opts {
		o.apply(&cfg)
	}
	if !linkName.MatchString(name) {
		return nil, fmt.Errorf("%w: link name %.40q: want lower-case letters, digits, '-' and '_', at most 32", rag.ErrInvalidRequest, name)
	}
	if _, _, err := net.SplitHostPort(upstream); err != nil {
		return nil, fmt.Errorf("%w: link %s: upstream %.100q: want host:port", rag.ErrInvalidRequest, name, upstream)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", cfg.listen)
	if err != nil {
		return nil, fmt.Errorf("link %s: listen on %s: %w", name, cfg.listen, err)
	}
	l := &Link{name: name, upstream: upstream, dialTimeout: cfg.dialTimeout, ln: ln, conns: map[uint64][2]net.Conn{}}
	l.server = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	// The Proxy is never started: it only owns the toxic chains; accepting is done here, so
	// that dials time out and connections are counted and closed by the Link.
	l.proxy = toxiproxy.NewProxy(l.server, name, ln.Addr().String(), upstream)
	for _, dir := range []string{"upstream", "downstream"} {
		w, err := l.proxy.Toxics.AddToxicJson(strings.NewReader(
			fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1}`, meterType+"_"+dir, meterType, dir)))
		if err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("link %s: meter: %w", name, err)
		}
		m := w.Toxic.(*meterToxic)
		m.link, m.downstream = l, dir == "downstream"
	}
	if err := l.Set(spec); err != nil {
		_ = ln.Close()
		return nil, err
	}
	l.accepting.Add(1)
	go l.accept()
	return l, nil
}

// Name returns the link's name.
func (l *Link) Name() string { return l.name }

// Addr returns the address clients connect to instead of the backend's.
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Upstream returns the backend address.
func (l *Link) Upstream() string { return l.upstream }

// Spec returns the current toxics.
func (l *Link) Spec() Spec {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.spec
}

func (l *Link) accept() {
	defer l.accepting.Done()
	dialer := net.Dialer{Timeout: l.dialTimeout}
	for {
		client, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // e.g. out of file descriptors: do not spin
			continue
		}
		l.connections.Add(1)
		go l.connect(&dialer, client)
	}
}

// connect dials the backend for client and starts the two toxic chains between them.
func (l *Link) connect(dialer *net.Dialer, client net.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), l.dialTimeout)
	defer cancel()
	backend, err := dialer.DialContext(ctx, "tcp", l.upstream)
	if err != nil {
		l.dialErrors.Add(1)
		_ = client.Close()
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		_ = client.Close()
		_ = backend.Close()
		return
	}
	l.nextConn++
	id := l.nextConn
	l.conns[id] = [2]net.Conn{client, backend}
	l.active.Add(1)
	if l.spec.HasResetPeer {
		resetOnClose(client, backend)
	}
	l.starting = id // read by meterToxic.NewState, which StartLink calls on this goroutine
	key := fmt.Sprintf("%d", id)
	closeBoth := sync.OnceFunc(func() { _ = client.Close(); _ = backend.Close() })
	l.proxy.Toxics.StartLink(l.server, key+"upstream", client, &drainWriter{conn: backend, fail: closeBoth}, stream.Upstream)
	l.proxy.Toxics.StartLink(l.server, key+"downstream", backend, &drainWriter{conn: client, fail: closeBoth}, stream.Downstream)
}

// drainWriter is the end of a toxic chain. Toxiproxy stops reading a chain when a write to
// its destination fails, which leaves the chain's toxics blocked for good on data still in
// flight (a client that hangs up mid-answer, or Close). Instead, the first failed write
// closes both connections, so that both chains see their input end, and the rest of the
// data is discarded until they do.
type drainWriter struct {
	conn   net.Conn
	fail   func()
	failed bool // only the chain's writer goroutine uses it
}

func (w *drainWriter) Write(p []byte) (int, error) {
	if !w.failed {
		if _, err := w.conn.Write(p); err != nil {
			w.failed = true
			w.fail()
		}
	}
	return len(p), nil
}

func (w *drainWriter) Close() error { return w.conn.Close() }

// resetOnClose makes closing the connections send a TCP RST instead of a FIN.
func resetOnClose(conns ...net.Conn) {
	for _, c := range conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
	}
}

// ended is called once per connection, when its backend-to-client stream has ended, which
// happens whichever side closed first.
func (l *Link) ended(id uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.conns[id]; ok {
		delete(l.conns, id)
		l.active.Add(-1)
	}
}

// toxic is one toxiproxy toxic of a Spec.
type toxic struct {
	name  string // the name in the Spec, and the toxiproxy type unless typ is set
	typ   string
	attrs string // JSON attributes
}

func (t toxic) toxicType() string {
	if t.typ != "" {
		return t.typ
	}
	return t.name
}

func (s Spec) toxics() []toxic {
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	var out []toxic
	if s.Latency > 0 || s.Jitter > 0 {
		out = append(out, toxic{"latency", "", fmt.Sprintf(`{"latency":%d,"jitter":%d}`, ms(s.Latency), ms(s.Jitter))})
	}
	if s.BandwidthKBps > 0 {
		out = append(out, toxic{"bandwidth", "", fmt.Sprintf(`{"rate":%d}`, s.BandwidthKBps)})
	}
	if s.SlowClose > 0 {
		out = append(out, toxic{"slow_close", "", fmt.Sprintf(`{"delay":%d}`, ms(s.SlowClose))})
	}
	if s.HasTimeout {
		out = append(out, toxic{"timeout", "", fmt.Sprintf(`{"timeout":%d}`, ms(s.Timeout))})
	}
	if s.HasResetPeer {
		out = append(out, toxic{"reset_peer", resetType, fmt.Sprintf(`{"timeout":%d}`, ms(s.ResetPeer))})
	}
	if s.LimitData > 0 {
		out = append(out, toxic{"limit_data", "", fmt.Sprintf(`{"bytes":%d}`, s.LimitData)})
	}
	return out
}

// Set replaces the link's toxics. Open connections take the change at once (toxiproxy
// interrupts and rewires their chains); data already delayed keeps its delay.
func (l *Link) Set(spec Spec) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := map[string]string{}
	for _, t := range l.spec.toxics() {
		old[t.name] = t.attrs
	}
	want := spec.toxics()
	keep := map[string]bool{}
	for _, t := range want {
		keep[t.name] = true
	}
	for name := range old {
		if !keep[name] {
			if err := l.proxy.Toxics.RemoveToxic(context.Background(), name); err != nil {
				return fmt.Errorf("link %s: remove %s: %w", l.name, name, err)
			}
		}
	}
	for _, t := range want {
		attrs, had := old[t.name]
		switch {
		case !had:
			body := fmt.Sprintf(`{"name":%q,"type":%q,"stream":"downstream","toxicity":1,"attributes":%s}`, t.name, t.toxicType(), t.attrs)
			if _, err := l.proxy.Toxics.AddToxicJson(bytes.NewReader([]byte(body))); err != nil {
				return fmt.Errorf("link %s: add %s: %w", l.name, t.name, err)
			}
		case attrs != t.attrs:
			body := fmt.Sprintf(`{"toxicity":1,"attributes":%s}`, t.attrs)
			if _, err := l.proxy.Toxics.UpdateToxicJson(t.name, bytes.NewReader([]byte(body))); err != nil {
				return fmt.Errorf("link %s: update %s: %w", l.name, t.name, err)
			}
		}
	}
	if spec.HasResetPeer && !l.spec.HasResetPeer {
		for _, pair := range l.conns {
			resetOnClose(pair[0], pair[1])
		}
	}
	l.spec = spec
	return nil
}

// Stats returns the link's counters and current toxics.
func (l *Link) Stats() Stats {
	return Stats{
		Name:            l.name,
		Listen:          l.Addr(),
		Upstream:        l.upstream,
		Toxics:          l.Spec().String(),
		Connections:     l.connections.Load(),
		Active:          l.active.Load(),
		DialErrors:      l.dialErrors.Load(),
		BytesUpstream:   l.bytesUp.Load(),
		BytesDownstream: l.bytesDown.Load(),
	}
}

// Close stops accepting, closes every open connection and waits for the accept loop to end. It
// is idempotent.
func (l *Link) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	err := l.ln.Close()
	for id, pair := range l.conns {
		_ = pair[0].Close()
		_ = pair[1].Close()
		delete(l.conns, id)
		l.active.Add(-1)
	}
	l.mu.Unlock()
	l.accepting.Wait()
	return err
}

// meterToxic passes data through unchanged and counts it; one sits first in each direction's
// chain. Its per-connection state is the connection id, so the downstream meter can tell the
// Link when a connection's last stream ended.
type meterToxic struct {
	link       *Link
	downstream bool
}

type meterState struct{ conn uint64 }

// NewState implements toxics.StatefulToxic. toxiproxy calls it while the Link starts the
// connection's chains, under the Link's lock, on the goroutine that holds it.
func (m *meterToxic) NewState() any { return &meterState{conn: m.link.starting} }

// Pipe implements toxics.Toxic.
func (m *meterToxic) Pipe(stub *toxics.ToxicStub) {
	counter := &m.link.bytesUp
	if m.downstream {
		counter = &m.link.bytesDown
	}
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				if st, ok := stub.State.(*meterState); ok && m.downstream {
					m.link.ended(st.conn)
				}
				return
			}
			counter.Add(uint64(len(c.Data)))
			stub.Output <- c
		}
	}
}

// resetToxic closes the connection (with a TCP RST, see resetOnClose) after its timeout from
// the first data, then discards whatever still comes in until the chain's input ends.
type resetToxic struct {
	Timeout int64 `json:"timeout"` // in milliseconds
}

// Pipe implements toxics.Toxic.
func (t *resetToxic) Pipe(stub *toxics.ToxicStub) {
	select {
	case <-stub.Interrupt:
		return
	case c := <-stub.Input:
		if c != nil {
			timer := time.NewTimer(time.Duration(t.Timeout) * time.Millisecond)
			select {
			case <-timer.C:
			case <-stub.Interrupt:
				timer.Stop()
				stub.Output <- c
				return
			}
		}
		stub.Close()
		for range stub.Input { //nolint:revive // drain, so that the toxics before this one end
		}
	}
}
