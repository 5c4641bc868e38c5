package rag

import "testing"

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
