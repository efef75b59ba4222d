package gate

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// outcome is what a caller of net.Conn can observe of a read or write: how much, and what the error
// says to errors.Is, net.Error and *net.OpError.
type outcome struct {
	n                                 int
	data                              string
	eof, timeout, closed, reset, pipe bool
	// delivered: the peer received exactly what was written.
	delivered   bool
	op, syscall string
}

func observe(n int, data []byte, err error) outcome {
	o := outcome{n: n, data: string(data)}
	if err == nil {
		return o
	}
	o.eof = err == io.EOF
	var ne net.Error
	o.timeout = errors.As(err, &ne) && ne.Timeout() && errors.Is(err, os.ErrDeadlineExceeded)
	o.closed = errors.Is(err, net.ErrClosed)
	o.reset = errors.Is(err, syscall.ECONNRESET)
	o.pipe = errors.Is(err, syscall.EPIPE)
	var oe *net.OpError
	if errors.As(err, &oe) {
		o.op = oe.Op
	}
	var se *os.SyscallError
	if errors.As(err, &se) {
		o.syscall = se.Syscall
	}
	return o
}

// connPair is a loopback TCP connection: conn, made direct or not, and its peer.
func connPair(t *testing.T, makeDirect bool) (conn net.Conn, peer *net.TCPConn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	conn, err = net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	accepted, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if makeDirect {
		conn = direct(conn)
		if _, ok := conn.(*directConn); !ok {
			t.Fatalf("direct gave %T", conn)
		}
	}
	t.Cleanup(func() { conn.Close(); accepted.Close() })
	return conn, accepted.(*net.TCPConn)
}

// TestDirectConnBehavesAsTCPConn holds directConn to what net.TCPConn does, case by case, on real
// loopback sockets: the data, the counts, and every property of the errors that a caller (net/http, the
// forwarder) looks at.
func TestDirectConnBehavesAsTCPConn(t *testing.T) {
	big := bytes.Repeat([]byte("leasegate"), 1<<20) // 9 MiB: more than the socket buffers hold
	cases := []struct {
		name string
		run  func(t *testing.T, conn net.Conn, peer *net.TCPConn) []outcome
	}{{
		name: "reads what the peer wrote",
		run: func(t *testing.T, conn net.Conn, peer *net.TCPConn) []outcome {
			peer.Write([]byte("hello"))
			buf := make([]byte, 16)
			n, err := io.ReadAtLeast(conn, buf, 5)
			return []outcome{observe(n, buf[:n], err)}
		},
	}, {
		name: "a zero-length read returns at once",
		run: func(t *testing.T, conn net.Conn, peer *net.TCPConn) []outcome {
			n, err := conn.Read(nil)
			return []outcome{observe(n, nil, err)}
		},
	}, {
		name: "a zero-length read after its own close fails as closed",
		run: func(t *testing.T, conn net.Conn, peer *net.TCPConn) []outcome {
			conn.Close()
			n, err := conn.Read(nil)
			return []outcome{observe(n, nil, err)}
		},
	}, {
		name: "reads io.EOF once the peer closed",
		run: func(t *testing.T, conn net.Conn, peer *net.TCPConn) []outcome {
			peer.Write([]byte("bye"))
			peer.Close()
			data, err := io.ReadAll(conn)
			n, errAfter := conn.Read(make([]byte, 8))
			return []outcome{observe(len(data), data, err), observe(n, nil, errAfter)}
		},
	}, {
		name: "a read past its deadline times out",
		run: func(t *testing.T, conn net.Conn, peer *net.TCPConn) []outcome {
			conn.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			n, err := conn.Read(make([]byte, 8))
			return []outcome{observe(n, nil, err)}
		},
	}, {
		name: "a read after its own close fails as closed",
		run: func(t *testing.T, conn net.Conn, peer *net.TCPConn) []outcome {
			conn.Close()
			n, err := conn.Read(make([]byte, 8))
			return []outcome{observe(n, nil, err)}
		},
	}, {
		name: "a read after the peer reset fails with ECONNRESET, then a write with EPIPE",
		run: func(t *testing.T, conn net.Conn, peer *net.TCPConn) []outcome {
			peer.SetLinger(0)
			peer.Close()
			n, err := conn.Read(make([]byte, 8))
			m, writeErr := conn.Write([]byte("late"))
			return []outcome{observe(n, nil, err), observe(m, nil, writeErr)}
		},
	}, {
		name: "writes more than the socket holds while the peer reads it",
		run: func(t *testing.T, conn net.Conn, peer *net.TCPConn) []outcome {
			got := make(chan []byte)
			go func() { data, _ := io.ReadAll(peer); got <- data }()
			n, err := conn.Write(big)
			conn.(interface{ CloseWrite() error }).CloseWrite()
			data := <-got
			return []outcome{observe(n, nil, err), {n: len(data), delivered: bytes.Equal(data, big)}}
		},
	}, {
		name: "a write past its deadline times out with what it wrote",
		run: func(t *testing.T, conn net.Conn, peer *net.TCPConn) []outcome {
			conn.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
			n, err := conn.Write(big)
			o := observe(n, nil, err)
			if o.n <= 0 || o.n >= len(big) {
				t.Errorf("wrote %d of %d bytes before the deadline: want some, not all", o.n, len(big))
			}
			o.n = 0 // how much fits the socket buffers varies
			return []outcome{o}
		},
	}, {
		name: "a write after its own close fails as closed",
		run: func(t *testing.T, conn net.Conn, peer *net.TCPConn) []outcome {
			conn.Close()
			n, err := conn.Write([]byte("x"))
			return []outcome{observe(n, nil, err)}
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conn, peer := connPair(t, false)
			want := tc.run(t, conn, peer)
			conn, peer = connPair(t, true)
			got := tc.run(t, conn, peer)
			if len(got) != len(want) {
				t.Fatalf("%d outcomes, TCPConn had %d", len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("step %d: directConn %+v, TCPConn %+v", i, got[i], want[i])
				}
			}
		})
	}
}

// TestGateConnectionsAreDirect: the clients' connections (Listen) and the app's (the forwarder's pool)
// are direct, so the gate keeps what directConn measured.
func TestGateConnectionsAreDirect(t *testing.T) {
	l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		if c, err := net.Dial("tcp", l.Addr().String()); err == nil {
			defer c.Close()
			c.Read(make([]byte, 1))
		}
	}()
	accepted, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer accepted.Close()
	if _, ok := accepted.(*directConn); !ok {
		t.Errorf("Listen accepted a %T, want *directConn", accepted)
	}

	f := newForwarder(l.Addr().String())
	upstream, err := f.conn(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	defer upstream.Close()
	if _, ok := upstream.Conn.(*directConn); !ok {
		t.Errorf("the forwarder dialled a %T, want *directConn", upstream.Conn)
	}
}
