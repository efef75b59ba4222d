package agent

import (
	"net"
	"net/http"
	"net/netip"
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
}

// The limits of the agent's endpoints (probes, the app's /leader and its event streams, Prometheus):
// small requests, few clients. What remote clients can hold at these bounds is measured in
// docs/security.md.
var agentLimits = portLimits{
	maxHeaderBytes: 8 << 10, readHeaderTimeout: 5 * time.Second, idleTimeout: 60 * time.Second, writeTimeout: 10 * time.Second,
	remote: 64, perAddress: 16, loopback: 32,
}

// The limits of the gate's port, which serves the app's clients: heads as large as nginx allows by
// default (4 lines of 8 KiB), keep-alive connections held longer than the usual client's idle timeout
// (nginx's upstream keepalive 60 s), and no per-address bound below the whole, as clients behind a
// node's SNAT or one ingress share an address. No write timeout: answers stream as long as the app
// sends them.
var gateLimits = portLimits{
	maxHeaderBytes: 32 << 10, readHeaderTimeout: 10 * time.Second, idleTimeout: 90 * time.Second,
	remote: 256, perAddress: 256, loopback: 64,
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
// bound is closed as soon as it is accepted, with one exception that keeps a port open to every
// client while some of them hold it: when the remote bound is full, a newcomer whose address holds
// fewer connections than the address holding the most, by at least two, takes the place of that
// address's oldest connection that is not serving a request (waiting for its first head or its next
// one). So one address, or a few, filling the bound with unfinished heads or idle connections costs the
// others (kubelet's probes, another client) nothing but that address's own connections.
type limitListener struct {
	net.Listener
	limits portLimits
	// local tells the pod's own addresses, the loopback ones in a pod.
	local func(netip.Addr) bool
	// refused counts the connections closed at a bound (not those taken a place from).
	refused atomic.Int64

	mu       sync.Mutex
	remote   int
	loopback int
	byAddr   map[netip.Addr]map[*limitedConn]struct{}
	accepted uint64
}

func newLimitListener(l net.Listener, limits portLimits) *limitListener {
	return &limitListener{Listener: l, limits: limits, local: netip.Addr.IsLoopback, byAddr: map[netip.Addr]map[*limitedConn]struct{}{}}
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

// Accept returns the next connection within the bounds, closing those past them.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if lc := l.admit(c); lc != nil {
			return lc, nil
		}
		l.refused.Add(1)
		_ = c.Close()
	}
}

// admit counts c, taking a place from another address's idle connection when the remote bound is
// full (see limitListener); nil when c is past a bound.
func (l *limitListener) admit(c net.Conn) *limitedConn {
	addr := remoteAddr(c)
	lc := &limitedConn{Conn: c, l: l, addr: addr, local: addr.IsValid() && l.local(addr)}
	var victim *limitedConn
	l.mu.Lock()
	defer func() {
		l.mu.Unlock()
		if victim != nil {
			_ = victim.Conn.Close()
		}
	}()
	mine := l.byAddr[addr]
	switch {
	case lc.local:
		if l.loopback >= l.limits.loopback {
			return nil
		}
	case len(mine) >= l.limits.perAddress:
		return nil
	case l.remote >= l.limits.remote:
		if victim = l.victimFor(len(mine)); victim == nil {
			return nil
		}
		l.releaseLocked(victim)
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

// held is how many connections remote clients and the pod itself hold.
func (l *limitListener) held() (remote, loopback int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.remote, l.loopback
}

// Close closes the connection and gives its place back.
func (c *limitedConn) Close() error {
	c.l.mu.Lock()
	c.l.releaseLocked(c)
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
