// Command inflightmem measures what the load generator holds per request in flight. It starts
// a trivial HTTP server in a child process (so that the server's memory is not counted), which
// answers "ok" and stalls once, long enough for the open loop to fill the cap on requests in
// flight; it then runs the generator's open loop against it, as bench does, and reports the peak
// RSS and the heap and stack memory in use when the most requests were in flight.
//
//	go run ./tools/inflightmem -rate 10000 -n 100000 -stall 150ms [-http-client net/http]
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ragtail/ragtail/loadgen"
	"github.com/ragtail/ragtail/loadgen/client"
	"github.com/ragtail/ragtail/loadgen/shape"
)

func main() {
	serve := flag.Bool("serve", false, "run as the stalling server (used by the measurement itself)")
	rate := flag.Float64("rate", 10000, "requests per second, constant")
	n := flag.Int("n", 100000, "requests to send")
	stall := flag.Duration("stall", 150*time.Millisecond, "how long the server stalls once (0: never)")
	stallAt := flag.Int("stall-at", 20000, "the request the server stalls at")
	httpClient := flag.String("http-client", client.HTTPClientH1, "the client's HTTP transport: h1 or net/http")
	profile := flag.String("profile", "", "write heap and goroutine profiles to PREFIX.heap and PREFIX.goroutine when the most requests are in flight")
	flag.Parse()
	if *profile != "" {
		runtime.MemProfileRate = 512 // every object in flight shows in the heap profile
	}
	var err error
	if *serve {
		err = runServer(*stall, *stallAt)
	} else {
		err = measure(*rate, *n, *stall, *stallAt, *httpClient, *profile)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "inflightmem:", err)
		os.Exit(1)
	}
}

// runServer answers every request with "ok"; request number stallAt (and all that arrive while
// it waits) waits for stall first. It prints its address and serves until stdin closes.
func runServer(stall time.Duration, stallAt int) error {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	var count atomic.Int64
	var once sync.Once
	stalled := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if stall > 0 && count.Add(1) >= int64(stallAt) {
			once.Do(func() { time.AfterFunc(stall, func() { close(stalled) }) })
			<-stalled
		}
		_, _ = io.WriteString(w, "ok")
	})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); _ = srv.Close() }()
	fmt.Println(ln.Addr().String())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// startServer starts the server as a child process and returns its URL.
func startServer(stall time.Duration, stallAt int) (string, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.CommandContext(context.Background(), self, "-serve", "-stall", stall.String(), "-stall-at", strconv.Itoa(stallAt))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start server: %w", err)
	}
	stop := func() { _ = in.Close(); _ = cmd.Wait() }
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("read server address: %w", err)
	}
	return "http://" + strings.TrimSpace(addr), stop, nil
}

// counting counts the requests in flight.
type counting struct {
	d      loadgen.Doer
	now    atomic.Int64
	maxNow atomic.Int64
}

func (c *counting) Do(ctx context.Context, req *loadgen.Request, origin time.Time, rec *loadgen.Record) {
	n := c.now.Add(1)
	for m := c.maxNow.Load(); n > m && !c.maxNow.CompareAndSwap(m, n); m = c.maxNow.Load() {
	}
	c.d.Do(ctx, req, origin, rec)
	c.now.Add(-1)
}

type lookups struct{}

func (lookups) Next() loadgen.Request { return loadgen.Request{Path: "/"} }

// sample is the memory in use at one instant with inFlight requests in flight.
type sample struct {
	inFlight           int64
	heapInuse, stackIn uint64
	goroutines         int
}

func measure(rate float64, n int, stall time.Duration, stallAt int, httpClient, profile string) error {
	url, stop, err := startServer(stall, stallAt)
	if err != nil {
		return err
	}
	defer stop()
	c, err := client.New(url, client.WithMaxConns(loadgen.DefaultMaxInFlight()), client.WithHTTPClient(httpClient))
	if err != nil {
		return err
	}
	defer c.CloseIdleConnections()
	p, err := shape.Constant(rate)
	if err != nil {
		return err
	}
	cd := &counting{d: c}
	var base, peak sample
	var ok, failed atomic.Int64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		var ms runtime.MemStats
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			inFlight := cd.now.Load()
			runtime.ReadMemStats(&ms)
			s := sample{inFlight: inFlight, heapInuse: ms.HeapInuse, stackIn: ms.StackInuse, goroutines: runtime.NumGoroutine()}
			if s.inFlight > peak.inFlight {
				peak = s
				if profile != "" && s.inFlight >= int64(loadgen.DefaultMaxInFlight()) {
					writeProfiles(profile)
					profile = ""
				}
			}
			if peak.inFlight < 64 && s.inFlight < 64 {
				base = s // the last sample before the backlog
			}
		}
	}()
	start := time.Now()
	res, err := loadgen.Run(context.Background(), loadgen.Config{
		Workload: shape.Open(p, lookups{}), Client: cd, NumItems: n,
		Stream: func(recs []loadgen.Record) {
			for i := range recs {
				if recs[i].OK() {
					ok.Add(1)
				} else {
					failed.Add(1)
				}
			}
		},
	})
	close(done)
	<-sampled
	if err != nil {
		return err
	}
	wall := time.Since(start)
	hwm, err := peakRSS()
	if err != nil {
		return err
	}
	fmt.Printf("http client %s\n", c.HTTPClient())
	fmt.Printf("requests %d in %.1f s: %d ok, %d failed, %d waited for the cap of %d\n",
		n, wall.Seconds(), ok.Load(), failed.Load(), res.SlotWaits, res.Config.InFlightCap)
	fmt.Printf("peak RSS %.1f MB\n", float64(hwm)/1e6)
	fmt.Printf("most in flight: %d, heap in use %.1f MB, stacks %.1f MB, %d goroutines\n",
		peak.inFlight, mb(peak.heapInuse), mb(peak.stackIn), peak.goroutines)
	// The figure per request needs a backlog much larger than the requests in flight before it.
	if d := peak.inFlight - base.inFlight; d >= 256 {
		fmt.Printf("before the backlog: %d in flight, heap in use %.1f MB, stacks %.1f MB, %d goroutines\n",
			base.inFlight, mb(base.heapInuse), mb(base.stackIn), base.goroutines)
		fmt.Printf("per request in flight: heap %.1f KB, stacks %.1f KB, %.2f goroutines\n",
			float64(int64(peak.heapInuse)-int64(base.heapInuse))/float64(d)/1024,
			float64(int64(peak.stackIn)-int64(base.stackIn))/float64(d)/1024,
			float64(peak.goroutines-base.goroutines)/float64(d))
	}
	return nil
}

func mb(b uint64) float64 { return float64(b) / 1e6 }

// peakRSS reads the process's peak resident set size (VmHWM) from /proc/self/status.
func peakRSS() (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("peak RSS: %w", err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("peak RSS: %w", err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("peak RSS: no VmHWM in /proc/self/status")
}

// writeProfiles writes the heap and goroutine profiles to prefix.heap and prefix.goroutine.
func writeProfiles(prefix string) {
	runtime.GC() // the heap profile shows the heap as of the last collection
	for _, name := range []string{"heap", "goroutine"} {
		f, err := os.Create(prefix + "." + name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "inflightmem:", err)
			return
		}
		if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
			fmt.Fprintln(os.Stderr, "inflightmem:", err)
		}
		_ = f.Close()
	}
}
