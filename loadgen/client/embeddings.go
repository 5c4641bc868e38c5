package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ragtail/ragtail/loadgen"
)

// Embeddings requests (loadgen.Request.Input): POST the texts to an OpenAI-compatible
// /v1/embeddings endpoint in one batch and check that an embedding came back for each. There
// is no token stream: a record has its send, first byte and end (E2EL), the inputs it
// embedded and the prompt tokens the server's usage counted.

// IsEmbeddings reports whether the client's endpoint is an embeddings one (a URL ending in
// /embeddings): its requests must then carry Input.
func (c *Client) IsEmbeddings() bool { return c.embeddings }

// embeddingsBody is OpenAI's embeddings request.
type embeddingsBody struct {
	Model          string   `json:"model,omitempty"`
	Input          []string `json:"input"`
	EncodingFormat string   `json:"encoding_format"`
}

func (c *Client) encodeEmbeddings(req *loadgen.Request, buf *bytes.Buffer) error {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	return enc.Encode(embeddingsBody{Model: c.cfg.model, Input: req.Input, EncodingFormat: "float"})
}

// maxEmbeddingsBody bounds an embeddings response: 2048 inputs of 3072 dimensions in JSON
// floats come to about 150 MB, beyond any batch a benchmark sends.
const maxEmbeddingsBody = 256 << 20

// embeddingsResponse is what a benchmark needs from an embeddings response: how many
// embeddings came (their values are skipped) and the usage.
type embeddingsResponse struct {
	Data []struct {
		Index *int `json:"index"`
	} `json:"data"`
	Usage *struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

// readEmbeddings reads a successful embeddings response.
func (c *Client) readEmbeddings(ctx context.Context, body io.Reader, req *loadgen.Request, origin time.Time, rec *loadgen.Record) {
	b, err := io.ReadAll(io.LimitReader(body, maxEmbeddingsBody+1))
	rec.End = time.Since(origin)
	switch {
	case err != nil:
		fail(rec, classifyRead(ctx, err), fmt.Errorf("read body: %w", err))
		return
	case len(b) > maxEmbeddingsBody:
		fail(rec, loadgen.ErrKindProtocol, fmt.Errorf("embeddings response larger than %d MiB", maxEmbeddingsBody>>20))
		return
	}
	var resp embeddingsResponse
	if err := json.Unmarshal(b, &resp); err != nil {
		fail(rec, loadgen.ErrKindProtocol, fmt.Errorf("embeddings response is not JSON: %s", truncate(strings.TrimSpace(string(b)))))
		return
	}
	if len(resp.Data) != len(req.Input) {
		fail(rec, loadgen.ErrKindProtocol, fmt.Errorf("the server returned %d embeddings for %d inputs", len(resp.Data), len(req.Input)))
		return
	}
	rec.Inputs = len(req.Input)
	if u := resp.Usage; u != nil && u.PromptTokens >= 0 {
		rec.PromptTokens, rec.TokensFromUsage = u.PromptTokens, true
		if u.PromptTokens == 0 && u.TotalTokens > 0 {
			rec.PromptTokens = u.TotalTokens
		}
	}
}

// errNoInput is the error of an embeddings client given a request without texts.
var errNoInput = errors.New("an embeddings endpoint needs requests with Input (texts to embed)")
