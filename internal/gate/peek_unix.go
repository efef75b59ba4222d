//go:build unix

package gate

import (
	"errors"
	"syscall"
)

// open reports whether the app has not closed c while it was free (an app's keep-alive timeout, a
// restart): one non-blocking peek, so a request is never written to a connection that is gone.
func (c *upstreamConn) open() bool {
	if c.r.Buffered() > 0 {
		return false // the app said something unasked: the connection is out of step
	}
	raw, err := c.Conn.(syscall.Conn).SyscallConn()
	if err != nil {
		return false
	}
	open := false
	var peek [1]byte
	if err := raw.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), peek[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = n < 0 && errors.Is(err, syscall.EAGAIN)
		return true
	}); err != nil {
		return false
	}
	return open
}
