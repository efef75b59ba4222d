package gate

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// directConn is a TCP connection whose reads and writes are made as raw system calls, without the Go
// scheduler's bookkeeping for a call that may block.
//
// A net.TCPConn's Read and Write go through syscall.Read and syscall.Write, which tell the scheduler a
// system call is under way (entersyscall): the call wakes the runtime's monitor thread if it sleeps, and
// the monitor, back on a 20 µs poll, takes the processor away from a call that lasts two of its polls
// and hands it to another thread. The agent runs Go code on one thread, idles between requests, and
// makes about five such calls a request, each a few tens of microseconds on a virtual machine's
// loopback; measured, two of every three of its context switches a request and a third of its CPU
// were that bookkeeping (docs/performance.md). The sockets are non-blocking, as every socket of Go's
// network poller is, so these calls never block and the bookkeeping buys nothing: a call that would
// block returns EAGAIN, and the connection then waits for the poller as a TCPConn does, with its
// deadlines. Everything else (deadlines, Close, CloseWrite, SyscallConn) is the TCPConn's own.
type directConn struct {
	*net.TCPConn
	raw syscall.RawConn
}

// direct makes c's reads and writes direct when it is a TCP connection, and returns it as it is
// otherwise.
func direct(c net.Conn) net.Conn {
	tcp, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		return c
	}
	return &directConn{TCPConn: tcp, raw: raw}
}

// Read reads as TCPConn.Read does: EOF when the peer closed its side, errors as *net.OpError with Op
// "read".
func (c *directConn) Read(b []byte) (int, error) {
	var n uintptr
	var errno syscall.Errno
	err := c.raw.Read(func(fd uintptr) bool {
		if len(b) == 0 {
			return true // as TCPConn: no read, but only once the connection is known open
		}
		for {
			n, _, errno = syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
			if errno != syscall.EINTR {
				return errno != syscall.EAGAIN
			}
		}
	})
	switch {
	case err != nil:
		return 0, c.opError("read", err)
	case errno != 0:
		return 0, c.opError("read", os.NewSyscallError("read", errno))
	case len(b) == 0:
		return 0, nil
	case n == 0:
		return 0, io.EOF
	}
	return int(n), nil
}

// Write writes all of b as TCPConn.Write does, waiting for the socket to drain when it is full.
func (c *directConn) Write(b []byte) (int, error) {
	written := 0
	var errno syscall.Errno
	stalled := false
	err := c.raw.Write(func(fd uintptr) bool {
		for written < len(b) {
			n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[written])), uintptr(len(b)-written))
			switch e {
			case 0:
				if n == 0 {
					stalled = true // a socket does not do this; TCPConn gives up rather than spin
					return true
				}
				written += int(n)
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false
			default:
				errno = e
				return true
			}
		}
		return true
	})
	switch {
	case err != nil:
		return written, c.opError("write", err)
	case errno != 0:
		return written, c.opError("write", os.NewSyscallError("write", errno))
	case stalled:
		return written, c.opError("write", io.ErrUnexpectedEOF)
	}
	return written, nil
}

// opError is err as TCPConn reports it: the RawConn's own errors (a deadline, a closed connection) come
// as *net.OpError of the raw operation, renamed here to op.
func (c *directConn) opError(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok {
		copied := *oe
		copied.Op = op
		return &copied
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// peek is one non-blocking MSG_PEEK of the socket fd, a raw system call for the reason directConn
// gives; it reports the call's errno (EAGAIN: nothing to read, and the peer has not closed).
func peek(fd uintptr) syscall.Errno {
	var b [1]byte
	_, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1, syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	return errno
}
