package service

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/ragtail/ragtail/rag"
)

// TestRuntimeApplyBounds: every value of /admin/config that sizes memory, work or a wait has an
// upper bound; a value past it is refused with a 400 naming the field and the bound, and
// nothing changes.
func TestRuntimeApplyBounds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body string
		wantErr    string // "" accepts
	}{
		{name: "cache policy 2q", body: `{"cache":{"enabled":true,"size":64,"policy":"2q"}}`},
		{name: "cache policy ARC in capitals", body: `{"cache":{"policy":"ARC"}}`},
		{name: "unknown cache policy", body: `{"cache":{"policy":"mru"}}`, wantErr: "cache.policy must be lru, 2q or arc"},
		{name: "cache at its bound", body: `{"cache":{"enabled":true,"size":1048576}}`},
		{name: "cache too large", body: `{"cache":{"enabled":true,"size":1048577}}`, wantErr: "cache.size must be at most 1048576"},
		{name: "workers at their bound", body: `{"admission":{"workers":65536}}`},
		{name: "too many workers", body: `{"admission":{"workers":65537}}`, wantErr: "workers must be at least 1 and at most 65536"},
		{name: "queue too long", body: `{"admission":{"queue":1048577}}`, wantErr: "queue capacity"},
		{name: "queue timeout too long", body: `{"admission":{"queue_timeout":"2h"}}`, wantErr: "queue timeout must be between 0"},
		{name: "queue target", body: `{"admission":{"queue_target":"250ms"}}`},
		{name: "queue target off", body: `{"admission":{"queue_target":"off"}}`},
		{name: "queue target too long", body: `{"admission":{"queue_target":"11m"}}`, wantErr: "queue target"},
		{name: "queue target garbage", body: `{"admission":{"queue_target":"soon"}}`, wantErr: "admission.queue_target"},
		{name: "adaptive limit off", body: `{"admission":{"adaptive":{"enabled":false}}}`},
		{name: "adaptive tolerance at its bound", body: `{"admission":{"adaptive":{"tolerance":100}}}`},
		{name: "adaptive tolerance too high", body: `{"admission":{"adaptive":{"tolerance":101}}}`, wantErr: "adaptive limit tolerance must be between 1.5 and 100"},
		{name: "adaptive minimum too high", body: `{"admission":{"adaptive":{"min_limit":65537}}}`, wantErr: "min_limit must be between 1 and 65536"},
		{name: "async deadline at its bound", body: `{"async_deadline":"1m"}`},
		{name: "async deadline too long", body: `{"async_deadline":"1h"}`, wantErr: "async_deadline must be at most 1m0s"},
		{name: "async quorum beyond the shards", body: `{"async_quorum":5}`, wantErr: "async_quorum must be at most the 4 shards"},
		{name: "fetch latency too long", body: `{"fetch_latency":"fixed:2m"}`, wantErr: "fetch_latency"},
		{name: "shard latency cap too long", body: `{"shard_latency":["lognormal:5ms,0.5,1h"]}`, wantErr: "shard_latency"},
		// pareto:10ms,0.1 put 17 of 20 requests over 20 s; its P99.9 is 10^28 s.
		{name: "shard latency with a P99.9 past the limit", body: `{"shard_latency":["pareto:10ms,0.1"]}`, wantErr: "shard_latency[0]: latency law \"pareto:10ms,0.1\": its P99.9 is 1e+28s, above the 1m0s limit"},
		{name: "fetch latency with a P99.9 past the limit", body: `{"fetch_latency":"lognormal:1s,1.5"}`, wantErr: "fetch_latency: latency law \"lognormal:1s,1.5\": its P99.9 is 1m43"},
		{name: "heavy shard latency with a cap", body: `{"shard_latency":["pareto:10ms,0.1,1m"]}`},
		// A fault's delay of a million hours was accepted and cut to 60 s without a word.
		{name: "fault delay past the limit", body: `{"faults":[{"name":"slow","stage":"embed","delay":"fixed:1000000h"}]}`, wantErr: "the value 1000000h0m0s is above the 1m0s limit"},
		{name: "heavy fault delay", body: `{"faults":[{"name":"slow","stage":"embed","delay":"pareto:10ms,0.1"}]}`, wantErr: "above the 1m0s limit"},
		{name: "relative fault floor past the limit", body: `{"faults":[{"name":"slow","stage":"embed","relative":{"floor":"2m"}}]}`, wantErr: "at most the 1m0s limit"},
		{name: "link latency past the limit", body: `{"links":{"llm":"latency:2m"}}`, wantErr: "between 0 and 1m0s"},
		// A service without links used to panic on a PUT naming one (an entry in a nil map).
		{name: "link the service does not run", body: `{"links":{"llm":"latency:5ms"}}`, wantErr: "no link runs in front of llm"},
		{name: "too many fault rules", body: `{"faults":[` + strings.Repeat(`{"name":"x","stage":"embed","delay":"fixed:1ms"},`, 256) + `{"name":"y","stage":"embed","delay":"fixed:1ms"}]}`, wantErr: "at most 256"},
		{name: "fault cut too large", body: `{"faults":[{"name":"cut","route":"/v1/chat/completions","cut_after_tokens":2000000000}]}`, wantErr: "faults"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			svc, _, _ := testService(t)
			before := svc.Runtime.Config()
			_, err := svc.Runtime.Apply(context.Background(), []byte(tt.body))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Apply(%s) = %v; want it accepted", tt.body, err)
				}
				return
			}
			if !errors.Is(err, rag.ErrInvalidRequest) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Apply(%.100s) = %v; want an invalid-request error containing %q", tt.body, err, tt.wantErr)
			}
			if after := svc.Runtime.Config(); after.Version != before.Version || after.Admission != before.Admission || after.Cache != before.Cache {
				t.Fatalf("a refused PUT changed the config: %+v -> %+v", before, after)
			}
		})
	}
}

// TestRuntimeCachePolicy PUTs cache.policy through /admin/config and sees it applied: the
// config and /admin/stats name the new policy, the swapped-in cache starts empty, and the store
// behind it still answers every chunk.
func TestRuntimeCachePolicy(t *testing.T) {
	t.Parallel()
	svc, _, admin := testService(t)
	var ids []string
	for i := range 8 {
		c := rag.Chunk{ID: fmt.Sprintf("policy-test#%d", i), DocID: "policy-test", Text: "a chunk that outlives every cache swap", Tokens: 7}
		if err := svc.Docs.Put(c); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
	}
	for _, id := range ids {
		if _, err := svc.Docs.Get(context.Background(), id); err != nil {
			t.Fatalf("warm %s: %v", id, err)
		}
	}
	if st := svc.Docs.Stats(); st.CacheKind != "lru" || st.CacheLen == 0 {
		t.Fatalf("before: cache %s with %d entries; want a warm lru", st.CacheKind, st.CacheLen)
	}
	for _, policy := range []string{"2q", "arc", "lru"} {
		resp, body := request(t, http.MethodPut, admin.URL+"/admin/config", `{"cache":{"policy":"`+policy+`"}}`)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"policy":"`+policy+`"`) {
			t.Fatalf("PUT policy %s: %d %s", policy, resp.StatusCode, body)
		}
		resp, body = request(t, http.MethodGet, admin.URL+"/admin/stats", "")
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"CacheKind":"`+policy+`"`) {
			t.Fatalf("GET /admin/stats after policy %s: %d %.300s", policy, resp.StatusCode, body)
		}
		if st := svc.Docs.Stats(); st.CacheLen != 0 {
			t.Fatalf("policy %s: the new cache holds %d entries; want it empty", policy, st.CacheLen)
		}
		for _, id := range ids {
			if _, err := svc.Docs.Get(context.Background(), id); err != nil {
				t.Fatalf("policy %s: get %s: %v (the store must survive the swap)", policy, id, err)
			}
		}
	}
}
