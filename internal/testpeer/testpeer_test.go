package testpeer

import (
	"net"
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
