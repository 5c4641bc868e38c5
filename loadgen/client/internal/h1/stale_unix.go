//go:build unix

package h1

import (
	"errors"
	"syscall"
)

// stale reports whether the idle connection c is unfit for a request: the server closed or
// reset it, or bytes arrived on it that no request asked for (returned, at most maxStray of
// them). It reads from the descriptor without blocking: nothing to read is the only answer
// that keeps the connection. It allocates nothing unless the connection is stale.
func (c *conn) stale() (stray []byte, dead bool) {
	if c.raw == nil {
		return nil, false
	}
	if err := c.raw.Control(c.peekFn); err != nil {
		return nil, true
	}
	switch {
	case c.peekN > 0:
		return c.readStray(), true
	case errors.Is(c.peekErr, syscall.EAGAIN):
		return nil, false // nothing arrived: the connection is as the last response left it
	default:
		return nil, true // EOF (no error, no byte) or an error such as a reset
	}
}

// peek reads one byte from fd without blocking (the runtime keeps sockets non-blocking); it is
// the function given to RawConn.Control, kept in c so that passing it allocates nothing.
func (c *conn) peek(fd uintptr) {
	for {
		c.peekN, c.peekErr = syscall.Read(int(fd), c.peekBuf[:])
		if !errors.Is(c.peekErr, syscall.EINTR) {
			return
		}
	}
}

// readStray returns the byte peek read and whatever else is there at once, up to maxStray
// bytes, for the log line.
func (c *conn) readStray() []byte {
	buf := make([]byte, maxStray)
	buf[0] = c.peekBuf[0]
	n := 1
	_ = c.raw.Control(func(fd uintptr) {
		if m, err := syscall.Read(int(fd), buf[1:]); err == nil && m > 0 {
			n += m
		}
	})
	return buf[:n]
}
