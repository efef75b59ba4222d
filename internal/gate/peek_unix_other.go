//go:build unix && !aix && !linux

package gate

import (
	"errors"
	"syscall"
)

// peek is one non-blocking MSG_PEEK of the socket fd; it reports the call's errno (EAGAIN: nothing to
// read, and the peer has not closed).
func peek(fd uintptr) syscall.Errno {
	var b [1]byte
	_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	var errno syscall.Errno
	errors.As(err, &errno)
	return errno
}
