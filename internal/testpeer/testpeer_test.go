package testpeer

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// reachable reports whether something accepts TCP connections on addr.
func reachable(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func TestPostgresKillAndRestart(t *testing.T) {
	t.Parallel()
	pg := StartPostgres(t)
	if !reachable(pg.Addr) {
		t.Fatalf("postgres on %s does not accept connections after start", pg.Addr)
	}
	pg.Kill()
	if reachable(pg.Addr) {
		t.Fatalf("postgres on %s still accepts connections after Kill", pg.Addr)
	}
	pg.Restart()
	if !reachable(pg.Addr) {
		t.Fatalf("postgres on %s does not accept connections after Restart", pg.Addr)
	}
}

func TestRedisKillPauseAndRestart(t *testing.T) {
	t.Parallel()
	r := StartRedis(t)
	if err := ping(r.Addr); err != nil {
		t.Fatalf("PING after start: %v", err)
	}
	r.Pause()
	if err := ping(r.Addr); err == nil {
		t.Fatal("PING answered while paused")
	}
	r.Resume()
	if err := ping(r.Addr); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
	r.Kill()
	if reachable(r.Addr) {
		t.Fatalf("redis on %s still accepts connections after Kill", r.Addr)
	}
	r.Restart()
	if err := ping(r.Addr); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
}

// TestMissingServerSaysWhatToInstall: on a machine without the Debian packages, the error
// names what is missing and the apt-get line that installs it (not a bare "executable file not
// found"). It empties PATH, so it does not run in parallel.
func TestMissingServerSaysWhatToInstall(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := findPostgres(filepath.Join(t.TempDir(), "*", "bin"))
	if err == nil || !strings.Contains(err.Error(), "needs PostgreSQL") || !strings.Contains(err.Error(), "apt-get install -y postgresql") {
		t.Errorf("PostgreSQL missing: %v; want what is missing and the apt-get line", err)
	}
	_, err = findRedis()
	if err == nil || !strings.Contains(err.Error(), "needs Redis") || !strings.Contains(err.Error(), "apt-get install -y redis-server") {
		t.Errorf("Redis missing: %v; want what is missing and the apt-get line", err)
	}
}

// TestFindPostgresInDebianDirs: without pg_ctl on the PATH, the newest version under Debian's
// directory is found.
func TestFindPostgresInDebianDirs(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	root := t.TempDir()
	for _, v := range []string{"9", "15", "17"} {
		dir := filepath.Join(root, v, "bin")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if v != "17" { // 17 is installed only in part
			if err := os.WriteFile(filepath.Join(dir, "pg_ctl"), nil, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := findPostgres(filepath.Join(root, "*", "bin"))
	if want := filepath.Join(root, "15", "bin"); err != nil || got != want {
		t.Errorf("findPostgres = %q, %v; want %q", got, err, want)
	}
}
