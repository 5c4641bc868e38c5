package lab

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"
)

func TestClosersLastFirst(t *testing.T) {
	var order []int
	var c Closers
	boom := errors.New("boom")
	c.Add(func() error { order = append(order, 1); return nil })
	c.Add(func() error { order = append(order, 2); return boom })
	c.Add(func() error { order = append(order, 3); return nil })
	if err := c.Close(); !errors.Is(err, boom) {
		t.Errorf("Close() = %v, want the error of the one that failed", err)
	}
	if !slices.Equal(order, []int{3, 2, 1}) {
		t.Errorf("closed in order %v, want 3 2 1", order)
	}
}

// TestServe checks that Serve answers on both loopback URLs and that stop shuts the servers
// down and closes the service.
func TestServe(t *testing.T) {
	handler := func(body string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) })
	}
	closed := false
	tg, stop, err := Serve(context.Background(), handler("api"), handler("admin"), func() error { closed = true; return nil })
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 5 * time.Second}
	get := func(url string) (string, error) {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
		if err != nil {
			return "", err
		}
		resp, err := c.Do(req)
		if err != nil {
			return "", err
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	for url, want := range map[string]string{tg.URL: "api", tg.AdminURL: "admin"} {
		if got, err := get(url); err != nil || got != want {
			t.Errorf("GET %s = %q, %v; want %q", url, got, err, want)
		}
	}
	if err := stop(); err != nil || !closed {
		t.Fatalf("stop() = %v, service closed %v", err, closed)
	}
	if _, err := get(tg.URL); err == nil {
		t.Error("the API still answers after stop")
	}
}
