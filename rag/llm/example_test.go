package llm_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/llm"
)

// Generate streams a completion from an OpenAI-compatible server; here one that replays what
// vLLM sends.
func ExampleClient_Generate() {
	vllm, _ := os.ReadFile("testdata/vllm.sse")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(vllm)
	}))
	defer srv.Close()

	c, err := llm.New(srv.URL+"/v1", llm.WithModels("meta-llama/Llama-3.1-8B-Instruct"))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	stream, err := c.Generate(context.Background(), rag.GenRequest{
		Model:    "meta-llama/Llama-3.1-8B-Instruct",
		Messages: []rag.Message{{Role: "user", Content: "What is paged attention?"}},
	})
	if err != nil {
		panic(err)
	}
	defer stream.Close()
	for {
		d, err := stream.Recv()
		if err != nil {
			break
		}
		fmt.Print(d.Text)
		if d.FinishReason != "" {
			fmt.Printf("\nfinish=%s prompt=%d completion=%d\n", d.FinishReason, d.Usage.PromptTokens, d.Usage.CompletionTokens)
		}
	}
	// Output:
	// Paged attention splits the KV cache into fixed-size blocks.
	// finish=stop prompt=412 completion=11
}
