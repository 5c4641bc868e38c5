package loadgen_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/client"
	"github.com/ragtail/ragtail/loadgen/shape"
)

// TestStopWithEndlessStreams runs against a server whose streams never end and stops the run
// as a first Ctrl-C does: every stream is cut past its max_tokens and recorded as overlong, so
// the drain ends at once instead of waiting out its 60 s while the chunk records grew (an
// endless stream reached 3 GB in 39 s).
func TestStopWithEndlessStreams(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for r.Context().Err() == nil {
			if _, err := io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"tok\"}}]}\n\n"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	defer srv.Close()
	c, err := client.New(srv.URL+"/v1/chat/completions", client.WithModel("m"), client.WithMaxTokens(5))
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	arrivals, err := shape.Constant(20)
	if err != nil {
		t.Fatal(err)
	}
	prompts, err := shape.Synthetic([]shape.Length{shape.Short}, 1)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	ctx, abort := context.WithCancel(context.Background()) // the second Ctrl-C
	defer abort()
	type outcome struct {
		res *loadgen.Result
		err error
	}
	done := make(chan outcome, 1)
	start := time.Now()
	go func() {
		res, err := loadgen.Run(ctx, loadgen.Config{Workload: shape.Open(arrivals, prompts), Client: c,
			Duration: time.Minute, Stop: stop})
		done <- outcome{res, err}
	}()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	var out outcome
	select {
	case out = <-done:
	case <-time.After(15 * time.Second):
		abort()
		out = <-done
		t.Errorf("the drain after a graceful stop was still waiting after %v", time.Since(start))
	}
	if out.err != nil {
		t.Fatal(out.err)
	}
	if len(out.res.Records) == 0 {
		t.Fatal("no request sent")
	}
	for _, r := range out.res.Records {
		if r.ErrKind != loadgen.ErrKindOverlong || len(r.Chunks) > client.OutputTokenLimit(5) {
			t.Errorf("request %d: %q (%s), %d chunks", r.Index, r.ErrKind, r.Err, len(r.Chunks))
		}
	}
}
