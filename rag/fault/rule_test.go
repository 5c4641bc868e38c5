package fault_test

import (
	"encoding/json"
	"errors"
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/rag"
	"github.com/ragtail/ragtail/rag/fault"
	"github.com/ragtail/ragtail/rag/latency"
)

func mustLaw(tb testing.TB, s string) latency.Law {
	tb.Helper()
	l, err := latency.Parse(s)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

func TestParseRuleCompact(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want fault.Rule
	}{
		{"pareto delay", "stage=retrieve;percent=10;delay=pareto:10ms,1.5",
			fault.Rule{Stage: rag.StageRetrieve, Percent: 10, Delay: mustLaw(t, "pareto:10ms,1.5")}},
		{"percent defaults to 100, spaces and trailing separator", " name = slow ; stage = Embed ; delay = uniform:1ms, 5ms ; ",
			fault.Rule{Name: "slow", Stage: rag.StageEmbed, Percent: 100, Delay: mustLaw(t, "uniform:1ms,5ms")}},
		{"percent sign", "stage=fetch;percent=2.5%;delay=fixed:3ms",
			fault.Rule{Stage: rag.StageFetch, Percent: 2.5, Delay: latency.Fixed(3 * time.Millisecond)}},
		{"bare relative takes the article's terms", "stage=retrieve;relative",
			fault.Rule{Stage: rag.StageRetrieve, Percent: 100, Relative: fault.DefaultRelative()}},
		{"relative terms", "stage=generate;floor=50ms;factor=2;jitter=0s;baseline=300ms",
			fault.Rule{Stage: rag.StageGenerate, Percent: 100,
				Relative: &fault.Relative{Floor: 50 * time.Millisecond, Factor: 2, Baseline: 300 * time.Millisecond}}},
		{"abort with a quoted message holding separators", `route=/v1/chat/completions;percent=1;abort=503;message="down; \"badly\""`,
			fault.Rule{Route: "/v1/chat/completions", Percent: 1, Abort: &fault.Abort{Status: 503, Message: `down; "badly"`}}},
		{"cut", "stage=generate;percent=5;cut_after_tokens=20",
			fault.Rule{Stage: rag.StageGenerate, Percent: 5, CutAfterTokens: 20}},
		{"stage rule on a route", "stage=fetch;route=/v1/documents/*;abort=404",
			fault.Rule{Stage: rag.StageFetch, Route: "/v1/documents/*", Percent: 100, Abort: &fault.Abort{Status: 404}}},
		{"none law is no delay", "stage=embed;delay=none;abort=500",
			fault.Rule{Stage: rag.StageEmbed, Percent: 100, Abort: &fault.Abort{Status: 500}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := fault.ParseRule(tt.in)
			if err != nil {
				t.Fatalf("ParseRule(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParseRule(%q)\n got %#v\nwant %#v", tt.in, got, tt.want)
			}
			again, err := fault.ParseRule(got.String())
			if err != nil || !reflect.DeepEqual(again, got) {
				t.Fatalf("round trip through %q: %#v, %v", got.String(), again, err)
			}
		})
	}
}

func TestParseRuleRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string // want: a piece of the message that tells the user what to change
	}{
		{"empty", "", "KEY=VALUE"},
		{"unknown key", "stage=retrieve;delay=fixed:1ms;percnt=10", `unknown key "percnt"`},
		{"duplicate key", "stage=retrieve;stage=embed;delay=fixed:1ms", "stage is given twice"},
		{"value without key", "=3;stage=embed", "value without a key"},
		{"key without value", "stage;delay=fixed:1ms", "stage needs a value"},
		{"bad percent", "stage=retrieve;percent=ten;delay=fixed:1ms", "not a number between 0 and 100"},
		{"percent out of range", "stage=retrieve;percent=120;delay=fixed:1ms", "percent must be between 0 and 100, got 120"},
		{"negative percent", "stage=retrieve;percent=-1;delay=fixed:1ms", "percent must be between 0 and 100"},
		{"NaN percent", "stage=retrieve;percent=NaN;delay=fixed:1ms", "percent must be between 0 and 100"},
		{"bad law", "stage=retrieve;delay=gauss:1ms", "unknown kind"},
		{"unknown stage", "stage=rerank;delay=fixed:1ms", `unknown stage "rerank"`},
		{"no target", "percent=10;delay=fixed:1ms", "set stage"},
		{"does nothing", "stage=retrieve;percent=10", "does nothing"},
		{"abort status", "stage=retrieve;abort=302", "400 to 599, got 302"},
		{"abort not a number", "stage=retrieve;abort=oops", "not an HTTP status"},
		{"message without abort", `stage=retrieve;delay=fixed:1ms;message="x"`, "give abort=STATUS"},
		{"unterminated quote", `stage=retrieve;abort=503;message="x`, "unterminated"},
		{"text after quote", `stage=retrieve;abort=503;message="x" y`, "after the quoted value"},
		{"cut on retrieve", "stage=retrieve;cut_after_tokens=3", "needs stage generate or stream"},
		{"negative cut", "stage=generate;cut_after_tokens=-3", "cut_after_tokens must be between 0"},
		{"route without slash", "route=v1/chat;abort=503", "must start with /"},
		{"route with query", "route=/v1/chat?x=1;abort=503", "query"},
		{"partial wildcard", "route=/v1/doc*;abort=503", "whole segment"},
		{"bad name", "name=slow retrieve;stage=retrieve;delay=fixed:1ms", "letters, digits"},
		{"relative with value", "stage=retrieve;relative=2", "relative takes no value"},
		{"relative adds nothing", "stage=retrieve;floor=0s;factor=0;jitter=0s", "adds no delay"},
		{"negative floor", "stage=retrieve;floor=-1ms", "non-negative duration"},
		{"bad factor", "stage=retrieve;factor=x", "factor"},
		{"bad JSON", `{"stage":"retrieve","delay":"fixed:1ms"`, "unexpected end"},
		{"unknown JSON key", `{"stage":"retrieve","delay":"fixed:1ms","percnt":5}`, `unknown field "percnt"`},
		{"unknown JSON relative key", `{"stage":"retrieve","relative":{"flor":"1ms"}}`, `unknown field "flor"`},
		{"JSON relative number", `{"stage":"retrieve","relative":{"floor":100}}`, "relative"},
		{"JSON bad law", `{"stage":"retrieve","delay":"pareto:1ms"}`, "pareto:SCALE,SHAPE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := fault.ParseRule(tt.in)
			if !errors.Is(err, rag.ErrInvalidRequest) {
				t.Fatalf("ParseRule(%q) error = %v, want one matching rag.ErrInvalidRequest", tt.in, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseRule(%q) error = %q, want it to contain %q", tt.in, err, tt.want)
			}
		})
	}
}

func TestValidateLawsBuiltInGo(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		law  latency.Law
		want string
	}{
		{"unknown kind", latency.Law{Kind: "gamma", Scale: time.Millisecond}, `unknown law "gamma"`},
		{"negative scale", latency.Law{Kind: latency.LawFixed, Scale: -time.Millisecond}, "negative"},
		{"uniform upside down", latency.Law{Kind: latency.LawUniform, Scale: 5 * time.Millisecond, Max: time.Millisecond}, "below min"},
		{"pareto without shape", latency.Law{Kind: latency.LawPareto, Scale: time.Millisecond}, "shape must be a positive number"},
		{"lognormal without scale", latency.Law{Kind: latency.LawLognormal, Shape: 1}, "scale must be positive"},
		{"cap below scale", latency.Law{Kind: latency.LawPareto, Scale: 10 * time.Millisecond, Shape: 1.5, Max: time.Millisecond}, "cap 1ms is below scale"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := fault.Rule{Name: "x", Stage: rag.StageRetrieve, Percent: 10, Delay: tt.law}.Validate()
			if !errors.Is(err, rag.ErrInvalidRequest) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want ErrInvalidRequest containing %q", err, tt.want)
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	t.Parallel()
	err := fault.Rule{Name: "two-problems", Stage: "nope", Percent: 200, Delay: latency.Fixed(time.Millisecond)}.Validate()
	for _, want := range []string{`fault rule "two-problems": unknown stage "nope"`, "percent must be between 0 and 100, got 200"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to contain %q", err, want)
		}
	}
}

// exampleRules covers every field of a rule.
func exampleRules(tb testing.TB) []fault.Rule {
	tb.Helper()
	return []fault.Rule{
		{Name: "slow-retrieve", Stage: rag.StageRetrieve, Percent: 10, Delay: mustLaw(tb, "pareto:10ms,1.5,2s")},
		{Name: "session", Stage: rag.StageRetrieve, Percent: 100, Relative: fault.DefaultRelative()},
		{Name: "pinned", Stage: rag.StageFetch, Percent: 50, Delay: mustLaw(tb, "lognormal:5ms,0.5"),
			Relative: &fault.Relative{Floor: 0, Factor: 1, Jitter: time.Millisecond, Baseline: 20 * time.Millisecond}},
		{Name: "flaky", Route: "/v1/chat/completions", Percent: 0.5, Abort: &fault.Abort{Status: 503, Message: "injected outage"}},
		{Name: "docs", Stage: rag.StageFetch, Route: "/v1/documents/*", Percent: 100, Abort: &fault.Abort{Status: 404}},
		{Name: "cut", Stage: rag.StageGenerate, Percent: 5, Delay: mustLaw(tb, "uniform:1ms,3ms"), CutAfterTokens: 20},
	}
}

func TestRulesJSONRoundTrip(t *testing.T) {
	t.Parallel()
	rules := exampleRules(t)
	b, err := json.Marshal(rules)
	if err != nil {
		t.Fatal(err)
	}
	got, err := fault.ParseRules(string(b))
	if err != nil {
		t.Fatalf("ParseRules(%s): %v", b, err)
	}
	if !reflect.DeepEqual(got, rules) {
		t.Fatalf("JSON round trip\n got %#v\nwant %#v", got, rules)
	}
	var viaUnmarshal []fault.Rule
	if err := json.Unmarshal(b, &viaUnmarshal); err != nil || !reflect.DeepEqual(viaUnmarshal, rules) {
		t.Fatalf("json.Unmarshal round trip: %#v, %v", viaUnmarshal, err)
	}
	for _, r := range rules {
		again, err := fault.ParseRule(r.String())
		if err != nil || !reflect.DeepEqual(again, r) {
			t.Errorf("compact round trip of %q: %#v, %v", r.String(), again, err)
		}
	}
}

// TestRuleJSONForm pins the JSON the admin API carries, key by key.
func TestRuleJSONForm(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		rule fault.Rule
		want string
	}{
		{"law", exampleRules(t)[0], `{"name":"slow-retrieve","stage":"retrieve","percent":10,"delay":"pareto:10ms,1.5,2s"}`},
		{"relative", exampleRules(t)[1], `{"name":"session","stage":"retrieve","percent":100,"relative":{"floor":"100ms","factor":1.8,"jitter":"200ms"}}`},
		{"abort", exampleRules(t)[3], `{"name":"flaky","route":"/v1/chat/completions","percent":0.5,"abort":{"status":503,"message":"injected outage"}}`},
		{"cut", fault.Rule{Name: "c", Stage: rag.StageGenerate, Percent: 5, CutAfterTokens: 20}, `{"name":"c","stage":"generate","percent":5,"cut_after_tokens":20}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := json.Marshal(tt.rule)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Fatalf("json.Marshal = %s\nwant          %s", b, tt.want)
			}
		})
	}
}

func TestRuleJSONDefaults(t *testing.T) {
	t.Parallel()
	got, err := fault.ParseRules(`{"stage":"retrieve","relative":{"factor":2}}`)
	if err != nil {
		t.Fatal(err)
	}
	want := []fault.Rule{{Stage: rag.StageRetrieve, Percent: 100,
		Relative: &fault.Relative{Floor: fault.DefaultFloor, Factor: 2, Jitter: fault.DefaultJitter}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("missing percent and relative terms:\n got %#v\nwant %#v", got, want)
	}
	got, err = fault.ParseRules(`[{"stage":"retrieve","percent":0,"relative":{"jitter":"0s"}}]`)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Percent != 0 || got[0].Relative.Jitter != 0 {
		t.Fatalf("explicit zeros must stay zero: %#v", got[0])
	}
}

func TestParseRulesReportsPositions(t *testing.T) {
	t.Parallel()
	_, err := fault.ParseRules(`[{"stage":"retrieve","delay":"fixed:1ms"},{"stage":"retrieve"}]`)
	if !errors.Is(err, rag.ErrInvalidRequest) || !strings.Contains(err.Error(), "rule 2:") {
		t.Fatalf("err = %v, want rule 2 named", err)
	}
}

func TestRulesFlag(t *testing.T) {
	t.Parallel()
	var rules fault.Rules
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(&rules, "fault", fault.FlagUsage)
	err := fs.Parse([]string{
		"--fault", "stage=retrieve;percent=10;delay=pareto:10ms,1.5",
		"--fault", `[{"route":"/v1/chat/completions","percent":1,"abort":{"status":503}}]`,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 2 || rules[0].Stage != rag.StageRetrieve || rules[1].Abort.Status != 503 {
		t.Fatalf("rules = %#v", rules)
	}
	if err := fs.Parse([]string{"--fault", "stage=retrieve;percent=10"}); err == nil || !strings.Contains(err.Error(), "does nothing") {
		t.Fatalf("a rule that does nothing must be a flag error, got %v", err)
	}
}

func TestRouteMatching(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, route string
		want           bool
	}{
		{"/v1/chat/completions", "/v1/chat/completions", true},
		{"/v1/chat/completions", "/v1/chat/completion", false},
		{"/v1/chat/completions", "/v1/chat/completions/x", false},
		{"/v1/documents/*", "/v1/documents/doc-1", true},
		{"/v1/documents/*", "/v1/documents/doc-1/part/2", true},
		{"/v1/documents/*", "/v1/documents/", true},
		{"/v1/documents/*", "/v1/documents", false},
		{"/v1/documents/*", "/v1/documents/{id}", true}, // the router's own pattern passed as the route
		{"/v1/documents/{id}", "/v1/documents/doc-1", true},
		{"/v1/documents/{id}", "/v1/documents/doc-1/x", false},
		{"/v1/documents/{id}", "/v1/documents/", false},
		{"/v1/*/completions", "/v1/chat/completions", true},
		{"/v1/*/completions", "/v1/completions", false},
		{"/*", "/healthz", true},
		{"/healthz", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+" "+tt.route, func(t *testing.T) {
			t.Parallel()
			in, err := fault.NewInjector([]fault.Rule{{Name: "r", Route: tt.pattern, Percent: 100, Abort: &fault.Abort{Status: 500}}}, 1)
			if err != nil {
				t.Fatal(err)
			}
			if got := in.Decide("", tt.route).Injected(); got != tt.want {
				t.Fatalf("route %q against pattern %q: fired %v, want %v", tt.route, tt.pattern, got, tt.want)
			}
		})
	}
}

// FuzzParseRule checks that the parser never panics and that whatever it accepts is valid and
// survives both round trips, through the compact form and through JSON, unchanged.
func FuzzParseRule(f *testing.F) {
	for _, s := range []string{
		"stage=retrieve;percent=10;delay=pareto:10ms,1.5",
		"name=s;stage=retrieve;relative;floor=100ms;factor=1.8;jitter=200ms;baseline=1s",
		`route=/v1/documents/*;percent=1;abort=503;message="a;b \"c\""`,
		"stage=generate;percent=5%;cut_after_tokens=20;delay=uniform:1ms,2ms",
		`{"name":"x","stage":"fetch","percent":50,"delay":"lognormal:5ms,0.5,1s"}`,
		`{"route":"/v1/chat/completions","abort":{"status":429,"message":"slow down"}}`,
		`{"stage":"retrieve","relative":{}}`,
		"stage=retrieve;;delay= fixed:1ms ;",
		`message="\xff";abort=500;stage=embed`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := fault.ParseRule(s)
		if err != nil {
			if !errors.Is(err, rag.ErrInvalidRequest) {
				t.Fatalf("ParseRule(%q) error %v does not match rag.ErrInvalidRequest", s, err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("ParseRule(%q) accepted an invalid rule: %v", s, err)
		}
		compact := r.String()
		again, err := fault.ParseRule(compact)
		if err != nil || !reflect.DeepEqual(again, r) {
			t.Fatalf("ParseRule(%q) = %#v; its compact form %q parses to %#v, %v", s, r, compact, again, err)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("marshal %#v: %v", r, err)
		}
		fromJSON, err := fault.ParseRule(string(b))
		if err != nil || !reflect.DeepEqual(fromJSON, r) {
			t.Fatalf("ParseRule(%q) = %#v; its JSON %s parses to %#v, %v", s, r, b, fromJSON, err)
		}
	})
}
