package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strconv"
	"testing"
)

func TestScanChunk(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want chunkInfo // raw fields are not compared
		bad  bool
	}{
		{"role chunk", `{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`, chunkInfo{}, false},
		{"content", `{"id":"x","choices":[{"delta":{"content":"hi"},"logprobs":null}]}`, chunkInfo{content: true, output: true}, false},
		{"escaped content", `{"choices":[{"delta":{"content":"\"\\\u00e9\n"}}]}`, chunkInfo{content: true, output: true}, false},
		{"finish", `{"choices":[{"delta":{},"finish_reason":"stop"}]}`, chunkInfo{finished: true}, false},
		{"usage", `{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":300,"total_tokens":312}}`, chunkInfo{hasUsage: true, promptTokens: 12, completionTokens: 300}, false},
		{"usage null", `{"choices":[],"usage":null}`, chunkInfo{}, false},
		{"cached and reasoning tokens", `{"usage":{"prompt_tokens":600,"completion_tokens":90,"prompt_tokens_details":{"cached_tokens":512},"completion_tokens_details":{"reasoning_tokens":40}}}`,
			chunkInfo{hasUsage: true, promptTokens: 600, completionTokens: 90, cachedTokens: 512, reasoningTokens: 40}, false},
		{"details null", `{"usage":{"prompt_tokens":6,"prompt_tokens_details":null,"completion_tokens_details":null}}`, chunkInfo{hasUsage: true, promptTokens: 6}, false},
		{"details elsewhere ignored", `{"x":{"prompt_tokens_details":{"cached_tokens":5}},"usage":{"cached_tokens":3}}`, chunkInfo{hasUsage: true}, false},
		{"odd counts ignored", `{"usage":{"prompt_tokens":-1,"completion_tokens":1.5}}`, chunkInfo{hasUsage: true}, false},
		{"integral exponent", `{"usage":{"completion_tokens":1e3}}`, chunkInfo{hasUsage: true, completionTokens: 1000}, false},
		{"legacy text", `{"choices":[{"text":"x","finish_reason":"length"}]}`, chunkInfo{content: true, output: true, finished: true}, false},
		{"message", `{"choices":[{"message":{"content":"whole"},"finish_reason":"stop"}]}`, chunkInfo{content: true, output: true, finished: true}, false},
		{"reasoning", `{"choices":[{"delta":{"reasoning_content":"hmm"}}]}`, chunkInfo{content: true, reasoning: true}, false},
		{"reasoning (llama.cpp's name) beside content", `{"choices":[{"delta":{"reasoning":"hmm","content":"a"}}]}`, chunkInfo{content: true, output: true, reasoning: true}, false},
		{"content of the wrong type", `{"choices":[{"delta":{"content":5}}]}`, chunkInfo{}, false},
		{"nested content elsewhere ignored", `{"extra":{"choices":[{"delta":{"content":"x"}}]}}`, chunkInfo{}, false},
		{"openai error", `{"error":{"message":"boom","type":"server_error"}}`, chunkInfo{isError: true}, false},
		{"string error", `{"error":"boom"}`, chunkInfo{isError: true}, false},
		{"null error", `{"error":null,"choices":[]}`, chunkInfo{}, false},
		{"vllm error", `{"object":"error","message":"oom","code":500}`, chunkInfo{isError: true, objectIsError: true}, false},
		{"escaped key", `{"ch\u006fices":[{"delta":{"content":"a"}}]}`, chunkInfo{content: true, output: true}, false},
		{"repeated choices: the last counts", `{"choices":[{"delta":{"content":"a"}}],"choices":[]}`, chunkInfo{}, false},
		{"truncated", `{"choices":[{"delta":{"content":"a`, chunkInfo{}, true},
		{"trailing garbage", `{} x`, chunkInfo{}, true},
		{"bare word", `hello`, chunkInfo{}, true},
		{"control char in string", "{\"a\":\"\x01\"}", chunkInfo{}, true},
		{"bad escape", `{"a":"\x"}`, chunkInfo{}, true},
		{"leading zero", `{"a":01}`, chunkInfo{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got chunkInfo
			err := scanChunk([]byte(tt.in), &got)
			if (err != nil) != tt.bad {
				t.Fatalf("err = %v, want bad=%v", err, tt.bad)
			}
			if json.Valid([]byte(tt.in)) == tt.bad {
				t.Fatalf("the table disagrees with json.Valid")
			}
			if !tt.bad && !sameInfo(got, tt.want) {
				t.Errorf("scanChunk = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func sameInfo(a, b chunkInfo) bool {
	return a.content == b.content && a.finished == b.finished && a.hasUsage == b.hasUsage &&
		a.promptTokens == b.promptTokens && a.completionTokens == b.completionTokens && a.isError == b.isError &&
		a.cachedTokens == b.cachedTokens && a.reasoningTokens == b.reasoningTokens &&
		a.output == b.output && a.reasoning == b.reasoning
}

// referenceInfo extracts the same fields with encoding/json, following scanChunk's documented
// rules. ok is false for input it cannot judge: repeated member names (a map keeps only one)
// or nesting deeper than scanChunk allows.
func referenceInfo(b []byte) (info chunkInfo, valid, ok bool) {
	if !json.Valid(b) {
		return info, false, true
	}
	if hasDuplicateKeys(b) || nesting(b) > maxDepth-2 {
		return info, true, false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return info, true, false
	}
	top, _ := v.(map[string]any)
	nonEmpty := func(x any) bool { s, ok := x.(string); return ok && s != "" }
	if choices, isArr := top["choices"].([]any); isArr {
		for _, c := range choices {
			choice, _ := c.(map[string]any)
			for _, k := range []string{"delta", "message"} {
				if d, isObj := choice[k].(map[string]any); isObj {
					if nonEmpty(d["content"]) || nonEmpty(d["reasoning_content"]) || nonEmpty(d["reasoning"]) {
						info.content = true
					}
					info.output = info.output || nonEmpty(d["content"])
					info.reasoning = info.reasoning || nonEmpty(d["reasoning_content"]) || nonEmpty(d["reasoning"])
				}
			}
			if nonEmpty(choice["text"]) {
				info.content, info.output = true, true
			}
			if nonEmpty(choice["finish_reason"]) {
				info.finished = true
			}
		}
	}
	if u, isObj := top["usage"].(map[string]any); isObj {
		info.hasUsage = true
		count := func(x any) int {
			n, isNum := x.(json.Number)
			if !isNum {
				return 0
			}
			f, err := strconv.ParseFloat(string(n), 64)
			if err != nil || f < 0 || f > 1<<53 || f != math.Trunc(f) {
				return 0
			}
			return int(f)
		}
		info.promptTokens, info.completionTokens = count(u["prompt_tokens"]), count(u["completion_tokens"])
		if d, isObj := u["prompt_tokens_details"].(map[string]any); isObj {
			info.cachedTokens = count(d["cached_tokens"])
		}
		if d, isObj := u["completion_tokens_details"].(map[string]any); isObj {
			info.reasoningTokens = count(d["reasoning_tokens"])
		}
	}
	switch e := top["error"].(type) {
	case map[string]any:
		info.isError = true
	case string:
		info.isError = e != ""
	}
	if top["object"] == "error" {
		info.isError = true
	}
	return info, true, true
}

// hasDuplicateKeys reports whether any object in the valid JSON b repeats a member name.
func hasDuplicateKeys(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	type frame struct {
		obj     bool
		keys    map[string]bool
		wantKey bool
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) || err != nil {
			return false
		}
		if d, isDelim := tok.(json.Delim); isDelim {
			switch d {
			case '{':
				stack = append(stack, frame{obj: true, keys: map[string]bool{}, wantKey: true})
			case '[':
				stack = append(stack, frame{})
			default:
				stack = stack[:len(stack)-1]
				if n := len(stack); n > 0 && stack[n-1].obj {
					stack[n-1].wantKey = true
				}
			}
			continue
		}
		if n := len(stack); n > 0 && stack[n-1].obj {
			top := &stack[n-1]
			if top.wantKey {
				k := tok.(string)
				if top.keys[k] {
					return true
				}
				top.keys[k] = true
				top.wantKey = false
			} else {
				top.wantKey = true
			}
		}
	}
}

func nesting(b []byte) int {
	depth, deepest := 0, 0
	for _, c := range b {
		switch c {
		case '{', '[':
			depth++
			deepest = max(deepest, depth)
		case '}', ']':
			depth--
		}
	}
	return deepest
}

// FuzzScanChunk checks scanChunk against encoding/json: it accepts exactly the valid JSON and
// extracts the same fields.
func FuzzScanChunk(f *testing.F) {
	for _, s := range []string{
		`{"choices":[{"delta":{"content":"hi"},"finish_reason":null}]}`,
		`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}`,
		`{"usage":{"prompt_tokens_details":{"cached_tokens":3},"completion_tokens_details":{"reasoning_tokens":1}}}`,
		`{"error":{"message":"x"}}`, `{"object":"error","message":"m"}`, `[1,2,{"a":"b"}]`,
		`{"choices":[{"text":"\u00e9","finish_reason":"length"}]}`, `"str"`, `-0.5e+3`, `{"a":[[]]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got chunkInfo
		err := scanChunk(b, &got)
		want, valid, ok := referenceInfo(b)
		if !ok {
			return
		}
		if (err == nil) != valid {
			t.Fatalf("scanChunk err = %v, json.Valid = %v", err, valid)
		}
		if valid && !sameInfo(got, want) {
			t.Fatalf("scanChunk = %+v, encoding/json = %+v", got, want)
		}
	})
}

func TestAppendText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		chunks []string
		limit  int
		want   string
	}{
		{"plain deltas", []string{`{"choices":[{"delta":{"content":"Hel"}}]}`, `{"choices":[{"delta":{"content":"lo"}}]}`}, 100, "Hello"},
		{"escapes", []string{`{"choices":[{"delta":{"content":"\"a\"\n\u00e9\u2603"}}]}`}, 100, "\"a\"\né☃"},
		{"reasoning is not the answer", []string{`{"choices":[{"delta":{"reasoning_content":"think"}}]}`, `{"choices":[{"delta":{"content":"x"}}]}`}, 100, "x"},
		{"message and legacy text", []string{`{"choices":[{"message":{"content":"whole"}}]}`, `{"choices":[{"text":" more"}]}`}, 100, "whole more"},
		{"bounded on a rune boundary", []string{`{"choices":[{"delta":{"content":"ab\u00e9\u00e9"}}]}`}, 5, "abé"},
		{"full: nothing more", []string{`{"choices":[{"delta":{"content":"abc"}}]}`, `{"choices":[{"delta":{"content":"d"}}]}`}, 3, "abc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []byte
			for _, c := range tt.chunks {
				var ch chunkInfo
				if err := scanChunk([]byte(c), &ch); err != nil {
					t.Fatal(err)
				}
				got = ch.appendText(got, tt.limit)
			}
			if string(got) != tt.want {
				t.Errorf("answer %q, want %q", got, tt.want)
			}
		})
	}
}

func TestScanChunkModel(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`{"id":"x","model":"llama-3\u00e9","choices":[]}`, "llama-3é"},
		{`{"model":5,"choices":[]}`, ""},
		{`{"choices":[{"delta":{"model":"inner"}}]}`, ""},
		{`{"model":"a","model":"b"}`, "b"},
	} {
		var got chunkInfo
		if err := scanChunk([]byte(tt.in), &got); err != nil {
			t.Fatalf("%s: %v", tt.in, err)
		}
		if m := unquoteJSON(got.model); m != tt.want {
			t.Errorf("%s: model %q, want %q", tt.in, m, tt.want)
		}
	}
}
