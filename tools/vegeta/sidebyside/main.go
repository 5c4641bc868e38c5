// Command sidebyside measures ragtail's load generator and vegeta side by side on one machine,
// against the same trivial endpoint (served by this process on loopback: 200 and a 12-byte JSON
// body), in alternating phases so that a neighbour's load falls on both alike. It prints, from
// one run:
//
//   - CPU per request at a fixed rate (default 10,000 req/s): user + system time of the
//     generator's process over the requests it completed, and the ratio ragtail / vegeta,
//     ragtail with and without --save-detailed (vegeta always writes its results file);
//   - top rate: requests completed per second by 32 closed-loop users (ragtail --concurrency 32
//     without a rate; vegeta -rate 0 -workers 32 -max-workers 32), and the ratio;
//   - send lag at 2,000 req/s on a constant schedule: P50 and P99 of how late each request
//     went out. ragtail records it per request; vegeta's is reconstructed from its results
//     (timestamp against seq/rate, the attack's start taken from the least late request, so a
//     lower bound);
//   - peak RSS at the fixed rate: each generator's own (VmHWM, see run);
//   - with -net-http (the default), the same CPU, top-rate and send-lag rows for ragtail
//     --http-client net/http, its standard-library transport, in phases of their own.
//
// make bench builds vegeta from its Go module (this module's tool) and runs this.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	ragtail := flag.String("ragtail", "bin/ragtail", "the ragtail binary")
	vegeta := flag.String("vegeta", "bin/vegeta", "the vegeta binary")
	phase := flag.Duration("phase", 5*time.Second, "length of one phase")
	rounds := flag.Int("rounds", 2, "phases per generator and measurement, alternating")
	rate := flag.Float64("rate", 10000, "the fixed rate of the CPU measurement, req/s")
	lagRate := flag.Float64("lag-rate", 2000, "the rate of the send-lag measurement, req/s")
	users := flag.Int("users", 32, "closed-loop users of the top-rate measurement")
	netHTTP := flag.Bool("net-http", true, "add rows for ragtail with --http-client net/http (its standard-library transport)")
	flag.Parse()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`+"\n")
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	url := "http://" + ln.Addr().String()
	dir, err := os.MkdirTemp("", "sidebyside")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	h := &harness{ragtail: *ragtail, vegeta: *vegeta, url: url, dir: dir, phase: *phase}

	var oursCPU, oursDetailed, theirsCPU, oursTop, theirsTop measure
	var oursLag, theirsLag, stdLag []time.Duration
	var stdCPU, stdTop measure
	std := []string{"--http-client", "net/http"}
	for r := range *rounds {
		log.Printf("round %d of %d", r+1, *rounds)
		oursCPU.add(h.ragtailRun(false, "--request-rate", fmt.Sprint(*rate), "--shape", "constant"))
		theirsCPU.add(h.vegetaRun(*rate, 0))
		oursDetailed.add(h.ragtailRun(true, "--request-rate", fmt.Sprint(*rate), "--shape", "constant"))
		oursTop.add(h.ragtailRun(false, "--concurrency", fmt.Sprint(*users)))
		theirsTop.add(h.vegetaRun(0, *users))
		m := h.ragtailRun(true, "--request-rate", fmt.Sprint(*lagRate), "--shape", "constant")
		oursLag = append(oursLag, m.lags...)
		m = h.vegetaRun(*lagRate, 0)
		theirsLag = append(theirsLag, m.lags...)
		if *netHTTP {
			stdCPU.add(h.ragtailRun(false, append(std, "--request-rate", fmt.Sprint(*rate), "--shape", "constant")...))
			stdTop.add(h.ragtailRun(false, append(std, "--concurrency", fmt.Sprint(*users))...))
			m = h.ragtailRun(true, append(std, "--request-rate", fmt.Sprint(*lagRate), "--shape", "constant")...)
			stdLag = append(stdLag, m.lags...)
		}
	}
	slices.Sort(oursLag)
	slices.Sort(theirsLag)
	slices.Sort(stdLag)

	fmt.Printf("\nragtail vs vegeta v12.13.0, side by side on one machine (%d phases of %s each)\n", *rounds, *phase)
	fmt.Printf("%-44s %12s %12s %8s\n", "", "ragtail", "vegeta", "ratio")
	fmt.Printf("%-44s %12.1f %12.1f %8.2f\n", fmt.Sprintf("CPU per request at %g req/s (us)", *rate),
		oursCPU.cpuPerRequest(), theirsCPU.cpuPerRequest(), oursCPU.cpuPerRequest()/theirsCPU.cpuPerRequest())
	fmt.Printf("%-44s %12.1f %12.1f %8.2f\n", "  ragtail with --save-detailed (us)",
		oursDetailed.cpuPerRequest(), theirsCPU.cpuPerRequest(), oursDetailed.cpuPerRequest()/theirsCPU.cpuPerRequest())
	fmt.Printf("%-44s %12.0f %12.0f %8.2f\n", fmt.Sprintf("achieved rate at %g req/s (req/s)", *rate), oursCPU.rate(), theirsCPU.rate(), oursCPU.rate()/theirsCPU.rate())
	fmt.Printf("%-44s %12.0f %12.0f %8.2f\n", fmt.Sprintf("top rate, %d closed-loop users (req/s)", *users), oursTop.rate(), theirsTop.rate(), oursTop.rate()/theirsTop.rate())
	fmt.Printf("%-44s %12.3f %12.3f\n", fmt.Sprintf("send lag P50 at %g req/s (ms)", *lagRate), ms(quantile(oursLag, 0.5)), ms(quantile(theirsLag, 0.5)))
	fmt.Printf("%-44s %12.3f %12.3f\n", fmt.Sprintf("send lag P99 at %g req/s (ms)", *lagRate), ms(quantile(oursLag, 0.99)), ms(quantile(theirsLag, 0.99)))
	fmt.Printf("%-44s %12.1f %12.1f\n", "peak RSS at the fixed rate (MB)", oursCPU.peakMB(), theirsCPU.peakMB())
	fmt.Printf("%-44s %12.1f %12.1f\n", "  ragtail with --save-detailed (MB)", oursDetailed.peakMB(), theirsCPU.peakMB())
	if *netHTTP {
		fmt.Printf("ragtail --http-client net/http (its standard-library transport) against the same vegeta phases\n")
		fmt.Printf("%-44s %12.1f %12.1f %8.2f\n", fmt.Sprintf("CPU per request at %g req/s (us)", *rate),
			stdCPU.cpuPerRequest(), theirsCPU.cpuPerRequest(), stdCPU.cpuPerRequest()/theirsCPU.cpuPerRequest())
		fmt.Printf("%-44s %12.0f %12.0f %8.2f\n", fmt.Sprintf("top rate, %d closed-loop users (req/s)", *users), stdTop.rate(), theirsTop.rate(), stdTop.rate()/theirsTop.rate())
		fmt.Printf("%-44s %12.3f %12.3f\n", fmt.Sprintf("send lag P50 at %g req/s (ms)", *lagRate), ms(quantile(stdLag, 0.5)), ms(quantile(theirsLag, 0.5)))
		fmt.Printf("%-44s %12.3f %12.3f\n", fmt.Sprintf("send lag P99 at %g req/s (ms)", *lagRate), ms(quantile(stdLag, 0.99)), ms(quantile(theirsLag, 0.99)))
		fmt.Printf("%-44s %12.1f %12.1f\n", "peak RSS at the fixed rate (MB)", stdCPU.peakMB(), theirsCPU.peakMB())
	}
}

type harness struct {
	ragtail, vegeta, url, dir string
	phase                     time.Duration
}

// result is one phase of one generator.
type result struct {
	requests int
	elapsed  time.Duration
	cpu      time.Duration
	maxRSS   int64 // KB
	lags     []time.Duration
}

type measure struct {
	requests int
	elapsed  time.Duration
	cpu      time.Duration
	maxRSS   int64
}

func (m *measure) add(r result) {
	m.requests += r.requests
	m.elapsed += r.elapsed
	m.cpu += r.cpu
	m.maxRSS = max(m.maxRSS, r.maxRSS)
}

func (m *measure) cpuPerRequest() float64 { return float64(m.cpu) / 1e3 / float64(m.requests) }
func (m *measure) rate() float64          { return float64(m.requests) / m.elapsed.Seconds() }
func (m *measure) peakMB() float64        { return float64(m.maxRSS) / 1024 }

// Both generators run as child processes, so neither's CPU includes the endpoint's (served by
// this process). vegeta always encodes every result to its -output file; ragtail bench keeps
// only bounded summaries unless --save-detailed asks for a JSONL of every record, so the CPU
// row is given for ragtail both ways.

// run runs a command and returns its CPU time and its own peak RSS.
//
// The peak is the child's VmHWM, read from /proc while it runs: the ru_maxrss that wait4
// reports is no use here, because Go starts a child with vfork semantics (CLONE_VM), and Linux
// carries the peak of the address space the child had before exec, this process's own, into
// the child's ru_maxrss, so every child would report at least this process's peak (which holds
// the decoded results of the previous phases). VmHWM is the peak of the child's own address
// space; it never decreases, so the last reading before the exit misses at most the growth of
// the final poll period.
func run(name string, args ...string) (cpu time.Duration, maxRSS int64) {
	cmd := exec.Command(name, args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		log.Fatalf("%s: %v", name, err)
	}
	done := make(chan struct{})
	peak := make(chan int64)
	go func() { peak <- pollHWM(cmd.Process.Pid, done) }()
	err := cmd.Wait()
	close(done)
	maxRSS = <-peak
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			log.Fatalf("%s: %v", name, err)
		}
		log.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	if maxRSS == 0 {
		log.Fatalf("%s: no VmHWM read from /proc/%d/status", name, cmd.Process.Pid)
	}
	return cpu, maxRSS
}

// hwmPoll is how often pollHWM reads a child's peak RSS.
const hwmPoll = 5 * time.Millisecond

// pollHWM reads the VmHWM of process pid (KB) until done is closed, and returns the largest.
func pollHWM(pid int, done <-chan struct{}) int64 {
	path := fmt.Sprintf("/proc/%d/status", pid)
	var peak int64
	t := time.NewTicker(hwmPoll)
	defer t.Stop()
	for {
		if b, err := os.ReadFile(path); err == nil {
			peak = max(peak, statusKB(b, "VmHWM:"))
		}
		select {
		case <-done:
			return peak
		case <-t.C:
		}
	}
}

// statusKB returns the value in KB of a /proc/PID/status field ("VmHWM:   1234 kB"), 0 if absent.
func statusKB(status []byte, field string) int64 {
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err == nil {
				return kb
			}
		}
	}
	return 0
}

// ragtailRun runs ragtail bench for a phase (GETs of the endpoint, as vegeta sends), with
// --save-detailed when the lags of each request are wanted (vegeta always writes its results;
// ragtail bench keeps only its summary unless asked), without the server-metrics scrape vegeta has
// no counterpart of.
func (h *harness) ragtailRun(lags bool, args ...string) result {
	out := filepath.Join(h.dir, "ragtail.json")
	detailed := filepath.Join(h.dir, "ragtail.jsonl")
	all := append([]string{"bench", "--url", h.url, "--dataset", "keys:" + h.keysFile(), "--num-prompts", "0",
		"--duration", h.phase.String(), "--quiet", "--json", out, "--server-metrics", "off"}, args...)
	if lags {
		all = append(all, "--save-detailed", detailed)
	}
	cpu, rss := run(h.ragtail, all...)
	var r struct {
		Completed float64 `json:"completed"`
		Failed    float64 `json:"failed"`
		Duration  float64 `json:"duration_s"`
	}
	readJSON(out, &r)
	if r.Failed > 0.01*(r.Completed+r.Failed) {
		log.Fatalf("ragtail: %v of %v requests failed", r.Failed, r.Completed+r.Failed)
	}
	res := result{requests: int(r.Completed), elapsed: time.Duration(r.Duration * float64(time.Second)), cpu: cpu, maxRSS: rss}
	if !lags {
		return res
	}
	f, err := os.Open(detailed)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	sc.Scan() // the head
	for sc.Scan() {
		var rec struct {
			SendLagMS float64 `json:"send_lag_ms"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			log.Fatal(err)
		}
		res.lags = append(res.lags, time.Duration(rec.SendLagMS*float64(time.Millisecond)))
	}
	return res
}

// keysFile is the one key ragtail's key lookups ask for: GET /, as vegeta's target.
func (h *harness) keysFile() string {
	path := filepath.Join(h.dir, "keys.txt")
	if _, err := os.Stat(path); err != nil {
		if err := os.WriteFile(path, []byte("k\n"), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	return path
}

// vegetaRun runs vegeta attack for a phase at rate (0: as fast as users workers allow).
func (h *harness) vegetaRun(rate float64, users int) result {
	targets := filepath.Join(h.dir, "targets.txt")
	if err := os.WriteFile(targets, []byte("GET "+h.url+"/v1/documents/k\n"), 0o644); err != nil {
		log.Fatal(err)
	}
	bin := filepath.Join(h.dir, "vegeta.bin")
	args := []string{"attack", "-targets", targets, "-duration", h.phase.String(), "-output", bin, "-keepalive"}
	if rate > 0 {
		args = append(args, "-rate", fmt.Sprintf("%g/1s", rate))
	} else {
		args = append(args, "-rate", "0", "-workers", fmt.Sprint(users), "-max-workers", fmt.Sprint(users))
	}
	cpu, rss := run(h.vegeta, args...)
	enc := exec.Command(h.vegeta, "encode", "--to", "json", bin)
	out, err := enc.Output()
	if err != nil {
		log.Fatalf("vegeta encode: %v", err)
	}
	type vres struct {
		Seq       uint64    `json:"seq"`
		Code      int       `json:"code"`
		Timestamp time.Time `json:"timestamp"`
		Latency   int64     `json:"latency"`
	}
	var rs []vres
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		var v vres
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			log.Fatalf("vegeta encode: %v", err)
		}
		rs = append(rs, v)
	}
	res := result{cpu: cpu, maxRSS: rss}
	var first, last time.Time
	failed := 0
	for i, v := range rs {
		if v.Code != http.StatusOK {
			failed++
			continue
		}
		res.requests++
		end := v.Timestamp.Add(time.Duration(v.Latency))
		if i == 0 || v.Timestamp.Before(first) {
			first = v.Timestamp
		}
		if end.After(last) {
			last = end
		}
	}
	if failed > len(rs)/100 {
		log.Fatalf("vegeta: %d of %d requests failed", failed, len(rs))
	}
	res.elapsed = last.Sub(first)
	if rate > 0 {
		// Request seq is due (seq+1)/rate after the attack began; the beginning is taken from
		// the least late request.
		due := func(v vres) time.Duration { return time.Duration(float64(v.Seq+1) / rate * float64(time.Second)) }
		var began time.Time
		for i, v := range rs {
			if b := v.Timestamp.Add(-due(v)); i == 0 || b.Before(began) {
				began = b
			}
		}
		for _, v := range rs {
			res.lags = append(res.lags, v.Timestamp.Sub(began.Add(due(v))))
		}
	}
	return res
}

func readJSON(path string, v any) {
	b, err := os.ReadFile(path)
	if err != nil {
		log.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		log.Fatalf("%s: %v", path, err)
	}
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	k := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(k, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
