package report

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/ragtail/ragtail/loadgen"
)

// encodeJSON is the line encoding/json writes for d, the reference appendDetailed matches.
func encodeJSON(t *testing.T, d *detailedRecord) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(d); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// fillAll sets every field of the struct v points to a non-zero value, so that a field
// appendDetailed does not write shows.
func fillAll(t *testing.T, v reflect.Value, seed int) {
	t.Helper()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("s<&>\"\\\n\u2028é" + string(rune('a'+i)))
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(seed*100 + i + 1))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Slice:
			s := reflect.MakeSlice(f.Type(), 2, 2)
			for k := range 2 {
				fillAll(t, s.Index(k), seed+k)
			}
			f.Set(s)
		case reflect.Struct: // the tool calls, which are never written out
			fillAll(t, f, seed)
		case reflect.Map:
			m := reflect.MakeMap(f.Type())
			m.SetMapIndex(reflect.ValueOf("b\"x"), reflect.ValueOf(1.5e-7))
			m.SetMapIndex(reflect.ValueOf("a"), reflect.ValueOf(12.25))
			f.Set(m)
		default:
			t.Fatalf("Record field %s of kind %s: teach fillAll and appendDetailed about it", v.Type().Field(i).Name, f.Kind())
		}
	}
}

func TestAppendDetailedMatchesEncodingJSON(t *testing.T) {
	var full loadgen.Record
	fillAll(t, reflect.ValueOf(&full).Elem(), 1)
	recs := []loadgen.Record{
		{},
		full,
		{Index: 3, Intended: time.Millisecond, Sent: 2 * time.Millisecond, End: 90 * time.Millisecond, Status: 200, TraceID: "abc"},
		{Index: 4, Status: 500, ErrKind: loadgen.ErrKindHTTP5xx, Err: "HTTP 500: {\"error\":\"<b>bad\tthing</b>\"} \x01 \xff"},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		r := loadgen.Record{Index: i, Intended: time.Duration(rng.Int64N(1e12)), Status: 200, TraceID: "0af7651916cd43dd8448eb211c80319c"}
		r.Sent = r.Intended + time.Duration(rng.Int64N(1e7))
		r.FirstByte = r.Sent + time.Duration(rng.Int64N(1e9))
		r.End = r.FirstByte + time.Duration(rng.Int64N(1e10))
		if rng.IntN(2) == 0 {
			r.FirstToken = r.FirstByte
			for k := range rng.IntN(6) {
				r.Chunks = append(r.Chunks, loadgen.Chunk{At: r.FirstByte + time.Duration(k)*time.Duration(rng.Int64N(1e8)), Tokens: rng.IntN(4)})
			}
			r.OutputTokens, r.PromptTokens = len(r.Chunks)+rng.IntN(3), rng.IntN(5000)
		}
		if rng.IntN(3) == 0 {
			r.ServerTiming = map[string]float64{"retrieve": rng.Float64() * 100, "generate": rng.Float64() * 1e-7, "embed": float64(rng.IntN(1e6)) * 1e18}
		}
		recs = append(recs, r)
	}
	var scratch bytes.Buffer
	for i := range recs {
		d, _ := detailedLine(&recs[i], nil)
		want := encodeJSON(t, &d)
		if got := string(appendDetailed(nil, &d, &scratch)); got != want {
			t.Fatalf("record %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

func BenchmarkDetailedWrite(b *testing.B) {
	r := loadgen.Record{Index: 7, Key: "doc-00017#0", Intended: 123456789, Sent: 123556789, FirstByte: 124456789, End: 124556789,
		Status: 200, TraceID: "0af7651916cd43dd8448eb211c80319c"}
	b.Run("append", func(b *testing.B) {
		d := NewDetailedWriter(discard{}, time.Now(), loadgen.RunInfo{})
		b.ReportAllocs()
		for b.Loop() {
			d.Write(r)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		enc := json.NewEncoder(discard{})
		enc.SetEscapeHTML(false)
		b.ReportAllocs()
		for b.Loop() {
			d, _ := detailedLine(&r, nil)
			_ = enc.Encode(&d)
		}
	})
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
