package dashboard

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func get(tb testing.TB, url string) (int, string, http.Header) {
	tb.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Header
}

func TestHandler(t *testing.T) {
	t.Parallel()
	s := NewStore(time.Now().Add(-3*time.Second), WithTitle("bench http://x/v1/chat/completions"))
	srv := httptest.NewServer(Handler(s))
	defer srv.Close()

	code, body, h := get(t, srv.URL+"/")
	if code != 200 || !strings.Contains(body, "api/state?from=") || !strings.HasPrefix(h.Get("Content-Type"), "text/html") {
		t.Fatalf("page: %d %s", code, h.Get("Content-Type"))
	}
	if strings.Contains(body, "http://") || strings.Contains(body, "https://") {
		t.Error("the page loads something from elsewhere: it must be self-contained")
	}
	if h.Get("Content-Security-Policy") == "" {
		t.Error("no Content-Security-Policy on the page")
	}
	if code, _, _ := get(t, srv.URL+"/api/state?from=x"); code != http.StatusBadRequest {
		t.Errorf("from=x: %d, want 400", code)
	}
	if code, _, _ := get(t, srv.URL+"/report"); code != http.StatusNotFound {
		t.Errorf("report before the end: %d, want 404", code)
	}

	s.Add(ok(10*time.Millisecond, 40*time.Millisecond))
	s.Tick(time.Now())
	s.Tick(time.Now())
	var st State
	_, body, _ = get(t, srv.URL+"/api/state?from=1")
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Points) != 1 || st.Points[0].Seq != 1 || st.Final || st.Title == "" || st.WindowS != 10 || st.Elapsed < 3 {
		t.Errorf("state %s", body)
	}
	if st.Points[0].E2EL.P99 == nil || *st.Points[0].E2EL.P99 < 39.9 {
		t.Errorf("window p99 %v", deref(st.Points[0].E2EL.P99))
	}

	s.Finish(time.Now(), []byte("<!doctype html><title>report</title>"))
	code, body, _ = get(t, srv.URL+"/report")
	if code != 200 || !strings.Contains(body, "<title>report</title>") {
		t.Errorf("report: %d %q", code, body)
	}
	select {
	case <-s.FinalSeen():
	default:
		t.Error("the report was served but not marked seen")
	}
}

func TestListenAndLinger(t *testing.T) {
	t.Parallel()
	if _, err := Listen(context.Background(), "127.0.0.1:-1", NewStore(time.Now())); err == nil || !strings.Contains(err.Error(), "127.0.0.1:-1") {
		t.Errorf("a bad address: %v", err)
	}
	s := NewStore(time.Now())
	srv, err := Listen(context.Background(), "127.0.0.1:0", s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(context.Background(), strings.TrimPrefix(strings.TrimSuffix(srv.URL(), "/"), "http://"), NewStore(time.Now())); err == nil {
		t.Error("a port in use: no error")
	}
	// A name rebound to the loopback address is refused.
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL()+"api/state", nil)
	req.Host = "attacker.example:80"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("Host attacker.example: %d, want 421", resp.StatusCode)
	}
	if code, _, _ := get(t, strings.Replace(srv.URL(), "127.0.0.1", "localhost", 1)+"api/state"); code != http.StatusOK {
		t.Errorf("Host localhost: %d", code)
	}
	s.Finish(time.Now(), []byte("done"))
	// Nobody reads the report: Linger waits its whole time.
	begin := time.Now()
	if err := srv.Linger(context.Background(), 300*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d < 300*time.Millisecond || d > 3*time.Second {
		t.Errorf("lingered %s, want 300ms", d)
	}
	if err := srv.Close(context.Background()); err != nil {
		t.Errorf("a second Close: %v", err)
	}

	// A page that loads the report ends the wait early; an already cancelled context does not.
	s2 := NewStore(time.Now())
	srv2, err := Listen(context.Background(), "127.0.0.1:0", s2)
	if err != nil {
		t.Fatal(err)
	}
	s2.Finish(time.Now(), []byte("done"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	read := make(chan int, 1)
	go func() {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, srv2.URL()+"report", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			read <- 0
			return
		}
		resp.Body.Close()
		read <- resp.StatusCode
	}()
	begin = time.Now()
	if err := srv2.Linger(ctx, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d > 10*time.Second {
		t.Errorf("lingered %s after the report was read, want about %s", d, TickInterval)
	}
	if code := <-read; code != http.StatusOK {
		t.Errorf("report: %d", code)
	}
}
