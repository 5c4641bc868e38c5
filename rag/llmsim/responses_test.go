package llmsim_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/llmsim"
)

// responsesStream runs one streamed response and returns its events' types in order, the
// response of its last event, the text of its output_text deltas and the sequence numbers.
func responsesStream(tb *testing.T, client openai.Client, p responses.ResponseNewParams) ([]string, responses.Response, string) {
	tb.Helper()
	s := client.Responses.NewStreaming(tb.Context(), p)
	defer s.Close()
	var types []string
	var final responses.Response
	var text strings.Builder
	for s.Next() {
		ev := s.Current()
		if ev.SequenceNumber != int64(len(types)) {
			tb.Errorf("event %d (%s) has sequence_number %d", len(types), ev.Type, ev.SequenceNumber)
		}
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.output_text.done":
			if ev.Text != text.String() {
				tb.Errorf("output_text.done has %q, the deltas %q", ev.Text, text.String())
			}
		case "response.completed":
			final = ev.Response
		}
	}
	if err := s.Err(); err != nil {
		tb.Fatal(err)
	}
	return types, final, text.String()
}

// The official OpenAI SDK's Responses client against llm-sim: streamed (events in the
// Responses API's order, numbered) and not, with the engine's usage, a reasoning item before
// the message when the model reasons, prefix-cache hits in input_tokens_details, a function
// call replayed as prompt, and OpenAI errors.
func TestResponsesWithOpenAISDK(t *testing.T) {
	t.Parallel()
	e := newEngine(t, prefixCaching(t, "tiny"))
	srv := newServer(t, e)
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	const maxTokens = 24
	instructions := "A KV cache block holds sixteen tokens and is allocated when a sequence needs it."
	params := responses.ResponseNewParams{
		Model:           "ragtail-tiny",
		Instructions:    openai.String(instructions),
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("How big is a KV block?")},
		MaxOutputTokens: openai.Int(maxTokens),
	}
	prompt := int64(rag.PromptTokens([]rag.Message{{Role: "system", Content: instructions}, {Role: "user", Content: "How big is a KV block?"}}))
	check := func(t *testing.T, r responses.Response, text string) {
		t.Helper()
		if r.Usage.InputTokens != prompt || r.Usage.OutputTokens != maxTokens || r.Usage.TotalTokens != prompt+maxTokens {
			t.Errorf("usage %+v, want %d input and %d output tokens", r.Usage, prompt, maxTokens)
		}
		if r.Status != responses.ResponseStatusIncomplete || r.IncompleteDetails.Reason != "max_output_tokens" || !strings.HasPrefix(r.ID, "resp_") || r.Model != "ragtail-tiny" {
			t.Errorf("response %s: status %q (%q), model %q", r.ID, r.Status, r.IncompleteDetails.Reason, r.Model)
		}
		if r.OutputText() != text || rag.CountTokens(text)+reasoningOf(r) != maxTokens {
			t.Errorf("output text %q, want the %q streamed, of %d tokens with the reasoning", r.OutputText(), text, maxTokens)
		}
	}

	t.Run("streaming", func(t *testing.T) {
		types, final, text := responsesStream(t, client, params)
		want := "response.created response.in_progress response.output_item.added response.content_part.added response.output_text.delta " +
			"response.output_text.done response.content_part.done response.output_item.done response.completed"
		if got := compact(types); got != want {
			t.Errorf("events %s\nwant %s", got, want)
		}
		check(t, final, text)
	})

	t.Run("non-streaming", func(t *testing.T) {
		r, err := client.Responses.New(t.Context(), params)
		if err != nil {
			t.Fatal(err)
		}
		check(t, *r, r.OutputText())
		if rag.CountTokens(r.OutputText()) != maxTokens || len(r.Output) != 1 || r.Output[0].Type != "message" {
			t.Errorf("output %+v", r.Output)
		}
	})

	t.Run("prefix cache", func(t *testing.T) {
		for range 2 {
			r, err := client.Responses.New(t.Context(), params)
			if err != nil {
				t.Fatal(err)
			}
			if r.Usage.InputTokensDetails.CachedTokens == 0 || r.Usage.InputTokens != prompt {
				t.Errorf("a repeated prompt: usage %+v, want cached tokens of the %d", r.Usage, prompt)
			}
		}
	})

	t.Run("function call replayed", func(t *testing.T) {
		p := params
		p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("How big is a KV block?", responses.EasyInputMessageRoleUser),
			responses.ResponseInputItemParamOfFunctionCall(`{"query": "KV block size"}`, "call_1", "search"),
			callOutput("call_1", "[1] Blocks hold sixteen tokens."),
		}}
		r, err := client.Responses.New(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		if r.Usage.InputTokens <= prompt+int64(rag.CountTokens("[1] Blocks hold sixteen tokens.")) || r.OutputText() == "" {
			t.Errorf("usage %+v, text %q: the call and its output do not count in the prompt", r.Usage, r.OutputText())
		}
	})

	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			edit   func(*responses.ResponseNewParams)
			status int
			param  string
		}{
			{name: "unknown model", edit: func(p *responses.ResponseNewParams) { p.Model = "gpt-9" }, status: 404, param: "model"},
			{name: "previous response", edit: func(p *responses.ResponseNewParams) { p.PreviousResponseID = openai.String("resp_1") }, status: 400, param: "previous_response_id"},
			{name: "max_output_tokens too large", edit: func(p *responses.ResponseNewParams) { p.MaxOutputTokens = openai.Int(99999) }, status: 400, param: "max_output_tokens"},
			{name: "image input", edit: func(p *responses.ResponseNewParams) {
				p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
					responses.ResponseInputItemParamOfMessage(responses.ResponseInputMessageContentListParam{
						responses.ResponseInputContentParamOfInputImage(responses.ResponseInputImageDetailAuto)}, responses.EasyInputMessageRoleUser)}}
			}, status: 400, param: "input[0].content[0].type"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p := params
				tc.edit(&p)
				_, err := client.Responses.New(t.Context(), p)
				var apiErr *openai.Error
				if !errors.As(err, &apiErr) || apiErr.StatusCode != tc.status || apiErr.Param != tc.param {
					t.Errorf("error %v, want a %d OpenAI error on %s", err, tc.status, tc.param)
				}
			})
		}
	})
}

func callOutput(callID, output string) responses.ResponseInputItemUnionParam {
	item := responses.ResponseInputItemParamOfFunctionCallOutput(output)
	item.OfFunctionCallOutput.CallID = openai.String(callID)
	return item
}

func reasoningOf(r responses.Response) int {
	n := 0
	for _, it := range r.Output {
		if it.Type == "reasoning" {
			for _, c := range it.Content {
				n += rag.CountTokens(c.Text)
			}
		}
	}
	return n
}

// A reasoning model's response: a reasoning item, streamed as reasoning_text deltas, before
// the message; usage counts the reasoning tokens.
func TestResponsesReasoning(t *testing.T) {
	t.Parallel()
	e := newEngine(t, profile(t, "tiny"), llmsim.WithReasoningTokens(5))
	srv := newServer(t, e)
	resp := post(t, t.Context(), srv.URL+"/v1/responses", `{"model":"ragtail-tiny","input":"why?","max_output_tokens":12,"stream":true}`)
	names, data := namedEvents(t, resp.Body)
	resp.Body.Close()
	want := "response.created response.in_progress " +
		"response.output_item.added response.content_part.added response.reasoning_text.delta response.reasoning_text.done response.content_part.done response.output_item.done " +
		"response.output_item.added response.content_part.added response.output_text.delta response.output_text.done response.content_part.done response.output_item.done " +
		"response.completed"
	if got := compact(names); got != want {
		t.Fatalf("events %s\nwant %s", got, want)
	}
	var done struct {
		Response responses.Response `json:"response"`
	}
	if err := json.Unmarshal([]byte(data[len(data)-1]), &done); err != nil {
		t.Fatal(err)
	}
	r := done.Response
	if len(r.Output) != 2 || r.Output[0].Type != "reasoning" || reasoningOf(r) != 5 || r.Output[1].Type != "message" ||
		rag.CountTokens(r.OutputText()) != 7 || r.Usage.OutputTokensDetails.ReasoningTokens != 5 || r.Usage.OutputTokens != 12 {
		t.Errorf("response output %+v, usage %+v", r.Output, r.Usage)
	}
}

// Requests the Responses API refuses, with OpenAI's error JSON.
func TestResponsesErrors(t *testing.T) {
	t.Parallel()
	e := newEngine(t, profile(t, "tiny"), llmsim.WithVirtualTime())
	srv := newServer(t, e)
	for _, tc := range []struct {
		name, body, msg string
	}{
		{name: "empty body", body: ``, msg: "model and input"},
		{name: "no input", body: `{"model":"ragtail-tiny"}`, msg: "input is required"},
		{name: "input of the wrong type", body: `{"model":"ragtail-tiny","input":3}`, msg: "input must be a string or an array"},
		{name: "bad role", body: `{"model":"ragtail-tiny","input":[{"role":"tool","content":"x"}]}`, msg: "is not user, system, developer or assistant"},
		{name: "unknown item", body: `{"model":"ragtail-tiny","input":[{"type":"web_search_call","id":"x"}]}`, msg: `the simulated model reads message, function_call and function_call_output items`},
		{name: "conversation", body: `{"model":"ragtail-tiny","input":"x","conversation":"conv_1"}`, msg: "stores no conversations"},
		{name: "background", body: `{"model":"ragtail-tiny","input":"x","background":true}`, msg: "background responses are not supported"},
		{name: "hosted tool", body: `{"model":"ragtail-tiny","input":"x","tools":[{"type":"web_search"}]}`, msg: "only function tools"},
		{name: "temperature", body: `{"model":"ragtail-tiny","input":"x","temperature":3}`, msg: "between 0 and 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp := post(t, t.Context(), srv.URL+"/v1/responses", tc.body)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"type":"invalid_request_error"`) || !strings.Contains(string(b), tc.msg) {
				t.Errorf("status %d, body %s; want 400 invalid_request_error containing %q", resp.StatusCode, b, tc.msg)
			}
		})
	}
}

// Chat completions, Messages and Responses run on one engine: the same conversation sent to
// each is one prompt to the prefix cache (the second and third find it cached), and vLLM's
// metrics count the three requests and their tokens.
func TestThreeAPIsShareTheEngine(t *testing.T) {
	t.Parallel()
	e := newEngine(t, prefixCaching(t, "tiny"))
	srv := newServer(t, e)
	system, question := "Chunked prefill splits long prompts into pieces that share steps with decodes.", "What does chunked prefill do?"
	prompt := rag.PromptTokens([]rag.Message{{Role: "system", Content: system}, {Role: "user", Content: question}})
	for _, tc := range []struct {
		path, body string
		cached     func(map[string]any) float64
	}{
		{path: "/v1/chat/completions", body: chatBody(t, "ragtail-tiny", 8, false, false), cached: func(m map[string]any) float64 {
			d, _ := m["usage"].(map[string]any)["prompt_tokens_details"].(map[string]any)
			v, _ := d["cached_tokens"].(float64)
			return v
		}},
		{path: "/v1/messages", body: `{"model":"ragtail-tiny","max_tokens":8,"system":"` + system + `","messages":[{"role":"user","content":"` + question + `"}]}`,
			cached: func(m map[string]any) float64 {
				return m["usage"].(map[string]any)["cache_read_input_tokens"].(float64)
			}},
		{path: "/v1/responses", body: `{"model":"ragtail-tiny","max_output_tokens":8,"instructions":"` + system + `","input":"` + question + `"}`,
			cached: func(m map[string]any) float64 {
				return m["usage"].(map[string]any)["input_tokens_details"].(map[string]any)["cached_tokens"].(float64)
			}},
	} {
		resp := post(t, t.Context(), srv.URL+tc.path, tc.body)
		var got map[string]any
		err := json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: status %d, %v", tc.path, resp.StatusCode, err)
		}
		if cached := tc.cached(got); tc.path != "/v1/chat/completions" && cached != float64(prompt/16*16) {
			t.Errorf("%s: %v cached tokens, want the %d of the first request's full blocks", tc.path, cached, prompt/16*16)
		}
	}
	// vLLM's counters, compared as parsed series (client_golang's testutil): the three requests,
	// all cut at their max_tokens, and their 24 output tokens.
	const want = `
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="ragtail-tiny"} 24
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{finished_reason="abort",model_name="ragtail-tiny"} 0
vllm:request_success_total{finished_reason="length",model_name="ragtail-tiny"} 3
vllm:request_success_total{finished_reason="stop",model_name="ragtail-tiny"} 0
`
	if err := testutil.ScrapeAndCompare(srv.URL+"/metrics", strings.NewReader(want),
		"vllm:generation_tokens_total", "vllm:request_success_total"); err != nil {
		t.Error(err)
	}
	// The latency histogram observed all three, whatever their buckets.
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	page, _ := io.ReadAll(resp.Body)
	if line := `vllm:e2e_request_latency_seconds_count{model_name="ragtail-tiny"} 3` + "\n"; !strings.Contains(string(page), line) {
		t.Errorf("/metrics lacks %q", line)
	}
}
