package service

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/ragtail/ragtail/rag/embed"
)

// TestEmbeddingsEndpoint drives POST /v1/embeddings with the openai-go SDK as the client: the
// vectors are the service's embedder's, in order, in both encodings, with the usage counted;
// bad requests get OpenAI errors.
func TestEmbeddingsEndpoint(t *testing.T) {
	t.Parallel()
	_, api, _ := testService(t)
	// The service's embedder: the hash embedder with the default dimension and seed.
	cfg := DefaultConfig()
	emb, err := embed.NewHash(embed.WithDimension(cfg.Dim), embed.WithSeed(cfg.Seed))
	if err != nil {
		t.Fatal(err)
	}
	client := openai.NewClient(option.WithBaseURL(api.URL+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx := context.Background()
	inputs := []string{"what is a prefix cache?", "how does the bloom guard work", "tail latency"}
	want, err := emb.EmbedBatch(ctx, inputs)
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []openai.EmbeddingNewParamsEncodingFormat{openai.EmbeddingNewParamsEncodingFormatFloat, openai.EmbeddingNewParamsEncodingFormatBase64} {
		resp, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{
			Input:          openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: inputs},
			Model:          openai.EmbeddingModel(emb.Model()),
			EncodingFormat: format,
		})
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		if len(resp.Data) != len(inputs) || resp.Model != emb.Model() || resp.Usage.PromptTokens < int64(len(inputs)) || resp.Usage.TotalTokens != resp.Usage.PromptTokens {
			t.Fatalf("%s: %d vectors, model %q, usage %+v; want %d vectors of %q with tokens counted", format, len(resp.Data), resp.Model, resp.Usage, len(inputs), emb.Model())
		}
		for i, d := range resp.Data {
			got := d.Embedding
			if format == openai.EmbeddingNewParamsEncodingFormatBase64 {
				// The SDK leaves a base64 embedding in the raw JSON.
				got = decodeBase64Floats(t, d.JSON.Embedding.Raw())
			}
			if int(d.Index) != i || len(got) != emb.Dimension() || !equalFloats(got, want[i]) {
				t.Errorf("%s: data[%d] index %d, %d dims; want the embedder's vector of input %d (%d dims)", format, i, d.Index, len(got), i, emb.Dimension())
			}
		}
	}
	one, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String(inputs[1])}, Model: openai.EmbeddingModel(emb.Model())})
	if err != nil || len(one.Data) != 1 || !equalFloats(one.Data[0].Embedding, want[1]) {
		t.Fatalf("a single string input: %v, %+v", err, one)
	}

	bad := []struct {
		name   string
		params openai.EmbeddingNewParams
		status int
	}{
		{"unknown model", openai.EmbeddingNewParams{Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("x")}, Model: "text-embedding-3-large"}, http.StatusNotFound},
		{"empty input", openai.EmbeddingNewParams{Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("")}, Model: openai.EmbeddingModel(emb.Model())}, http.StatusBadRequest},
		{"token arrays", openai.EmbeddingNewParams{Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfTokens: []int64{1, 2}}, Model: openai.EmbeddingModel(emb.Model())}, http.StatusBadRequest},
		{"wrong dimensions", openai.EmbeddingNewParams{Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("x")}, Model: openai.EmbeddingModel(emb.Model()), Dimensions: openai.Int(7)}, http.StatusBadRequest},
		{"too many inputs", openai.EmbeddingNewParams{Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: slices.Repeat([]string{"x"}, 2049)}, Model: openai.EmbeddingModel(emb.Model())}, http.StatusBadRequest},
	}
	for _, tt := range bad {
		_, err := client.Embeddings.New(ctx, tt.params)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != tt.status || apiErr.Message == "" {
			t.Errorf("%s: %v; want an OpenAI error with status %d", tt.name, err, tt.status)
		}
	}
}

// equalFloats compares the SDK's float64s with the embedder's float32s, exactly: a float32
// survives JSON as the shortest decimal that rounds back to it.
func equalFloats(got []float64, want []float32) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if float32(got[i]) != want[i] {
			return false
		}
	}
	return true
}

// decodeBase64Floats decodes a JSON string of base64 little-endian float32s.
func decodeBase64Floats(tb testing.TB, raw string) []float64 {
	tb.Helper()
	var s string
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		tb.Fatalf("base64 embedding %.60q: %v", raw, err)
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b)%4 != 0 {
		tb.Fatalf("base64 embedding: %v (%d bytes)", err, len(b))
	}
	out := make([]float64, len(b)/4)
	for i := range out {
		out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	}
	return out
}

// TestEmbeddingsGoThroughAdmission fills the admission pool chat requests go through: an
// embeddings request is then shed as a chat request is (503 with Retry-After), and served once
// the slot is free. Embeddings skipped admission: 32 clients of 1 MB bodies slowed chat from
// 180 to 650-880 ms and none was shed.
func TestEmbeddingsGoThroughAdmission(t *testing.T) {
	t.Parallel()
	svc, api, _ := testService(t)
	if _, err := svc.Runtime.Apply(context.Background(), []byte(`{"admission":{"workers":1,"queue":0,"queue_target":"off","policy":"reject"}}`)); err != nil {
		t.Fatal(err)
	}
	release, err := svc.Pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	const body = `{"input":"what is a prefix cache?"}`
	for _, path := range []string{"/v1/chat/completions", "/v1/embeddings"} {
		b := body
		if path == "/v1/chat/completions" {
			b = `{"model":"` + svc.Model + `","messages":[{"role":"user","content":"what is a prefix cache?"}],"max_tokens":4}`
		}
		resp, text := request(t, http.MethodPost, api.URL+path, b)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s with the pool full: %d, Retry-After %q: %.200s", path, resp.StatusCode, resp.Header.Get("Retry-After"), text)
		}
	}
	release()
	if resp, text := request(t, http.MethodPost, api.URL+"/v1/embeddings", body); resp.StatusCode != http.StatusOK {
		t.Errorf("with the slot free: %d %.200s", resp.StatusCode, text)
	}
	if st := svc.Pool.Stats(); st.InFlight != 0 {
		t.Errorf("%d requests still hold a slot", st.InFlight)
	}
}

// TestEmbeddingsRefuseTrailingData sends a second JSON value after the request: it is refused,
// as POST /v1/chat/completions refuses it, rather than ignored.
func TestEmbeddingsRefuseTrailingData(t *testing.T) {
	t.Parallel()
	_, api, _ := testService(t)
	for _, path := range []string{"/v1/embeddings", "/v1/chat/completions"} {
		b := `{"input":"x"} {"input":"y"}`
		if path == "/v1/chat/completions" {
			b = `{"messages":[{"role":"user","content":"x"}]} {"x":1}`
		}
		resp, text := request(t, http.MethodPost, api.URL+path, b)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(text, "after the JSON object") {
			t.Errorf("%s with trailing data: %d %.200s", path, resp.StatusCode, text)
		}
	}
}

// TestModelsListTheEmbeddingModel lists the models with the openai-go SDK: the chat model and
// the embedding model POST /v1/embeddings takes (only the chat model was listed, so a client
// could not discover ragtail-hash-384).
func TestModelsListTheEmbeddingModel(t *testing.T) {
	t.Parallel()
	svc, api, _ := testService(t)
	client := openai.NewClient(option.WithBaseURL(api.URL+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	page, err := client.Models.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	emb, err := embed.NewHash(embed.WithDimension(DefaultConfig().Dim))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, []string{svc.Model, emb.Model()}) {
		t.Errorf("models %q, want the chat model %q and the embedding model %q", ids, svc.Model, emb.Model())
	}
}
