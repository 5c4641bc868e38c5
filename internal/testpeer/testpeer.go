// Package testpeer starts real servers from Debian packages for tests: PostgreSQL (package
// postgresql) and Redis (package redis-server), each in its own temporary directory, listening
// on loopback on a free port, and stopped when the test ends. Each peer can be killed and
// restarted on the same port, so tests can watch a client fail while its backend is down and
// recover when it comes back.
//
// A missing server binary fails the test with the apt-get command that installs it: CI installs
// the packages (.ci/run), so a test that needs a peer never skips.
package testpeer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds how long a server may take to accept connections.
const startTimeout = 30 * time.Second

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Postgres is a PostgreSQL server run by a test.
type Postgres struct {
	// DSN is the connection string of the server's postgres database, as user postgres with
	// trust authentication over TCP on loopback.
	DSN string
	// Addr is the server's host:port.
	Addr string

	tb      testing.TB
	bin     string   // directory of pg_ctl and friends
	dir     string   // owned by the server's user: data/, the socket, the log
	asUser  []string // command prefix running as the postgres user, empty when not root
	port    int
	mu      sync.Mutex
	running bool
}

// debianPostgresBin is where Debian's postgresql package puts initdb and pg_ctl, one directory
// per major version.
const debianPostgresBin = "/usr/lib/postgresql/*/bin"

// postgresBin finds the directory holding initdb and pg_ctl, or fails tb saying how to get them.
func postgresBin(tb testing.TB) string {
	tb.Helper()
	dir, err := findPostgres(debianPostgresBin)
	if err != nil {
		tb.Fatal(err)
	}
	return dir
}

// findPostgres finds the directory holding initdb and pg_ctl: on the PATH, or in the
// directories glob matches (Debian's VERSION/bin, newest version first).
func findPostgres(glob string) (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if _, err := exec.LookPath("initdb"); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob(glob)
	slices.SortFunc(dirs, func(a, b string) int { return versionOf(b) - versionOf(a) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("this test needs PostgreSQL, which is not installed (no pg_ctl and initdb on the PATH or in %s): "+
		"sudo apt-get install -y postgresql (make test-deps lists everything make test needs)", glob)
}

// findRedis finds redis-server on the PATH.
func findRedis() (string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", errors.New("this test needs Redis, which is not installed (no redis-server on the PATH): " +
			"sudo apt-get install -y redis-server (make test-deps lists everything make test needs)")
	}
	return bin, nil
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// StartPostgres initialises a database cluster in a fresh temporary directory and starts
// PostgreSQL on 127.0.0.1 on a free port, without fsync (a killed server still keeps every
// committed row, since the kernel holds the WAL; only a machine crash would lose it). PostgreSQL refuses to run as root, so as root it runs as the postgres user
// (created by the Debian package) through runuser. The server is stopped and its directory
// removed when the test ends.
func StartPostgres(tb testing.TB) *Postgres {
	tb.Helper()
	p := &Postgres{tb: tb, bin: postgresBin(tb), port: FreePort(tb)}
	dir, err := os.MkdirTemp("", "ragtail-pg-*")
	if err != nil {
		tb.Fatalf("postgres temp dir: %v", err)
	}
	p.dir = dir
	tb.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			tb.Fatalf("PostgreSQL refuses to run as root and there is no postgres user to run it as (%v): "+
				"sudo apt-get install -y postgresql creates it", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			tb.Fatalf("postgres temp dir: %v", err)
		}
		runuser, err := exec.LookPath("runuser")
		if err != nil {
			tb.Fatalf("running PostgreSQL as the postgres user needs runuser: apt-get install -y util-linux (%v)", err)
		}
		p.asUser = []string{runuser, "-u", "postgres", "--"}
	}
	p.run("initdb", "-D", p.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions")
	for range startAttempts {
		if err = p.start(); !portTaken(err) {
			break
		}
		p.port = FreePort(tb)
	}
	if err != nil {
		tb.Fatal(err)
	}
	p.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port))
	p.DSN = fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", p.Addr)
	tb.Cleanup(func() { p.stop("fast") })
	return p
}

func (p *Postgres) data() string { return filepath.Join(p.dir, "data") }

// run runs one PostgreSQL program as the server's user and fails the test if it fails.
func (p *Postgres) run(prog string, args ...string) {
	p.tb.Helper()
	if err := p.try(prog, args...); err != nil {
		p.tb.Fatal(err)
	}
}

// try runs one PostgreSQL program as the server's user.
func (p *Postgres) try(prog string, args ...string) error {
	argv := append(append(slices.Clone(p.asUser), filepath.Join(p.bin, prog)), args...)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = p.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w\n%s\nserver log:\n%s", strings.Join(argv, " "), err, out, p.logTail())
	}
	return nil
}

// portTaken reports whether a server failed to start because its port was taken meanwhile.
func portTaken(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Address already in use")
}

// startAttempts is how many free ports a peer tries at its first start: the port FreePort
// found may be taken by another process before the server binds it.
const startAttempts = 5

func (p *Postgres) logTail() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "server.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Restart starts the server again on the same port and data directory and waits until it
// accepts connections. It does nothing if the server runs.
func (p *Postgres) Restart() {
	p.tb.Helper()
	if err := p.start(); err != nil {
		p.tb.Fatal(err)
	}
}

func (p *Postgres) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running {
		return nil
	}
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c fsync=off -c full_page_writes=off",
		p.port, p.dir)
	if err := p.try("pg_ctl", "-D", p.data(), "-l", filepath.Join(p.dir, "server.log"), "-o", opts, "-w", "-t", "30", "start"); err != nil {
		return err
	}
	p.running = true
	return nil
}

// Kill stops the server at once, as a crash would (pg_ctl's immediate mode: no checkpoint,
// connections cut). Restart brings it back.
func (p *Postgres) Kill() { p.tb.Helper(); p.stop("immediate") }

func (p *Postgres) stop(mode string) {
	p.tb.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running {
		return
	}
	p.run("pg_ctl", "-D", p.data(), "-m", mode, "-w", "-t", "30", "stop")
	p.running = false
}

// Redis is a Redis server run by a test.
type Redis struct {
	// URL is the server's address as a redis:// URL, database 0.
	URL string
	// Addr is the server's host:port.
	Addr string

	tb   testing.TB
	bin  string
	dir  string
	port int
	mu   sync.Mutex
	cmd  *exec.Cmd
	exit chan struct{}
}

// StartRedis starts redis-server on 127.0.0.1 on a free port, with persistence off and its
// working directory in a fresh temporary directory, and stops it when the test ends.
func StartRedis(tb testing.TB) *Redis {
	tb.Helper()
	bin, err := findRedis()
	if err != nil {
		tb.Fatal(err)
	}
	r := &Redis{tb: tb, bin: bin, dir: tb.TempDir()}
	tb.Cleanup(r.Kill)
	for range startAttempts {
		r.port = FreePort(tb)
		r.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port))
		if err = r.start(); !portTaken(err) {
			break
		}
	}
	if err != nil {
		tb.Fatal(err)
	}
	r.URL = "redis://" + r.Addr + "/0"
	return r
}

// Restart starts the server again on the same port and waits until it answers PING. It does
// nothing if the server runs.
func (r *Redis) Restart() {
	r.tb.Helper()
	if err := r.start(); err != nil {
		r.tb.Fatal(err)
	}
}

func (r *Redis) start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		return nil
	}
	cmd := exec.Command(r.bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(r.port), "--dir", r.dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", filepath.Join(r.dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	exit := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exit) }()
	r.cmd, r.exit = cmd, exit
	deadline := time.Now().Add(startTimeout)
	for {
		err := ping(r.Addr)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s did not answer PING within %v: %w\nlog:\n%s", r.Addr, startTimeout, err, r.logTail())
		}
		select {
		case <-exit:
			r.cmd = nil
			return fmt.Errorf("redis-server on %s exited at start\nlog:\n%s", r.Addr, r.logTail())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (r *Redis) logTail() string {
	b, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// Kill ends the server with SIGKILL, as a crash would, and waits for it to exit. Restart brings
// it back (empty: persistence is off).
func (r *Redis) Kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGCONT) // a paused process must be able to die
	_ = r.cmd.Process.Kill()
	<-r.exit
	r.cmd = nil
}

// Pause stops the server with SIGSTOP: connections stay open but nothing is answered, as with a
// server stuck in a long command or a swap storm. Resume continues it.
func (r *Redis) Pause() { r.signal(syscall.SIGSTOP) }

// Resume continues a paused server.
func (r *Redis) Resume() { r.signal(syscall.SIGCONT) }

func (r *Redis) signal(sig syscall.Signal) {
	r.tb.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		r.tb.Fatalf("redis-server on %s is not running", r.Addr)
	}
	if err := r.cmd.Process.Signal(sig); err != nil {
		r.tb.Fatalf("signal redis-server: %v", err)
	}
}
