package loadgen_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/dataset"
	"github.com/ragtail/ragtail/loadgen/shape"
)

// answeringServer answers every chat request with a text of its own making, which no dataset
// contains, streamed over several chunks with characters JSON must escape; it keeps the
// messages of every request and the answers it gave.
type answeringServer struct {
	mu      sync.Mutex
	n       int
	bodies  [][]loadgen.Message
	answers []string
}

func (s *answeringServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Messages []loadgen.Message `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.n++
	answer := fmt.Sprintf("server answer %d: \"quoted\"\nsecond line, caf\u00e9 \u2603 turn %d", s.n*7919, len(body.Messages)/2+1)
	s.bodies = append(s.bodies, body.Messages)
	s.answers = append(s.answers, answer)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	// Split the answer in pieces of 5 bytes on rune boundaries, each its own content delta,
	// after a reasoning delta that is not part of the answer.
	fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"thinking, not answering\"}}]}\n\n")
	for rest := answer; rest != ""; {
		n := min(5, len(rest))
		for n < len(rest) && rest[n]&0xC0 == 0x80 {
			n++
		}
		piece, _ := json.Marshal(rest[:n])
		fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":%s}}]}\n\n", piece)
		rest = rest[n:]
	}
	fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":9}}\n\ndata: [DONE]\n\n", 10*len(body.Messages))
}

func (s *answeringServer) answerOf(i int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answers[i]
}

// TestMultiTurnCarriesTheServersAnswers replays a three-turn ShareGPT conversation and checks,
// at the server, that every later turn carries the earlier turns with the answers the server
// actually gave, never the replies the dataset recorded.
func TestMultiTurnCarriesTheServersAnswers(t *testing.T) {
	const sharegpt = `[{"id": "conv-1", "conversations": [
		{"from": "system", "value": "be brief"},
		{"from": "human", "value": "first question"},
		{"from": "gpt", "value": "RECORDED REPLY ONE"},
		{"from": "human", "value": "second question"},
		{"from": "gpt", "value": "RECORDED REPLY TWO"},
		{"from": "human", "value": "third question"},
		{"from": "gpt", "value": "RECORDED REPLY THREE"}]}]`
	convs, err := dataset.ReadConversations(strings.NewReader(sharegpt))
	if err != nil {
		t.Fatal(err)
	}
	src, err := shape.ConversationSessions(convs, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	srv := &answeringServer{}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	res := mustRun(t, loadgen.Config{Workload: shape.Sessions(shape.Infinite(), src), Client: newClient(t, ts.URL), NumItems: 1})

	if len(srv.bodies) != 3 || len(res.Records) != 3 {
		t.Fatalf("server saw %d requests, run recorded %d; want 3 turns", len(srv.bodies), len(res.Records))
	}
	a1, a2 := srv.answerOf(0), srv.answerOf(1)
	want := [][]loadgen.Message{
		{{Role: "system", Content: "be brief"}, {Role: "user", Content: "first question"}},
		{{Role: "system", Content: "be brief"}, {Role: "user", Content: "first question"}, {Role: "assistant", Content: a1},
			{Role: "user", Content: "second question"}},
		{{Role: "system", Content: "be brief"}, {Role: "user", Content: "first question"}, {Role: "assistant", Content: a1},
			{Role: "user", Content: "second question"}, {Role: "assistant", Content: a2}, {Role: "user", Content: "third question"}},
	}
	for i, w := range want {
		if !reflect.DeepEqual(srv.bodies[i], w) {
			t.Errorf("turn %d sent\n%q\nwant\n%q", i, srv.bodies[i], w)
		}
	}
	for i, r := range res.Records {
		if r.Step != i || r.Session != "conv-1.0" {
			t.Errorf("record %d: session %q step %d, want conv-1.0 step %d", i, r.Session, r.Step, i)
		}
		if r.Answer != "" {
			t.Errorf("record %d kept its answer text after the run", i)
		}
		if !r.Reasoned || r.FirstOutput < r.FirstToken {
			t.Errorf("record %d: reasoned %v, first output %v before the first token %v", i, r.Reasoned, r.FirstOutput, r.FirstToken)
		}
	}
	if res.Records[2].PromptTokens != 60 {
		t.Errorf("turn 3 prompt tokens %d, want the server's 60", res.Records[2].PromptTokens)
	}
}

// TestAnswersKeptOnlyWhenNeeded checks that requests no later step continues keep no answer:
// lone requests and sessions of independent steps.
func TestAnswersKeptOnlyWhenNeeded(t *testing.T) {
	srv := &answeringServer{}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	chat := func(text string) loadgen.Request {
		return loadgen.Request{Messages: []loadgen.Message{{Role: "user", Content: text}}}
	}
	items := []loadgen.Item{
		{Request: chat("alone")},
		{Request: chat("a"), Session: "s", Then: []loadgen.Step{{Request: chat("b")}}},
	}
	i := 0
	w := workloadFunc(func() (loadgen.Item, bool) {
		if i == len(items) {
			return loadgen.Item{}, false
		}
		i++
		return items[i-1], true
	})
	mustRun(t, loadgen.Config{Workload: w, Client: newClient(t, ts.URL)})
	for k, msgs := range srv.bodies {
		if len(msgs) != 1 {
			t.Errorf("request %d sent %d messages, want its own 1: %q", k, len(msgs), msgs)
		}
	}
}

type workloadFunc func() (loadgen.Item, bool)

func (f workloadFunc) Next() (loadgen.Item, bool) { return f() }
