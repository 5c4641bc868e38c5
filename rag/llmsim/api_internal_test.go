package llmsim

import (
	"strings"
	"testing"

	"github.com/ragtail/ragtail/rag/openai"
)

// Whatever body a client sends to /v1/messages or /v1/responses, decoding and validation either
// refuse it or give the engine a request within the limits.
func FuzzAPIRequests(f *testing.F) {
	f.Add(`{"model":"m","max_tokens":8,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"r"}]}]}`)
	f.Add(`{"model":"m","max_tokens":8,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"n","input":{}}]}],"thinking":{"type":"enabled","budget_tokens":4}}`)
	f.Add(`{"model":"m","input":[{"type":"function_call","call_id":"c","name":"n","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"x"}]}],"tools":[{"type":"function","name":"n"}]}`)
	f.Add(`{"model":"m","input":"hi","instructions":"be brief","max_output_tokens":3}`)
	f.Add(`{"model":"m","max_tokens":-1,"input":null,"messages":null}`)
	f.Fuzz(func(t *testing.T, body string) {
		lim := openai.DefaultLimits
		var m messagesRequest
		if openai.DecodeJSON(strings.NewReader(body), &m, "") == nil {
			if g, _, err := m.genRequest(lim); err == nil && (g.MaxTokens < 1 || g.MaxTokens > lim.MaxTokensCap || len(g.Tools) > openai.MaxTools || g.ToolChoice != "none") {
				t.Fatalf("messages request %+v accepted", g)
			}
		}
		var r responsesRequest
		if openai.DecodeJSON(strings.NewReader(body), &r, "") == nil {
			if g, err := r.genRequest(lim); err == nil && (g.MaxTokens < 1 || g.MaxTokens > lim.MaxTokensCap || len(g.Tools) > openai.MaxTools || g.ToolChoice != "none") {
				t.Fatalf("responses request %+v accepted", g)
			}
		}
	})
}
