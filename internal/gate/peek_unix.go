//go:build unix && !aix

package gate

import (
	"net"
	"syscall"
)

// quiet reports whether the app has neither sent anything on conn nor closed it: one non-blocking
// MSG_PEEK of its socket, which finds nothing to read. A conn without a socket cannot be peeked at and
// counts as quiet.
func quiet(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	quiet := false
	if err := raw.Read(func(fd uintptr) bool {
		quiet = peek(fd) == syscall.EAGAIN
		return true
	}); err != nil {
		return false
	}
	return quiet
}
