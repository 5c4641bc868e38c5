//go:build !unix

package h1

// stale reports whether the idle connection c is unfit for a request. Off Unix there is no
// check: a connection the server closed shows when its write or read fails.
func (c *conn) stale() (stray []byte, dead bool) { return nil, false }

// peek is not used off Unix.
func (c *conn) peek(uintptr) {}
