package relay

import (
	"io"
	"net"
	"sync"
)

// Proxy forwards TCP connections from a loopback port to target. Cut turns it into a black hole, as a
// network partition does: connections stay open but nothing comes back, so a client learns of the
// partition only through its own timeouts, the hardest case for an elector.
type Proxy struct {
	Addr     string
	target   string
	listener net.Listener

	mu       sync.Mutex
	cut      bool
	upstream []net.Conn
	clients  []net.Conn
}

// StartProxy listens on a free loopback port.
func StartProxy(target string) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: l.Addr().String(), target: target, listener: l}
	go p.serve()
	return p, nil
}

func (p *Proxy) serve() {
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return
		}
		go p.forward(client)
	}
}

func (p *Proxy) forward(client net.Conn) {
	if !p.track(client, nil) {
		return // cut: accepted and never answered
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		// The target is down but the path is up: the client hears a reset, as from a host whose process
		// died, and tries elsewhere.
		p.closeUnlessCut(client)
		return
	}
	if !p.track(nil, server) {
		return
	}
	go func() { _, _ = io.Copy(server, client) }()
	_, _ = io.Copy(client, server)
	// The target closed (it died) or the proxy was cut. After a cut the client side stays open and
	// silent, and Close ends it; otherwise the client hears the close, as it would directly.
	p.closeUnlessCut(client)
}

func (p *Proxy) closeUnlessCut(client net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cut {
		client.Close()
	}
}

func (p *Proxy) track(client, server net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if client != nil {
		p.clients = append(p.clients, client)
	}
	if p.cut {
		if server != nil {
			server.Close()
		}
		return false
	}
	if server != nil {
		p.upstream = append(p.upstream, server)
	}
	return true
}

// Cut stops all traffic: upstream connections are dropped, clients hear nothing more.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, c := range p.upstream {
		c.Close()
	}
	p.upstream = nil
}

// Heal ends a Cut: new connections are forwarded again. The connections the cut silenced are closed,
// not revived: their upstream side is gone, so once packets flowed again a real client's next segment
// would meet a reset. Closing them lets a client redial now rather than when its keepalive gives up.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cut {
		return
	}
	p.cut = false
	for _, c := range p.clients {
		c.Close()
	}
	p.clients = nil
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.Cut()
	p.listener.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.clients {
		c.Close()
	}
}
