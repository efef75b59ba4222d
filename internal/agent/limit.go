package agent

import (
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// portLimits bound what the clients of one of the agent's ports (its endpoints, the gate) can hold, in
// a process whose memory limit is small (the chart's 64 Mi) and whose ports every pod can reach: the
// bytes of a request head, the time it may take, how long a connection may idle, and how many
// connections remote clients and the pod itself may hold.
type portLimits struct {
	// maxHeaderBytes bounds a request's head (net/http adds 4 KiB of slack); a larger one gets 431.
	maxHeaderBytes int
	// readHeaderTimeout is how long a head may take to arrive; idleTimeout how long a kept connection
	// may wait for its next request.
	readHeaderTimeout, idleTimeout time.Duration
	// writeTimeout, when set, is how long an answer may take to be taken by its client.
	writeTimeout time.Duration
	// remote is how many connections clients outside the pod may hold together; perAddress how many
	// one address of them may; loopback how many the pod's own containers may, apart from remote, so
	// that the app's calls keep flowing whatever other pods hold.
	remote, perAddress, loopback int
	// waiting is how many accepted connections past the bounds may wait, each up to readHeaderTimeout,
	// for a place to be given back; one past that, or waiting longer, is closed. A burst of clients
	// past the bounds is so queued, as the kernel's listen backlog would queue it, rather than refused.
	waiting int
}

// The limits of the agent's endpoints (probes, the app's /leader and its event streams, Prometheus):
// small requests, few clients. What remote clients can hold at these bounds is measured in
// docs/security.md.
var agentLimits = portLimits{
	maxHeaderBytes: 8 << 10, readHeaderTimeout: 5 * time.Second, idleTimeout: 60 * time.Second, writeTimeout: 10 * time.Second,
	remote: 64, perAddress: 16, loopback: 32, waiting: 64,
}

// The limits of the gate's port, which serves the app's clients: heads as large as nginx allows by
// default (4 lines of 8 KiB), keep-alive connections held longer than the usual client's idle timeout
// (nginx's upstream keepalive 60 s), and no per-address bound below the whole, as clients behind a
// node's SNAT or one ingress share an address. No write timeout: answers stream as long as the app
// sends them.
var gateLimits = portLimits{
	maxHeaderBytes: 32 << 10, readHeaderTimeout: 10 * time.Second, idleTimeout: 90 * time.Second,
	remote: 256, perAddress: 256, loopback: 64, waiting: 512,
}

// configure sets s's head, timeout and connection-state bounds; listen's connections are the ones
// counted.
func (p portLimits) configure(s *http.Server, l *limitListener) {
	s.MaxHeaderBytes = p.maxHeaderBytes
	s.ReadHeaderTimeout = p.readHeaderTimeout
	s.IdleTimeout = p.idleTimeout
	s.WriteTimeout = p.writeTimeout
	s.ConnState = l.connState
}

// limitListener bounds the connections its listener's clients hold (portLimits). A connection past a
// bound waits for a place (portLimits.waiting), with one exception that keeps a port open to every
// client while some of them hold it: when the remote bound is full, a newcomer whose address holds
// fewer connections than the address holding the most, by at least two, takes the place of that
// address's oldest connection that is not serving a request (waiting for its first head or its next
// one). So one address, or a few, filling the bound with unfinished heads or idle connections costs the
// others (kubelet's probes, another client) nothing but that address's own connections.
//
// Connections are accepted by a goroutine of the listener's own, which judges each and hands the
// admitted ones to Accept, so that a place given back admits a waiting connection at once.
type limitListener struct {
	net.Listener
	limits portLimits
	// local tells the pod's own addresses, the loopback ones in a pod.
	local func(netip.Addr) bool
	// refused counts the connections closed at a bound (not those taken a place from).
	refused atomic.Int64

	start sync.Once
	// ready are the admitted connections Accept returns: never more than the bounds, so sending to it
	// never blocks; failed is the listener's error.
	ready  chan net.Conn
	failed chan error

	mu       sync.Mutex
	remote   int
	loopback int
	byAddr   map[netip.Addr]map[*limitedConn]struct{}
	accepted uint64
	// queue are the connections waiting for a place, oldest first.
	queue []*waiter
}

// waiter is an accepted connection waiting for a place, closed when its time is up.
type waiter struct {
	conn  net.Conn
	timer *time.Timer
}

func newLimitListener(l net.Listener, limits portLimits) *limitListener {
	return &limitListener{Listener: l, limits: limits, local: netip.Addr.IsLoopback, byAddr: map[netip.Addr]map[*limitedConn]struct{}{},
		ready: make(chan net.Conn, limits.remote+limits.loopback), failed: make(chan error, 1)}
}

// limitedConn is a connection a limitListener counts until it is closed, and what the server last said
// of it.
type limitedConn struct {
	net.Conn
	l     *limitListener
	addr  netip.Addr
	local bool
	seq   uint64
	// state is the http.ConnState the server last reported.
	state atomic.Int32
	// counted is true until the connection's place is given back; guarded by l.mu.
	counted bool
}

// Accept returns the next connection admitted within the bounds.
func (l *limitListener) Accept() (net.Conn, error) {
	l.start.Do(func() { go l.acceptLoop() })
	select {
	case c := <-l.ready:
		return c, nil
	case err := <-l.failed:
		l.failed <- err // for the next caller
		return nil, err
	}
}

// acceptLoop accepts every connection and judges it (offer), until the listener fails. Errors that
// pass (too many open files) are waited out as net/http's server does.
func (l *limitListener) acceptLoop() {
	var backoff time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() || isTemporary(err) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			l.stop()
			l.failed <- err
			return
		}
		backoff = 0
		l.offer(c)
	}
}

// stop closes the connections waiting and those admitted but not yet accepted: the listener is gone.
func (l *limitListener) stop() {
	l.mu.Lock()
	queue := l.queue
	l.queue = nil
	l.mu.Unlock()
	for _, w := range queue {
		w.timer.Stop()
		_ = w.conn.Close()
	}
	for {
		select {
		case c := <-l.ready:
			_ = c.Close()
		default:
			return
		}
	}
}

func isTemporary(err error) bool {
	t, ok := err.(interface{ Temporary() bool })
	return ok && t.Temporary()
}

// offer admits c, queues it for a place, or closes it.
func (l *limitListener) offer(c net.Conn) {
	if lc := l.admit(c); lc != nil {
		l.ready <- lc
		return
	}
	l.mu.Lock()
	if len(l.queue) >= l.limits.waiting {
		l.mu.Unlock()
		l.refused.Add(1)
		_ = c.Close()
		return
	}
	w := &waiter{conn: c}
	w.timer = time.AfterFunc(l.limits.readHeaderTimeout, func() { l.expire(w) })
	l.queue = append(l.queue, w)
	l.mu.Unlock()
}

// expire closes w if it is still waiting.
func (l *limitListener) expire(w *waiter) {
	l.mu.Lock()
	i := slices.Index(l.queue, w)
	if i >= 0 {
		l.queue = slices.Delete(l.queue, i, i+1)
	}
	l.mu.Unlock()
	if i >= 0 {
		l.refused.Add(1)
		_ = w.conn.Close()
	}
}

// admit counts c, taking a place from another address's idle connection when the remote bound is
// full (see limitListener); nil when c is past a bound.
func (l *limitListener) admit(c net.Conn) *limitedConn {
	var victim *limitedConn
	l.mu.Lock()
	lc := l.admitLocked(c, &victim)
	l.mu.Unlock()
	if victim != nil {
		_ = victim.Conn.Close()
	}
	return lc
}

// admitLocked is admit with l.mu held; a connection whose place it took is left in victim for the
// caller to close (nil victim: take no place).
func (l *limitListener) admitLocked(c net.Conn, victim **limitedConn) *limitedConn {
	addr := remoteAddr(c)
	lc := &limitedConn{Conn: c, l: l, addr: addr, local: addr.IsValid() && l.local(addr)}
	mine := l.byAddr[addr]
	switch {
	case lc.local:
		if l.loopback >= l.limits.loopback {
			return nil
		}
	case len(mine) >= l.limits.perAddress:
		return nil
	case l.remote >= l.limits.remote:
		if victim == nil {
			return nil
		}
		if *victim = l.victimFor(len(mine)); *victim == nil {
			return nil
		}
		l.releaseLocked(*victim)
	}
	l.accepted++
	lc.seq, lc.counted = l.accepted, true
	if lc.local {
		l.loopback++
	} else {
		l.remote++
	}
	if mine == nil {
		mine = map[*limitedConn]struct{}{}
		l.byAddr[addr] = mine
	}
	mine[lc] = struct{}{}
	return lc
}

// admitWaitingLocked admits the waiting connections that now fit, oldest first. Called with l.mu held.
func (l *limitListener) admitWaitingLocked() {
	kept := l.queue[:0]
	for _, w := range l.queue {
		if lc := l.admitLocked(w.conn, nil); lc != nil && w.timer.Stop() {
			l.ready <- lc
			continue
		} else if lc != nil {
			// Its time ran out as it was admitted: expire closes it.
			l.releaseLocked(lc)
		}
		kept = append(kept, w)
	}
	clear(l.queue[len(kept):])
	l.queue = kept
}

// victimFor is the connection a newcomer whose address holds held connections takes the place of: the
// oldest not serving a request of the remote address holding the most, when that is at least held+2;
// nil when there is none. Called with l.mu held, when the remote bound is full.
func (l *limitListener) victimFor(held int) *limitedConn {
	var most map[*limitedConn]struct{}
	for addr, conns := range l.byAddr {
		if len(conns) > len(most) && !(addr.IsValid() && l.local(addr)) {
			most = conns
		}
	}
	if len(most) < held+2 {
		return nil
	}
	var victim *limitedConn
	for c := range most {
		switch http.ConnState(c.state.Load()) {
		case http.StateNew, http.StateIdle:
			if victim == nil || c.seq < victim.seq {
				victim = c
			}
		}
	}
	return victim
}

// releaseLocked gives c's place back, once. Called with l.mu held.
func (l *limitListener) releaseLocked(c *limitedConn) {
	if !c.counted {
		return
	}
	c.counted = false
	if c.local {
		l.loopback--
	} else {
		l.remote--
	}
	if conns := l.byAddr[c.addr]; conns != nil {
		delete(conns, c)
		if len(conns) == 0 {
			delete(l.byAddr, c.addr)
		}
	}
}

// connState records what the server says of a connection: set it as the server's ConnState.
func (l *limitListener) connState(c net.Conn, state http.ConnState) {
	if lc, ok := c.(*limitedConn); ok {
		lc.state.Store(int32(state))
	}
}

// heldBy is how many connections the address holds.
func (l *limitListener) heldBy(addr netip.Addr) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.byAddr[addr])
}

// waitingNow is how many connections wait for a place.
func (l *limitListener) waitingNow() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queue)
}

// held is how many connections remote clients and the pod itself hold.
func (l *limitListener) held() (remote, loopback int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.remote, l.loopback
}

// Close closes the connection and gives its place back, to a waiting connection if one fits.
func (c *limitedConn) Close() error {
	c.l.mu.Lock()
	if c.counted {
		c.l.releaseLocked(c)
		if len(c.l.queue) > 0 {
			c.l.admitWaitingLocked()
		}
	}
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// remoteAddr is c's peer address, IPv4 in IPv6 unmapped; invalid when it has none (a Unix socket).
func remoteAddr(c net.Conn) netip.Addr {
	if tcp, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		addr, _ := netip.AddrFromSlice(tcp.IP)
		return addr.Unmap()
	}
	return netip.Addr{}
}
