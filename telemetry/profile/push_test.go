package profile

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grafana/pyroscope-go/upstream"
)

// ingest is one push a pyroscopeStub received.
type ingest struct {
	path, name, spyName, units string
	from, until                time.Time
	profile, sampleTypeConfig  []byte
	user, password, tenant     string
	status                     int
}

// pyroscopeStub speaks the server side of pyroscope-go's push protocol (POST /ingest, the profile
// in a multipart form, the window in the query): it answers status, or, while hung, holds every
// request until the client gives up.
type pyroscopeStub struct {
	mu      sync.Mutex
	status  int
	hung    bool
	ingests []ingest
	release chan struct{}
}

func newPyroscopeStub(tb testing.TB) (*pyroscopeStub, *httptest.Server) {
	tb.Helper()
	stub := &pyroscopeStub{status: http.StatusOK, release: make(chan struct{})}
	srv := httptest.NewServer(stub)
	tb.Cleanup(func() {
		close(stub.release)
		srv.Close()
	})
	return stub, srv
}

func (s *pyroscopeStub) set(status int, hung bool) {
	s.mu.Lock()
	s.status, s.hung = status, hung
	s.mu.Unlock()
}

func (s *pyroscopeStub) received() []ingest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ingest(nil), s.ingests...)
}

func (s *pyroscopeStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	status, hung := s.status, s.hung
	s.mu.Unlock()
	if hung {
		select {
		case <-r.Context().Done():
		case <-s.release:
		}
		return
	}
	in := ingest{path: r.URL.Path, status: status, tenant: r.Header.Get("X-Scope-OrgID")}
	in.user, in.password, _ = r.BasicAuth()
	q := r.URL.Query()
	in.name, in.spyName, in.units = q.Get("name"), q.Get("spyName"), q.Get("units")
	from, err1 := strconv.ParseInt(q.Get("from"), 10, 64)
	until, err2 := strconv.ParseInt(q.Get("until"), 10, 64)
	if r.Method != http.MethodPost || err1 != nil || err2 != nil {
		http.Error(w, "want POST with from and until in unix nanoseconds", http.StatusBadRequest)
		return
	}
	in.from, in.until = time.Unix(0, from), time.Unix(0, until)
	if err := r.ParseMultipartForm(32 << 20); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	for field, dst := range map[string]*[]byte{"profile": &in.profile, "sample_type_config": &in.sampleTypeConfig} {
		f, _, err := r.FormFile(field)
		if err != nil {
			continue
		}
		*dst, _ = io.ReadAll(f)
		f.Close()
	}
	if in.profile == nil {
		http.Error(w, "no profile part", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.ingests = append(s.ingests, in)
	s.mu.Unlock()
	w.WriteHeader(status)
}

func testJob(i int) *upstream.UploadJob {
	from := t0.Add(time.Duration(i) * time.Second)
	return &upstream.UploadJob{
		Name: "ragtail{service_name=ragtail}", StartTime: from, EndTime: from.Add(time.Second),
		SpyName: "gospy", SampleRate: 100, Units: "samples", AggregationType: "sum",
		Format: upstream.FormatPprof, Profile: []byte(fmt.Sprintf("profile %d", i)),
	}
}

// noGoroutine waits up to two seconds for every goroutine whose stack holds one of funcs to end.
func noGoroutine(tb testing.TB, funcs ...string) {
	tb.Helper()
	var stacks string
	ok := waitFor(tb, 2*time.Second, func() bool {
		var buf bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&buf, 2)
		stacks = buf.String()
		for _, f := range funcs {
			if strings.Contains(stacks, f) {
				return false
			}
		}
		return true
	})
	if !ok {
		tb.Errorf("goroutines left running:\n%s", stacks)
	}
}

func TestPusherIngestProtocol(t *testing.T) {
	stub, srv := newPyroscopeStub(t)
	logs := &logRecorder{}
	p, err := newPusher(srv.URL+"/base", "user", "secret", "tenant-1", 4, 5*time.Second, slog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	heap := testJob(1)
	heap.SampleTypeConfig = map[string]*upstream.SampleType{"alloc_space": {Units: "bytes"}}
	p.enqueue(testJob(0))
	p.enqueue(heap)
	if !waitFor(t, 5*time.Second, func() bool { return p.stats().Pushed == 2 }) {
		t.Fatalf("stats %+v, log:\n%s", p.stats(), logs.dump(slog.LevelDebug))
	}
	p.stop(time.Second)
	got := stub.received()
	if len(got) != 2 {
		t.Fatalf("%d ingests", len(got))
	}
	for i, in := range got {
		job := testJob(i)
		if in.path != "/base/ingest" || in.name != job.Name || in.spyName != "gospy" || in.units != "samples" ||
			!in.from.Equal(job.StartTime) || !in.until.Equal(job.EndTime) || !bytes.Equal(in.profile, job.Profile) {
			t.Errorf("ingest %d: %+v", i, in)
		}
		if in.user != "user" || in.password != "secret" || in.tenant != "tenant-1" {
			t.Errorf("ingest %d auth: %q %q tenant %q", i, in.user, in.password, in.tenant)
		}
	}
	if !strings.Contains(string(got[1].sampleTypeConfig), `"alloc_space":{"units":"bytes"}`) {
		t.Errorf("sample type config %q", got[1].sampleTypeConfig)
	}
	if n := logs.count(slog.LevelInfo, ""); n != 0 {
		t.Errorf("%d log lines on a healthy push:\n%s", n, logs.dump(slog.LevelInfo))
	}
	noGoroutine(t, "(*pusher).forward", "(*Remote).handleJobs")
}

// TestPusherOutage checks that a Pyroscope answering 500, or hanging, never blocks the caller,
// keeps memory to the queue, and logs one line for the outage and one for the recovery.
func TestPusherOutage(t *testing.T) {
	tests := []struct {
		name   string
		status int
		hung   bool
	}{
		{"answers 500", http.StatusInternalServerError, false},
		{"hangs", 0, true},
	}
	const jobs, queue = 30, 4
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stub, srv := newPyroscopeStub(t)
			stub.set(tt.status, tt.hung)
			logs := &logRecorder{}
			p, err := newPusher(srv.URL, "", "", "", queue, 300*time.Millisecond, slog.New(logs))
			if err != nil {
				t.Fatal(err)
			}
			// All enqueues return at once although the server has answered nothing useful; a
			// blocking enqueue would hold this loop past the deadline below.
			enqueued := make(chan struct{})
			go func() {
				defer close(enqueued)
				for i := range jobs {
					p.enqueue(testJob(i))
				}
			}()
			timer := time.NewTimer(5 * time.Second)
			select {
			case <-enqueued:
				timer.Stop()
			case <-timer.C:
				t.Fatal("enqueue blocked on a failing pyroscope")
			}
			// At most the queue and the job in flight can wait: the rest already failed or was
			// dropped.
			if st := p.stats(); st.Failed+st.Dropped < jobs-queue-1 || !st.Failing {
				t.Errorf("right after enqueueing: %+v, want at least %d failed or dropped, and failing", st, jobs-queue-1)
			}
			if !waitFor(t, 10*time.Second, func() bool { st := p.stats(); return st.Failed+st.Dropped == jobs }) {
				t.Fatalf("not every job accounted for: %+v", p.stats())
			}
			if st := p.stats(); st.Failed < 1 || st.Pushed != 0 {
				t.Errorf("stats %+v", st)
			}
			if n := logs.count(slog.LevelWarn, "push to pyroscope failing"); n != 1 {
				t.Errorf("%d outage lines, want 1:\n%s", n, logs.dump(slog.LevelDebug))
			}

			stub.set(http.StatusOK, false)
			p.enqueue(testJob(jobs))
			if !waitFor(t, 5*time.Second, func() bool { return p.stats().Pushed == 1 }) {
				t.Fatalf("no push after recovery: %+v", p.stats())
			}
			if st := p.stats(); st.Failing {
				t.Errorf("still failing after a push: %+v", st)
			}
			if n := logs.count(slog.LevelInfo, "recovered"); n != 1 {
				t.Errorf("%d recovery lines, want 1:\n%s", n, logs.dump(slog.LevelDebug))
			}
			if n := logs.count(slog.LevelInfo, ""); n != 2 {
				t.Errorf("%d log lines for one outage, want 2:\n%s", n, logs.dump(slog.LevelInfo))
			}
			p.stop(time.Second)
			noGoroutine(t, "(*pusher).forward", "(*Remote).handleJobs")
		})
	}
}

// TestPusherStopAbandons checks that stop returns once its drain deadline passes although the
// server hangs, and counts what it abandoned.
func TestPusherStopAbandons(t *testing.T) {
	stub, srv := newPyroscopeStub(t)
	stub.set(0, true)
	p, err := newPusher(srv.URL, "", "", "", 8, time.Minute, slog.New(&logRecorder{}))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		p.enqueue(testJob(i))
	}
	stopped := make(chan struct{})
	go func() {
		p.stop(100 * time.Millisecond)
		close(stopped)
	}()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case <-stopped:
	case <-timer.C:
		t.Fatal("stop waited for a hanging server past its drain deadline")
	}
	if st := p.stats(); st.Pushed != 0 || st.Failed+st.Dropped != 5 {
		t.Errorf("stats %+v, want all 5 failed or dropped", st)
	}
	p.enqueue(testJob(5)) // after stop: dropped, no panic on the closed queue
	if st := p.stats(); st.Failed+st.Dropped != 6 {
		t.Errorf("enqueue after stop not counted: %+v", st)
	}
	noGoroutine(t, "(*pusher).forward", "(*Remote).handleJobs")
}

func TestPusherBadAddress(t *testing.T) {
	for _, addr := range []string{"localhost:4040", "ftp://pyroscope:4040", "http://", "http://%zz"} {
		t.Run(addr, func(t *testing.T) {
			if p, err := newPusher(addr, "", "", "", 1, time.Second, slog.Default()); err == nil {
				p.stop(0)
				t.Fatal("accepted")
			}
		})
	}
}
