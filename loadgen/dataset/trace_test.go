package dataset

import (
	"os"
	"strings"
	"testing"
	"time"
)

func readSample(t *testing.T, name string, f TraceFormat) []TraceRequest {
	t.Helper()
	file, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = file.Close() }()
	reqs, err := ReadTrace(file, f)
	if err != nil {
		t.Fatalf("ReadTrace(%s): %v", name, err)
	}
	return reqs
}

func TestReadTraceSamples(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		file   string
		format TraceFormat
		n      int
		first  TraceRequest
		last   TraceRequest
	}{
		{"mooncake_sample.jsonl", Mooncake, 8,
			TraceRequest{At: 0, InputTokens: 6955, OutputTokens: 52},
			TraceRequest{At: 41004 * ms, InputTokens: 1204, OutputTokens: 104}},
		// Absolute times become offsets from the first row: 18:15:56.1340360 - 18:15:46.6805900.
		{"azure_sample.csv", Azure, 8,
			TraceRequest{At: 0, InputTokens: 374, OutputTokens: 44},
			TraceRequest{At: 9453446 * time.Microsecond, InputTokens: 388, OutputTokens: 27}},
		// The row with 0 request tokens is skipped; 0 response tokens asks for one.
		{"burstgpt_sample.csv", BurstGPT, 6,
			TraceRequest{At: 0, InputTokens: 472, OutputTokens: 18},
			TraceRequest{At: 165 * time.Second, InputTokens: 2028, OutputTokens: 197}},
	}
	for _, tt := range tests {
		t.Run(string(tt.format), func(t *testing.T) {
			reqs := readSample(t, tt.file, tt.format)
			if len(reqs) != tt.n {
				t.Fatalf("%d requests, want %d", len(reqs), tt.n)
			}
			check := func(which string, got, want TraceRequest) {
				if got.At != want.At || got.InputTokens != want.InputTokens || got.OutputTokens != want.OutputTokens {
					t.Errorf("%s request: at %v in %d out %d, want at %v in %d out %d", which,
						got.At, got.InputTokens, got.OutputTokens, want.At, want.InputTokens, want.OutputTokens)
				}
			}
			check("first", reqs[0], tt.first)
			check("last", reqs[len(reqs)-1], tt.last)
			for i := 1; i < len(reqs); i++ {
				if reqs[i].At < reqs[i-1].At {
					t.Fatalf("request %d at %v before request %d at %v", i, reqs[i].At, i-1, reqs[i-1].At)
				}
			}
		})
	}
	if got := readSample(t, "burstgpt_sample.csv", BurstGPT)[3]; got.OutputTokens != 1 {
		t.Errorf("BurstGPT row with 0 response tokens asks for %d, want 1", got.OutputTokens)
	}
}

func TestReadTraceErrors(t *testing.T) {
	tests := []struct {
		name   string
		format TraceFormat
		in     string
		want   string
	}{
		{"mooncake missing field", Mooncake, `{"timestamp": 0, "input_length": 5}`, "line 1"},
		{"mooncake bad json", Mooncake, "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n{", "line 2"},
		{"mooncake too few blocks", Mooncake, `{"timestamp": 0, "input_length": 1025, "output_length": 1, "hash_ids": [1, 2]}`, "exceeds"},
		{"mooncake negative", Mooncake, `{"timestamp": 0, "input_length": -1, "output_length": 1}`, "within"},
		{"mooncake far time", Mooncake, `{"timestamp": 1e300, "input_length": 1, "output_length": 1}`, "out of range"},
		{"mooncake empty", Mooncake, "\n\n", "no requests"},
		{"azure header", Azure, "time,in,out\n1,2,3\n", "want the columns"},
		{"azure time", Azure, "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,2\n", "line 2: timestamp"},
		{"azure tokens", Azure, "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,x,2\n", "want integers"},
		{"azure short row", Azure, "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,1\n", "fields"},
		{"burstgpt seconds", BurstGPT, "Timestamp,Model,Request tokens,Response tokens\nsoon,ChatGPT,1,2\n", "want seconds"},
		{"burstgpt nan", BurstGPT, "Timestamp,Model,Request tokens,Response tokens\nNaN,ChatGPT,1,2\n", "out of range"},
		{"unknown format", "parquet", "", "want mooncake"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadTrace(strings.NewReader(tt.in), tt.format)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestAzureZonedTimestamps(t *testing.T) {
	in := "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00.009930+00:00,1631,9\n2024-05-10 00:00:01.509930+00:00,200,3\n"
	reqs, err := ReadTrace(strings.NewReader(in), Azure)
	if err != nil {
		t.Fatal(err)
	}
	if reqs[1].At != 1500*time.Millisecond {
		t.Fatalf("second request at %v, want 1.5s", reqs[1].At)
	}
}
