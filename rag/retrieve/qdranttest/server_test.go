package qdranttest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/qdrant/go-client/qdrant"
	"github.com/ragtail/ragtail/rag/latency"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// frame encodes one HTTP/2 frame.
func frame(typ byte, payload []byte) []byte {
	b := make([]byte, frameHeaderLen, frameHeaderLen+len(payload))
	b[0], b[1], b[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	b[3] = typ
	return append(b, payload...)
}

func goAwayFrame(code uint32, debug string) []byte {
	p := make([]byte, 8, 8+len(debug))
	binary.BigEndian.PutUint32(p[0:4], 1<<31-1)
	binary.BigEndian.PutUint32(p[4:8], code)
	return frame(frameGoAway, append(p, debug...))
}

type seenGoAway struct {
	code  uint32
	debug string
}

// scanAll feeds stream to a frameScanner in pieces of the given sizes (cycled) and returns the
// GOAWAYs it reported.
func scanAll(stream []byte, pieces []int) []seenGoAway {
	var got []seenGoAway
	f := frameScanner{onGoAway: func(code uint32, debug string) { got = append(got, seenGoAway{code, debug}) }}
	for i := 0; len(stream) > 0; i++ {
		n := min(len(stream), max(1, pieces[i%len(pieces)]))
		f.Write(stream[:n])
		stream = stream[n:]
	}
	return got
}

func TestFrameScanner(t *testing.T) {
	var stream bytes.Buffer
	stream.Write(frame(0x4, make([]byte, 18)))                                     // SETTINGS
	stream.Write(frame(0x6, make([]byte, 8)))                                      // PING
	stream.Write(frame(0x4, nil))                                                  // SETTINGS ack, empty
	stream.Write(goAwayFrame(codeNoError, "max_age"))                              // drain heads-up
	stream.Write(frame(0x0, bytes.Repeat([]byte{0x7}, 300)))                       // DATA full of 0x7 bytes
	stream.Write(goAwayFrame(codeEnhanceYourCalm, "too_many_pings"))               // the pitfall
	stream.Write(goAwayFrame(codeNoError, ""))                                     // no debug data
	stream.Write(goAwayFrame(codeNoError, string(bytes.Repeat([]byte("x"), 200)))) // long debug
	want := []seenGoAway{{codeNoError, "max_age"}, {codeEnhanceYourCalm, "too_many_pings"}, {codeNoError, ""}, {codeNoError, string(bytes.Repeat([]byte("x"), maxDebug))}}
	tests := []struct {
		name   string
		pieces []int
	}{
		{"whole", []int{1 << 20}},
		{"byte by byte", []int{1}},
		{"odd pieces", []int{3, 7, 1, 13, 2}},
		{"header split", []int{5, 4, 9, 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := scanAll(stream.Bytes(), tt.pieces); !slices.Equal(got, want) {
				t.Errorf("GOAWAYs %+v, want %+v", got, want)
			}
		})
	}
}

func TestGoAwayReason(t *testing.T) {
	tests := []struct {
		code  uint32
		debug string
		want  string
	}{
		{codeEnhanceYourCalm, "too_many_pings", "too_many_pings"},
		{codeNoError, "", "no_error"},
		{codeEnhanceYourCalm, "", "enhance_your_calm"},
		{0x2, "", "error_0x2"},
	}
	for _, tt := range tests {
		if got := goAwayReason(tt.code, tt.debug); got != tt.want {
			t.Errorf("goAwayReason(%d, %q) = %q, want %q", tt.code, tt.debug, got, tt.want)
		}
	}
}

// FuzzFrameScanner: however the server's bytes are split, the scanner reports the same
// GOAWAYs, and arbitrary bytes never make it panic.
func FuzzFrameScanner(f *testing.F) {
	f.Add(goAwayFrame(codeEnhanceYourCalm, "too_many_pings"), uint8(3))
	f.Add(append(frame(0x4, make([]byte, 6)), goAwayFrame(codeNoError, "max_age")...), uint8(1))
	f.Add([]byte{0xff, 0xff, 0xff, 0x7, 0, 0, 0, 0, 0, 1, 2}, uint8(2))
	f.Fuzz(func(t *testing.T, stream []byte, piece uint8) {
		whole := scanAll(stream, []int{len(stream) + 1})
		split := scanAll(stream, []int{int(piece%16) + 1, 1})
		if !slices.Equal(whole, split) {
			t.Errorf("split into pieces of %d: %+v, whole: %+v", piece%16+1, split, whole)
		}
	})
}

func newClient(tb testing.TB, s *Server) *qdrant.Client {
	tb.Helper()
	c, err := qdrant.NewClient(&qdrant.Config{Host: "127.0.0.1", Port: s.Port(), PoolSize: 1, SkipCompatibilityCheck: true, KeepAliveTime: -1})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

func startServer(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	s, err := Start(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

func createCollection(tb testing.TB, c *qdrant.Client, name string, dim uint64) {
	tb.Helper()
	err := c.CreateCollection(context.Background(), &qdrant.CreateCollection{CollectionName: name,
		VectorsConfig: qdrant.NewVectorsConfig(&qdrant.VectorParams{Size: dim, Distance: qdrant.Distance_Cosine})})
	if err != nil {
		tb.Fatal(err)
	}
}

func TestCreateCollectionValidates(t *testing.T) {
	s := startServer(t)
	c := newClient(t, s)
	createCollection(t, c, "taken", 4)
	tests := []struct {
		name string
		req  *qdrant.CreateCollection
	}{
		{"no name", &qdrant.CreateCollection{VectorsConfig: qdrant.NewVectorsConfig(&qdrant.VectorParams{Size: 4, Distance: qdrant.Distance_Cosine})}},
		{"no vectors", &qdrant.CreateCollection{CollectionName: "a"}},
		{"dot distance", &qdrant.CreateCollection{CollectionName: "a", VectorsConfig: qdrant.NewVectorsConfig(&qdrant.VectorParams{Size: 4, Distance: qdrant.Distance_Dot})}},
		{"zero size", &qdrant.CreateCollection{CollectionName: "a", VectorsConfig: qdrant.NewVectorsConfig(&qdrant.VectorParams{Size: 0, Distance: qdrant.Distance_Cosine})}},
		{"named vectors", &qdrant.CreateCollection{CollectionName: "a", VectorsConfig: qdrant.NewVectorsConfigMap(map[string]*qdrant.VectorParams{"v": {Size: 4, Distance: qdrant.Distance_Cosine}})}},
		{"exists", &qdrant.CreateCollection{CollectionName: "taken", VectorsConfig: qdrant.NewVectorsConfig(&qdrant.VectorParams{Size: 4, Distance: qdrant.Distance_Cosine})}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.CreateCollection(context.Background(), tt.req)
			if status.Code(errors.Unwrap(err)) != codes.InvalidArgument {
				t.Errorf("CreateCollection: %v, want InvalidArgument", err)
			}
		})
	}
	if names, err := c.ListCollections(context.Background()); err != nil || !slices.Equal(names, []string{"taken"}) {
		t.Errorf("ListCollections = %v, %v; want [taken]", names, err)
	}
}

// TestScrollPagesInIDOrder: numeric ids first in numeric order, then UUIDs, page by page.
func TestScrollPagesInIDOrder(t *testing.T) {
	s := startServer(t)
	c := newClient(t, s)
	createCollection(t, c, "docs", 2)
	var points []*qdrant.PointStruct
	var want []string
	for _, n := range []uint64{10, 2, 33, 1} {
		points = append(points, &qdrant.PointStruct{Id: qdrant.NewIDNum(n), Vectors: qdrant.NewVectors(1, float32(n))})
	}
	uuids := []string{"f0000000-0000-5000-8000-000000000000", "0a000000-0000-5000-8000-000000000000"}
	for _, u := range uuids {
		points = append(points, &qdrant.PointStruct{Id: qdrant.NewID(u), Vectors: qdrant.NewVectors(2, 1), Payload: qdrant.NewValueMap(map[string]any{"k": u})})
	}
	want = []string{"1", "2", "10", "33", uuids[1], uuids[0]}
	if _, err := c.Upsert(context.Background(), &qdrant.UpsertPoints{CollectionName: "docs", Points: points}); err != nil {
		t.Fatal(err)
	}
	var got []string
	var offset *qdrant.PointId
	limit := uint32(4)
	for pages := 0; pages < 10; pages++ {
		res, next, err := c.ScrollAndOffset(context.Background(), &qdrant.ScrollPoints{CollectionName: "docs", Limit: &limit, Offset: offset})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range res {
			if u := p.GetId().GetUuid(); u != "" {
				got = append(got, u)
				if p.GetPayload()["k"].GetStringValue() != u {
					t.Errorf("point %s lost its payload: %v", u, p.GetPayload())
				}
			} else {
				got = append(got, fmt.Sprint(p.GetId().GetNum()))
			}
		}
		if next == nil {
			break
		}
		offset = next
	}
	if !slices.Equal(got, want) {
		t.Errorf("scrolled %v, want %v", got, want)
	}
}

// TestStopRestartKeepsData: a restart on the same port serves the data held before the crash,
// and calls during the outage fail with Unavailable.
func TestStopRestartKeepsData(t *testing.T) {
	s := startServer(t, WithVersion("9.9.9"))
	c := newClient(t, s)
	createCollection(t, c, "docs", 2)
	if _, err := c.Upsert(context.Background(), &qdrant.UpsertPoints{CollectionName: "docs",
		Points: []*qdrant.PointStruct{{Id: qdrant.NewIDNum(1), Vectors: qdrant.NewVectors(1, 0)}}}); err != nil {
		t.Fatal(err)
	}
	addr := s.Addr()
	s.Stop()
	if s.Running() {
		t.Error("Running() after Stop")
	}
	if _, err := c.HealthCheck(context.Background()); status.Code(errors.Unwrap(err)) != codes.Unavailable {
		t.Errorf("HealthCheck with the server stopped: %v, want Unavailable", err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.Addr() != addr {
		t.Errorf("restarted on %s, want %s", s.Addr(), addr)
	}
	var reply *qdrant.HealthCheckReply
	deadline := time.Now().Add(5 * time.Second)
	for {
		var err error
		if reply, err = c.HealthCheck(context.Background()); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if reply.GetVersion() != "9.9.9" {
		t.Errorf("version after restart %q, want 9.9.9", reply.GetVersion())
	}
	if s.Points("docs") != 1 || s.Points("missing") != -1 {
		t.Errorf("points after restart: %d in docs, %d in a missing collection; want 1 and -1", s.Points("docs"), s.Points("missing"))
	}
	if err := s.Restart(); err == nil {
		t.Error("Restart of a running server succeeded")
	}
	st := s.Stats()
	if st.Connections < 2 || st.Calls["HealthCheck"] < 1 || st.Calls["Upsert"] != 1 {
		t.Errorf("stats %+v: want a reconnect, a health check and one upsert", st)
	}
}

func TestQueryHonoursLatencyAndOptions(t *testing.T) {
	s := startServer(t)
	c := newClient(t, s)
	createCollection(t, c, "docs", 2)
	var points []*qdrant.PointStruct
	for i := range 5 {
		points = append(points, &qdrant.PointStruct{Id: qdrant.NewIDNum(uint64(i)), Vectors: qdrant.NewVectors(1, float32(i)),
			Payload: qdrant.NewValueMap(map[string]any{"i": i, "other": "x"})})
	}
	if _, err := c.Upsert(context.Background(), &qdrant.UpsertPoints{CollectionName: "docs", Points: points}); err != nil {
		t.Fatal(err)
	}
	limit, offset := uint64(2), uint64(1)
	res, err := c.Query(context.Background(), &qdrant.QueryPoints{CollectionName: "docs", Query: qdrant.NewQuery(1, 0),
		Limit: &limit, Offset: &offset, WithPayload: qdrant.NewWithPayloadInclude("i")})
	if err != nil {
		t.Fatal(err)
	}
	// Cosine to (1,0) falls with i: the best is point 0, so offset 1 starts at point 1.
	if len(res) != 2 || res[0].GetId().GetNum() != 1 || res[1].GetId().GetNum() != 2 || len(res[0].GetPayload()) != 1 {
		t.Errorf("query with offset and include: %v", res)
	}
	if _, err := c.Query(context.Background(), &qdrant.QueryPoints{CollectionName: "docs", Query: qdrant.NewQuery(1, 0, 0)}); status.Code(errors.Unwrap(err)) != codes.InvalidArgument {
		t.Errorf("query of the wrong dimension: %v, want InvalidArgument", err)
	}
	s.SetQueryLatency(latency.Fixed(time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := c.Query(ctx, &qdrant.QueryPoints{CollectionName: "docs", Query: qdrant.NewQuery(1, 0)}); status.Code(errors.Unwrap(err)) != codes.DeadlineExceeded {
		t.Errorf("slow query past the deadline: %v, want DeadlineExceeded", err)
	}
}

// TestCollectionLatencyAndPadding: a collection's own law replaces the server-wide one for its
// queries only, and padded answers carry the padding on their first point.
func TestCollectionLatencyAndPadding(t *testing.T) {
	const padding = 100 << 10
	s := startServer(t, WithAnswerPadding(padding))
	c := newClient(t, s)
	for _, name := range []string{"slow", "fast"} {
		createCollection(t, c, name, 2)
		if _, err := c.Upsert(context.Background(), &qdrant.UpsertPoints{CollectionName: name, Points: []*qdrant.PointStruct{
			{Id: qdrant.NewIDNum(1), Vectors: qdrant.NewVectors(1, 0), Payload: qdrant.NewValueMap(map[string]any{"chunk_id": "a"})},
			{Id: qdrant.NewIDNum(2), Vectors: qdrant.NewVectors(0, 1), Payload: qdrant.NewValueMap(map[string]any{"chunk_id": "b"})},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	s.SetCollectionLatency("slow", latency.Fixed(time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := c.Query(ctx, &qdrant.QueryPoints{CollectionName: "slow", Query: qdrant.NewQuery(1, 0)}); status.Code(errors.Unwrap(err)) != codes.DeadlineExceeded {
		t.Errorf("query of the slow collection: %v, want DeadlineExceeded", err)
	}
	res, err := c.Query(context.Background(), &qdrant.QueryPoints{CollectionName: "fast", Query: qdrant.NewQuery(1, 0),
		WithPayload: qdrant.NewWithPayloadInclude("chunk_id")})
	if err != nil {
		t.Fatalf("query of the other collection: %v", err)
	}
	if len(res) != 2 {
		t.Fatalf("%d points, want 2", len(res))
	}
	if pad := res[0].GetPayload()[PaddingField].GetStringValue(); len(pad) != padding {
		t.Errorf("first point's padding is %d bytes, want %d", len(pad), padding)
	}
	if _, ok := res[1].GetPayload()[PaddingField]; ok || res[0].GetPayload()["chunk_id"].GetStringValue() != "a" {
		t.Errorf("payloads %v, %v: want the selection kept and the padding on the first point only", res[0].GetPayload()["chunk_id"], res[1].GetPayload())
	}
}
