package rag

import (
	"slices"
	"testing"
)

func TestCacheResultString(t *testing.T) {
	tests := []struct {
		r    CacheResult
		want string
	}{
		{CacheHit, "hit"},
		{CacheMiss, "miss"},
		{CacheBlocked, "blocked"},
		{NumCacheResults, "other"},
		{CacheResult(200), "other"},
	}
	for _, tt := range tests {
		if got := tt.r.String(); got != tt.want {
			t.Errorf("CacheResult(%d).String() = %q, want %q", tt.r, got, tt.want)
		}
	}
}

func TestAppendToolCalls(t *testing.T) {
	t.Parallel()
	var calls []ToolCall
	for _, d := range [][]ToolCallDelta{
		{{Index: 0, ID: "call_1", Name: "search"}},
		{{Index: 0, Arguments: `{"query":`}},
		{{Index: 0, Arguments: `"tail latency"}`}, {Index: 1, ID: "call_2", Name: "search", Arguments: `{}`}},
		{{Index: 5, Arguments: "ignored"}},
	} {
		calls = AppendToolCalls(calls, d)
	}
	want := []ToolCall{{ID: "call_1", Name: "search", Arguments: `{"query":"tail latency"}`}, {ID: "call_2", Name: "search", Arguments: `{}`}}
	if !slices.Equal(calls, want) {
		t.Errorf("calls %+v, want %+v", calls, want)
	}
}
