package llmsim_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/llmsim"
)

// Ten requests arrive at once at an engine that runs at most eight sequences: the last two
// queue until the first batch finishes, and their time to first token shows it.
func ExampleEngine() {
	p, _ := llmsim.ProfileByName("tiny")
	e, err := llmsim.New(p, llmsim.WithVirtualTime(), llmsim.WithStartPaused())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()

	question := []rag.Message{{Role: "user", Content: "How does continuous batching work?"}}
	var streams []*llmsim.Stream
	for i := range 10 {
		st, err := e.Submit(context.Background(), rag.GenRequest{ID: fmt.Sprint(i), Messages: question, MaxTokens: 32})
		if err != nil {
			fmt.Println(err)
			return
		}
		defer st.Close()
		streams = append(streams, st)
	}
	e.Resume()
	for i, st := range streams {
		var answer strings.Builder
		for {
			d, err := st.Recv()
			if err != nil { // io.EOF after the last delta
				break
			}
			answer.WriteString(d.Text)
		}
		tl := st.Timeline()
		fmt.Printf("request %d: queued %v, TTFT %v, TPOT %v, %d tokens\n", i, tl.QueueTime(), tl.TTFT(), tl.TPOT(), rag.CountTokens(answer.String()))
	}
	// Output:
	// request 0: queued 0s, TTFT 1.104ms, TPOT 1.40232ms, 32 tokens
	// request 1: queued 0s, TTFT 1.104ms, TPOT 1.40232ms, 32 tokens
	// request 2: queued 0s, TTFT 1.104ms, TPOT 1.40232ms, 32 tokens
	// request 3: queued 0s, TTFT 1.104ms, TPOT 1.40232ms, 32 tokens
	// request 4: queued 0s, TTFT 1.104ms, TPOT 1.40232ms, 32 tokens
	// request 5: queued 0s, TTFT 1.104ms, TPOT 1.40232ms, 32 tokens
	// request 6: queued 0s, TTFT 1.104ms, TPOT 1.40232ms, 32 tokens
	// request 7: queued 0s, TTFT 1.104ms, TPOT 1.40232ms, 32 tokens
	// request 8: queued 44.57592ms, TTFT 45.60192ms, TPOT 1.10058ms, 32 tokens
	// request 9: queued 44.57592ms, TTFT 45.60192ms, TPOT 1.10058ms, 32 tokens
}
