package gate

import (
	"bufio"
	"context"
	"net"
	"sync"
	"time"
)

// connPool keeps the forwarder's free connections to the app, as http.Transport keeps its idle ones, but
// without a goroutine reading each: a free connection is checked when it is taken and by a reaper, so
// an exchange stays in the handler's goroutine.
type connPool struct {
	upstream string
	dialer   net.Dialer

	// idleTimeout retires a free connection; reapEvery is how often the free ones are checked.
	idleTimeout, reapEvery time.Duration

	mu sync.Mutex
	// idle are the connections to the app that are free, the most recently used last: taking that one
	// gives the app's keep-alive timeout the least chance to have closed it.
	idle []*upstreamConn
	// reaper, while connections are free, checks them every reapEvery and closes those the app closed or
	// that were idle past idleTimeout: taken last in, first out, the oldest would otherwise never be
	// looked at.
	reaper *time.Timer
	// closed: the gate has stopped (closeIdle), so a connection a request frees is closed, not kept.
	closed bool
}

// upstreamConn is one connection to the app with its buffers. Its reader reads through Read, which bounds
// the head of an answer.
type upstreamConn struct {
	net.Conn
	r *bufio.Reader
	w *bufio.Writer
	// reused: the connection served a request before; freed: when it was last put back.
	reused bool
	freed  time.Time
	// headRoom is what Read may still take while a head is read; limited says whether it applies; read
	// counts the bytes of the current exchange.
	headRoom int64
	limited  bool
	read     int64
	// connection is the Connection header of the answer head being read, taken before net/http parses
	// the head: it drops the whole header when it says close, and with it the headers it names.
	connection []string
}

const (
	maxIdleUpstreamConns = 64
	// idleUpstreamTimeout retires a free connection, as http.Transport's IdleConnTimeout.
	idleUpstreamTimeout = 90 * time.Second
	// reapEvery: a connection the app closed is let go within a second, where http.Transport, which
	// keeps a goroutine reading each free connection, notices at once.
	reapEvery = time.Second
)

// conn returns the most recently freed connection to the app that is still open, or, with fresh or
// none free, a new one.
func (p *connPool) conn(ctx context.Context, fresh bool) (*upstreamConn, error) {
	for !fresh {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			break
		}
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if time.Since(c.freed) < p.idleTimeout && c.open() {
			c.read = 0
			return c, nil
		}
		c.Close()
	}
	conn, err := p.dialer.DialContext(ctx, "tcp", p.upstream)
	if err != nil {
		return nil, err
	}
	conn = direct(conn)
	c := &upstreamConn{Conn: conn, w: bufio.NewWriter(conn)}
	c.r = bufio.NewReader(c)
	return c, nil
}

// release returns c to the free connections, or closes it when there are enough.
func (p *connPool) release(c *upstreamConn) {
	c.reused, c.freed = true, time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle) >= maxIdleUpstreamConns {
		c.Close()
		return
	}
	p.idle = append(p.idle, c)
	if p.reaper == nil {
		p.reaper = time.AfterFunc(p.reapEvery, p.reap)
	}
}

// reap closes the free connections the app closed or that were idle past the idle timeout, and checks
// again later while any are left.
func (p *connPool) reap() {
	p.mu.Lock()
	defer p.mu.Unlock()
	kept := p.idle[:0]
	for _, c := range p.idle {
		if time.Since(c.freed) < p.idleTimeout && c.open() {
			kept = append(kept, c)
		} else {
			c.Close()
		}
	}
	clear(p.idle[len(kept):])
	p.idle = kept
	if len(p.idle) > 0 && !p.closed {
		p.reaper.Reset(p.reapEvery)
	} else {
		p.reaper = nil
	}
}

// closeIdle closes the free connections, and from now on each one a request frees.
func (p *connPool) closeIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.reaper != nil {
		p.reaper.Stop()
		p.reaper = nil
	}
	for _, c := range p.idle {
		c.Close()
	}
	p.idle = nil
}

// open reports whether c may carry the next request: the app has sent nothing unasked on it (which
// would put the connection out of step) and, where the socket can be peeked at, neither sent nor closed
// it while it was free (a keep-alive timeout, a restart), so a request is never written to a connection
// that is gone. Where it cannot be peeked at, c is taken as open, as http.Transport takes a free
// connection whose reader has seen nothing: roundTrip sends a request that meets a connection the app
// closed again on a fresh one, when it may be sent twice.
func (c *upstreamConn) open() bool {
	return c.r.Buffered() == 0 && quiet(c.Conn)
}
