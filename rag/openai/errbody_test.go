package openai_test

import (
	"strings"
	"testing"

	"github.com/ragtail/ragtail/rag/openai"
)

func TestServerMessage(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, body, want string }{
		{name: "openai", body: `{"error":{"message":"model not found","type":"invalid_request_error"}}`, want: "model not found"},
		{name: "tei and ollama", body: `{"error":"Input validation error","error_type":"Validation"}`, want: "Input validation error"},
		{name: "old vllm", body: `{"object":"error","message":"too long","type":"BadRequestError"}`, want: "too long"},
		{name: "fastapi", body: `{"detail":[{"loc":["body","model"],"msg":"field required"}]}`, want: `[{"loc":["body","model"],"msg":"field required"}]`},
		{name: "html page", body: "<html><body><h1>502 Bad Gateway</h1>\n<hr>nginx</body></html>", want: "502 Bad Gateway nginx"},
		{name: "plain text", body: "upstream connect error\n", want: "upstream connect error"},
		{name: "empty", body: "", want: "no error message"},
		{name: "long text is cut at a rune", body: strings.Repeat("é", 150), want: strings.Repeat("é", 100) + "..."},
		{name: "long message inside JSON is cut", body: `{"error":{"message":"` + strings.Repeat("x", 500) + `"}}`, want: strings.Repeat("x", 200) + "..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := openai.ServerMessage([]byte(tt.body), 200); got != tt.want {
				t.Errorf("ServerMessage = %q, want %q", got, tt.want)
			}
		})
	}
}
