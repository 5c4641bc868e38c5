package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Closers closes what a caller started, the last first; the zero value is ready to use.
type Closers []func() error

// Add registers f to be called by Close.
func (c *Closers) Add(f func() error) { *c = append(*c, f) }

// Close calls every registered func, the last added first, and joins their errors.
func (c Closers) Close() error {
	var errs []error
	for i := len(c) - 1; i >= 0; i-- {
		errs = append(errs, c[i]())
	}
	return errors.Join(errs...)
}

// serveTimeouts bound the loopback servers' connections: a stalled client cannot hold one.
const (
	serveReadHeaderTimeout = 10 * time.Second
	serveIdleTimeout       = 2 * time.Minute
	serveShutdownGrace     = 10 * time.Second
)

// Serve serves api and admin on loopback ports, as the in-process lab drives a service, and
// returns the Target that reaches them and a stop func that shuts both servers down and then
// calls closeService (the service's own Close; nil for none). On error nothing is left running
// and closeService has been called.
func Serve(ctx context.Context, api, admin http.Handler, closeService func() error) (Target, func() error, error) {
	var stops Closers
	if closeService != nil {
		stops.Add(closeService)
	}
	var urls []string
	for _, h := range []http.Handler{api, admin} {
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			return Target{}, nil, errors.Join(fmt.Errorf("listen on loopback: %w", err), stops.Close())
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: serveReadHeaderTimeout, IdleTimeout: serveIdleTimeout}
		go func() { _ = srv.Serve(ln) }()
		stops.Add(func() error {
			sctx, cancel := context.WithTimeout(context.Background(), serveShutdownGrace)
			defer cancel()
			return srv.Shutdown(sctx)
		})
		urls = append(urls, "http://"+ln.Addr().String())
	}
	return Target{URL: urls[0], AdminURL: urls[1]}, stops.Close, nil
}
