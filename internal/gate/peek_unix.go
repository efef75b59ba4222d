//go:build unix && !aix

package gate

import (
	"errors"
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
	var peek [1]byte
	if err := raw.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), peek[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		quiet = n < 0 && errors.Is(err, syscall.EAGAIN)
		return true
	}); err != nil {
		return false
	}
	return quiet
}
