package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/openai"
)

// Embedder is what POST /v1/embeddings serves from: the service's own embedder (the hash
// embedder or the embeddings client it retrieves with).
type Embedder interface {
	// EmbedBatch returns the embeddings of texts, in order.
	EmbedBatch(ctx context.Context, texts []string) ([][]float32, error)
	// Dimension is the length of the vectors.
	Dimension() int
	// Model is the embedding model's name, the one requests may name.
	Model() string
}

// Bounds of an embeddings request (OpenAI's own: 2048 inputs, 8192 tokens each).
const (
	MaxEmbeddingInputs      = 2048
	MaxEmbeddingInputTokens = 8192
)

// WithEmbeddings serves POST /v1/embeddings (OpenAI's request and response) from e.
func WithEmbeddings(e Embedder) Option {
	return optionFunc(func(c *config) { c.embedder = e })
}

// Admitter bounds how many requests run at once (the pipeline's admission pool).
type Admitter interface {
	// Acquire waits for a slot. It returns a release func to call exactly once when the request
	// is done, or an error matching rag.ErrOverloaded if the request is shed, or ctx's error.
	Acquire(ctx context.Context) (release func(), err error)
}

// WithAdmission makes POST /v1/embeddings take a slot of a, the admission pool chat requests go
// through, so that embeddings are queued and shed (503 with Retry-After) with them instead of
// taking the CPU beside them unbounded. Without it, embeddings are not admitted.
func WithAdmission(a Admitter) Option {
	return optionFunc(func(c *config) { c.admitter = a })
}

// embeddingsRequest is OpenAI's embeddings request body.
type embeddingsRequest struct {
	Input          json.RawMessage `json:"input"`
	Model          string          `json:"model"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
	User           string          `json:"user"`
}

type embeddingDatum struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string of little-endian float32s
}

type embeddingsUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

type embeddingsResponse struct {
	Object string           `json:"object"`
	Data   []embeddingDatum `json:"data"`
	Model  string           `json:"model"`
	Usage  embeddingsUsage  `json:"usage"`
}

func badEmbedding(param, msg string) *openai.HTTPError {
	return &openai.HTTPError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param, Message: msg, Err: rag.ErrInvalidRequest}
}

// decodeEmbeddings reads and checks an embeddings request: its inputs, and its token count.
func decodeEmbeddings(body []byte, model string, dim int) (embeddingsRequest, []string, int, error) {
	var req embeddingsRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, nil, 0, badEmbedding("", "request body is not a valid embeddings request: "+truncateErr(err))
	}
	if dec.More() {
		return req, nil, 0, badEmbedding("", "request body has data after the JSON object")
	}
	if len(req.Model) > openai.MaxModelLen {
		return req, nil, 0, badEmbedding("model", fmt.Sprintf("model name is %d bytes long; at most %d are accepted", len(req.Model), openai.MaxModelLen))
	}
	if req.Model != "" && req.Model != model {
		return req, nil, 0, &openai.HTTPError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "model", Code: "model_not_found",
			Message: fmt.Sprintf("the embedding model %q is not served; this server embeds with %q", req.Model, model), Err: rag.ErrInvalidRequest}
	}
	switch req.EncodingFormat {
	case "", "float", "base64":
	default:
		return req, nil, 0, badEmbedding("encoding_format", fmt.Sprintf("encoding_format must be float or base64, got %.32q", req.EncodingFormat))
	}
	if req.Dimensions != nil && *req.Dimensions != dim {
		return req, nil, 0, badEmbedding("dimensions", fmt.Sprintf("dimensions must be the model's %d, got %d", dim, *req.Dimensions))
	}
	var inputs []string
	var one string
	if err := json.Unmarshal(req.Input, &one); err == nil {
		inputs = []string{one}
	} else if err := json.Unmarshal(req.Input, &inputs); err != nil {
		return req, nil, 0, badEmbedding("input", "input must be a string or an array of strings (token arrays are not accepted)")
	}
	if len(inputs) == 0 || len(inputs) > MaxEmbeddingInputs {
		return req, nil, 0, badEmbedding("input", fmt.Sprintf("input must hold 1 to %d strings, got %d", MaxEmbeddingInputs, len(inputs)))
	}
	tokens := 0
	for i, s := range inputs {
		n := rag.CountTokens(s)
		if s == "" || n > MaxEmbeddingInputTokens {
			return req, nil, 0, badEmbedding("input", fmt.Sprintf("input %d has %d tokens; each must have 1 to %d", i, n, MaxEmbeddingInputTokens))
		}
		tokens += n
	}
	return req, inputs, tokens, nil
}

// truncateErr is a decoding error's text, bounded: it may quote the client's input.
func truncateErr(err error) string {
	s := err.Error()
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// embeddings serves POST /v1/embeddings.
func (a *API) embeddings(w http.ResponseWriter, r *http.Request) {
	e := a.cfg.embedder
	r.Body = http.MaxBytesReader(w, r.Body, openai.MaxBodyBytes)
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(r.Body); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			openai.WriteError(w, &openai.HTTPError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error",
				Message: fmt.Sprintf("request body is larger than %d bytes", openai.MaxBodyBytes), Err: rag.ErrInvalidRequest})
			return
		}
		openai.WriteError(w, badEmbedding("", "reading the request body: "+truncateErr(err)))
		return
	}
	model := e.Model()
	req, inputs, tokens, err := decodeEmbeddings(buf.Bytes(), model, e.Dimension())
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	span := trace.SpanFromContext(r.Context())
	span.SetAttributes(attribute.String("gen_ai.operation.name", "embeddings"), attribute.String("gen_ai.request.model", model),
		attribute.Int("gen_ai.usage.input_tokens", tokens), attribute.Int("gen_ai.embeddings.dimension.count", e.Dimension()))
	if a := a.cfg.admitter; a != nil {
		release, err := a.Acquire(r.Context())
		if err != nil {
			if r.Context().Err() == nil {
				openai.WriteError(w, rag.AtStage(rag.StageAdmission, err))
			}
			return
		}
		defer release()
	}
	vecs, err := e.EmbedBatch(r.Context(), inputs)
	if err != nil {
		if r.Context().Err() != nil {
			return
		}
		openai.WriteError(w, rag.AtStage(rag.StageEmbed, err))
		return
	}
	if len(vecs) != len(inputs) {
		openai.WriteError(w, rag.AtStage(rag.StageEmbed, fmt.Errorf("embedder returned %d vectors for %d inputs", len(vecs), len(inputs))))
		return
	}
	resp := embeddingsResponse{Object: "list", Model: model, Data: make([]embeddingDatum, len(vecs)),
		Usage: embeddingsUsage{PromptTokens: tokens, TotalTokens: tokens}}
	for i, v := range vecs {
		resp.Data[i] = embeddingDatum{Object: "embedding", Index: i, Embedding: v}
		if req.EncodingFormat == "base64" {
			resp.Data[i].Embedding = base64Floats(v)
		}
	}
	openai.WriteJSON(w, http.StatusOK, resp)
}

// base64Floats encodes v as OpenAI's base64 encoding_format: little-endian float32s.
func base64Floats(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(b)
}
