package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
)

// reasoningResult has n requests whose first token (reasoning) comes 10 ms after the intended
// send and whose first answer token comes reasoning[i] steps of 20 ms later.
func reasoningResult(n int, reasoned bool) *loadgen.Result {
	res := &loadgen.Result{Start: time.Unix(1_700_000_000, 0)}
	for i := range n {
		at := time.Duration(i) * 100 * time.Millisecond
		first := at + 10*time.Millisecond
		steps := time.Duration(1 + i%5)
		out := first
		if reasoned {
			out += steps * 20 * time.Millisecond
		}
		res.Records = append(res.Records, loadgen.Record{Index: i, Intended: at, Sent: at, FirstByte: first, FirstToken: first,
			FirstOutput: out, Reasoned: reasoned, End: out + 50*time.Millisecond, Status: 200,
			Chunks: []loadgen.Chunk{{At: first, Tokens: 1}, {At: out, Tokens: 1}}, OutputTokens: 2, PromptTokens: 8})
	}
	res.Duration = res.Records[n-1].End
	return res
}

func TestTTFO(t *testing.T) {
	t.Parallel()
	b := Summarize(reasoningResult(500, true), Options{})
	ttft, ok1 := b.Metric(MetricTTFT)
	ttfo, ok2 := b.Metric(MetricTTFO)
	if !ok1 || !ok2 || b.ReasoningRequests != 500 {
		t.Fatalf("ttft %v ttfo %v reasoning requests %d: want both metrics and 500", ok1, ok2, b.ReasoningRequests)
	}
	// TTFO - TTFT is 20 ms times 1..5 reasoning steps, evenly: a mean of exactly 60 ms, to the
	// histogram's 0.1% resolution.
	if d := ttfo.Mean - ttft.Mean; d < 59*time.Millisecond || d > 61*time.Millisecond {
		t.Errorf("mean TTFO - TTFT = %v, want 60ms", d)
	}
	if ttfo.Median < 69*time.Millisecond || ttfo.Median > 71*time.Millisecond {
		t.Errorf("median TTFO %v, want 70ms (10 + 3 x 20)", ttfo.Median)
	}

	var js, text bytes.Buffer
	if err := WriteJSON(&js, b); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"mean_ttfo_ms"`, `"p99_ttfo_ms"`, `"p99_ttfo_ms_ci"`, `"reasoning_requests": 500`} {
		if !strings.Contains(js.String(), key) {
			t.Errorf("JSON has no %s", key)
		}
	}
	if err := WriteText(&text, b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "Time to First Output Token") || !strings.Contains(text.String(), "Requests that reasoned") {
		t.Errorf("text report shows no TTFO:\n%s", text.String())
	}
	f, err := Decode(bytes.NewReader(js.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := f.Bench.Metric(MetricTTFO); !ok || (got.Median-ttfo.Median).Abs() > time.Microsecond || f.Bench.ReasoningRequests != 500 {
		t.Errorf("read back ttfo %+v (%v), reasoning requests %d", got, ok, f.Bench.ReasoningRequests)
	}
	m, err := Merge(f.Bench, Summarize(reasoningResult(500, true), Options{}))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Metric(MetricTTFO); got.Count != 1000 || m.ReasoningRequests != 1000 {
		t.Errorf("merged ttfo count %d, reasoning requests %d; want 1000 each", got.Count, m.ReasoningRequests)
	}

	var lines bytes.Buffer
	if err := WriteDetailedJSONL(&lines, reasoningResult(2, true)); err != nil {
		t.Fatal(err)
	}
	// Request 1 reasons 2 steps of 20 ms after its first token at 10 ms.
	if rows := strings.Split(strings.TrimSpace(lines.String()), "\n"); !strings.Contains(rows[2], `"ttft_ms":10,"ttfo_ms":50,`) ||
		!strings.Contains(rows[2], `"reasoned":true`) {
		t.Errorf("detailed record %s: want ttft_ms 10, ttfo_ms 50, reasoned", rows[2])
	}

	// Without reasoning TTFO is TTFT: recorded for merges, in no report.
	plain := Summarize(reasoningResult(200, false), Options{})
	if _, ok := plain.Metric(MetricTTFO); ok || plain.Histograms[MetricTTFO].Count() != 200 {
		t.Errorf("plain run: ttfo reported %v, recorded %d", ok, plain.Histograms[MetricTTFO].Count())
	}
	js.Reset()
	text.Reset()
	if err := WriteJSON(&js, plain); err != nil {
		t.Fatal(err)
	}
	if err := WriteText(&text, plain); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(js.String(), "ttfo_ms") || strings.Contains(text.String(), "TTFO") {
		t.Error("a run without reasoning reports TTFO")
	}
}

// TestMergeFileWithoutTTFO merges a file written before TTFO existed: it has no TTFO
// histogram, which merges as empty.
func TestMergeFileWithoutTTFO(t *testing.T) {
	t.Parallel()
	b := Summarize(reasoningResult(50, false), Options{})
	var js bytes.Buffer
	if err := WriteJSON(&js, b); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc["histograms"].(map[string]any)["metrics"].(map[string]any), MetricTTFO)
	old, _ := json.Marshal(doc)
	f, err := Decode(bytes.NewReader(old))
	if err != nil {
		t.Fatal(err)
	}
	m, err := Merge(f.Bench, b)
	if err != nil {
		t.Fatal(err)
	}
	if m.Completed != 100 || m.Histograms[MetricTTFO].Count() != 50 {
		t.Errorf("merged %d requests, %d TTFOs; want 100 and the 50 the new file has", m.Completed, m.Histograms[MetricTTFO].Count())
	}
}

// turnsResult has sessions of three steps whose prompts grow with the step, and whose TTFT is
// 100 ms per step plus 0..9 ms.
func turnsResult(sessions int) *loadgen.Result {
	res := &loadgen.Result{Start: time.Unix(1_700_000_000, 0)}
	for s := range sessions {
		at := time.Duration(s) * time.Second
		for step := range 3 {
			ttft := time.Duration(step+1)*100*time.Millisecond + time.Duration(s%10)*time.Millisecond
			res.Records = append(res.Records, loadgen.Record{Index: len(res.Records), Session: "s" + string(rune('a'+s%26)) + "." + itoa(s),
				Step: step, Intended: at, Sent: at, FirstByte: at + ttft, FirstToken: at + ttft, FirstOutput: at + ttft,
				End: at + ttft + 10*time.Millisecond, Status: 200, OutputTokens: 1, PromptTokens: 100 * (step + 1), CachedTokens: 50 * step})
			at += ttft + time.Second
		}
	}
	res.Duration = res.Records[len(res.Records)-1].End
	return res
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestTurns(t *testing.T) {
	t.Parallel()
	b := Summarize(turnsResult(100), Options{})
	if len(b.Turns) != 3 {
		t.Fatalf("%d turns, want 3", len(b.Turns))
	}
	for k, tr := range b.Turns {
		// Mean TTFT: 100 ms x (step + 1) + the mean of 0..9 ms, 4.5 ms; 0.1% histogram resolution.
		want := time.Duration(k+1)*100*time.Millisecond + 4500*time.Microsecond
		if tr.Step != k || tr.Count != 100 || (tr.Mean-want).Abs() > want/500 || tr.MeanPromptTokens() != float64(100*(k+1)) ||
			tr.MeanCachedTokens() != float64(50*k) {
			t.Errorf("turn %d: %+v mean %v (want %v), prompt %.1f", k, tr, tr.Mean, want, tr.MeanPromptTokens())
		}
	}
	var js, text bytes.Buffer
	if err := WriteJSON(&js, b); err != nil {
		t.Fatal(err)
	}
	if err := WriteText(&text, b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "TTFT by session step") || !strings.Contains(text.String(), "cached tok") {
		t.Errorf("text has no turns table:\n%s", text.String())
	}
	f, err := Decode(bytes.NewReader(js.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Bench.Turns) != 3 || f.Bench.Turns[2].Count != 100 || f.Bench.Turns[2].Mean != b.Turns[2].Mean ||
		f.Bench.Turns[1].MeanCachedTokens() != 50 {
		t.Fatalf("read back turns %+v", f.Bench.Turns)
	}
	var back bytes.Buffer
	if err := WriteJSON(&back, f.Bench); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back.Bytes(), js.Bytes()) {
		t.Error("the turns do not survive a round trip through the file")
	}
	m, err := Merge(b, f.Bench)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Turns) != 3 || m.Turns[0].Count != 200 || m.Turns[0].TTFT.Count() != 200 {
		t.Errorf("merged turns %+v", m.Turns)
	}
	var page bytes.Buffer
	if err := WriteHTML(&page, b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), "Median TTFT by session step") {
		t.Error("HTML has no turns chart")
	}
}

func TestTurnsPoolLaterSteps(t *testing.T) {
	t.Parallel()
	res := &loadgen.Result{}
	for step := range MaxTurns + 5 {
		at := time.Duration(step) * time.Second
		res.Records = append(res.Records, loadgen.Record{Index: step, Session: "s", Step: step, Intended: at, Sent: at,
			FirstToken: at + time.Millisecond, End: at + 2*time.Millisecond, Status: 200, OutputTokens: 1})
	}
	b := Summarize(res, Options{})
	last := b.Turns[len(b.Turns)-1]
	if len(b.Turns) != MaxTurns || !last.AndLater || last.Count != 6 {
		t.Errorf("%d rows, last %+v: want %d rows, the last holding steps %d and later (6)", len(b.Turns), last, MaxTurns, MaxTurns-1)
	}
}

func TestEmbeddingFigures(t *testing.T) {
	t.Parallel()
	res := &loadgen.Result{Start: time.Unix(1_700_000_000, 0)}
	for i := range 40 {
		at := time.Duration(i) * 50 * time.Millisecond
		res.Records = append(res.Records, loadgen.Record{Index: i, Intended: at, Sent: at, FirstByte: at + 5*time.Millisecond,
			End: at + 5*time.Millisecond, Status: 200, Inputs: 8, PromptTokens: 80})
	}
	res.Duration = res.Records[39].End // 1.955 s
	b := Summarize(res, Options{})
	if b.EmbeddedInputs != 320 || b.InputTokens != 3200 {
		t.Fatalf("embedded %d inputs, %d tokens; want 320, 3200", b.EmbeddedInputs, b.InputTokens)
	}
	if want := 320 / 1.955; (b.EmbeddingThroughput()-want)/want > 1e-9 || (want-b.EmbeddingThroughput())/want > 1e-9 {
		t.Errorf("inputs/s %v, want %v", b.EmbeddingThroughput(), want)
	}
	var js, text bytes.Buffer
	if err := WriteJSON(&js, b); err != nil {
		t.Fatal(err)
	}
	if err := WriteText(&text, b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(js.String(), `"embedding_inputs": 320`) || !strings.Contains(js.String(), `"embedding_input_throughput"`) ||
		!strings.Contains(text.String(), "Embedding throughput (inputs/s)") {
		t.Errorf("no embedding figures in\n%s\n%s", js.String()[:400], text.String())
	}
	if strings.Contains(js.String(), "std_ttft_ms") || strings.Contains(text.String(), "Time to First Token") {
		t.Error("an embeddings run reports token latencies it cannot have")
	}
	if _, ok := b.Metric(MetricE2EL); !ok {
		t.Error("an embeddings run reports no E2EL")
	}
	f, err := Decode(bytes.NewReader(js.Bytes()))
	if err != nil || f.Bench.EmbeddedInputs != 320 {
		t.Fatalf("read back %v, %v", f, err)
	}
}
