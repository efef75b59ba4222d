package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"
)

// The tests' clients all run on loopback: 127.0.0.1 stands for the pod itself, every other 127.x.y.z
// address for another pod (Linux routes all of 127/8 to lo).
var podItself = netip.MustParseAddr("127.0.0.1")

func onlyPodItself(a netip.Addr) bool { return a == podItself }

// dialFrom connects to addr from the loopback address from.
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dialling %s from %s: %v", addr, from, err)
	}
	return conn
}

// clientFrom is an HTTP client whose connections come from the loopback address from.
func clientFrom(from string) *http.Client {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

// port is one of the agent's ports as it runs, on loopback, with limits.
type port struct {
	name    string
	addr    string
	limited *limitListener
	limits  portLimits
}

// startPorts serves the agent's endpoints and a gate-like handler (the gate's server and limits, an
// answer of its own) within limits tuned by tune.
func startPorts(t *testing.T, tune func(*portLimits)) []port {
	t.Helper()
	hello := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	var ports []port
	for _, p := range []struct {
		name   string
		limits portLimits
		server func(http.Handler, net.Listener, portLimits) (*http.Server, *limitListener)
	}{
		{"the agent's endpoints", agentLimits, endpointsServer},
		{"the gate", gateLimits, gateServer},
	} {
		limits := p.limits
		if tune != nil {
			tune(&limits)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		limited := newLimitListener(l, limits)
		limited.local = onlyPodItself
		server, _ := p.server(hello, limited, limits)
		go func() { _ = server.Serve(limited) }()
		t.Cleanup(func() { _ = server.Close() })
		ports = append(ports, port{name: p.name, addr: l.Addr().String(), limited: limited, limits: limits})
	}
	return ports
}

// unfinishedHead opens a connection from from and sends a request head that does not end, as large as
// the port allows; it reports whether the server still holds the connection a moment later.
func unfinishedHead(t *testing.T, from, addr string, headBytes int) (net.Conn, bool) {
	t.Helper()
	conn := dialFrom(t, from, addr)
	t.Cleanup(func() { conn.Close() })
	head := "GET /healthz HTTP/1.1\r\nHost: agent\r\nX-Padding: " + strings.Repeat("a", headBytes)
	_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(conn, head); err != nil {
		return conn, false
	}
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Millisecond))
	_, err := conn.Read(make([]byte, 1))
	return conn, errors.Is(err, os.ErrDeadlineExceeded)
}

// TestPortsBoundWhatClientsHold: on both ports, other pods opening many unfinished heads, each as
// large as the port allows, hold no more connections than the bounds, one address no more than its
// own; a request from the pod itself (the app on loopback) and one from an address that held nothing
// (kubelet's probe) are still served; a head past the size bound gets 431.
func TestPortsBoundWhatClientsHold(t *testing.T) {
	for _, p := range startPorts(t, nil) {
		t.Run(p.name, func(t *testing.T) {
			headBytes := p.limits.maxHeaderBytes - 100
			// One address: at most perAddress (or the whole bound) of its connections are held, the rest
			// wait for a place or are closed.
			for range p.limits.perAddress + 20 {
				unfinishedHead(t, "127.0.0.2", p.addr, headBytes)
			}
			if held, want := p.limited.heldBy(netip.MustParseAddr("127.0.0.2")), min(p.limits.perAddress, p.limits.remote); held != want {
				t.Errorf("one address holds %d unfinished heads, want %d", held, want)
			}
			// Many addresses: the remote bound holds, and the queue's.
			for i, opened := 3, 0; opened < p.limits.remote+p.limits.waiting+40; i++ {
				for range 16 {
					unfinishedHead(t, fmt.Sprintf("127.0.0.%d", i), p.addr, headBytes)
					opened++
				}
			}
			if remote, _ := p.limited.held(); remote > p.limits.remote {
				t.Errorf("remote clients hold %d connections, past the bound %d", remote, p.limits.remote)
			}
			if waiting := p.limited.waitingNow(); waiting > p.limits.waiting {
				t.Errorf("%d connections wait, past the bound %d", waiting, p.limits.waiting)
			}
			// The pod itself is served.
			for range 3 {
				if resp, err := clientFrom("127.0.0.1").Get("http://" + p.addr + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("the pod's own request while other pods hold the port: %v, %v", resp, err)
				} else {
					resp.Body.Close()
				}
			}
			// An address that held nothing (kubelet's probe, from the node) is served too: it takes the
			// place of an unfinished head of an address holding the most.
			for i := range 3 {
				if resp, err := clientFrom(fmt.Sprintf("127.0.1.%d", i+1)).Get("http://" + p.addr + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("a probe from an address that held nothing: %v, %v", resp, err)
				} else {
					resp.Body.Close()
				}
			}
			if remote, _ := p.limited.held(); remote > p.limits.remote {
				t.Errorf("remote clients hold %d connections, past the bound %d", remote, p.limits.remote)
			}
			// A head past the size bound is refused.
			req, _ := http.NewRequest(http.MethodGet, "http://"+p.addr+"/healthz", nil)
			req.Header.Set("X-Padding", strings.Repeat("a", p.limits.maxHeaderBytes+5000))
			if resp, err := clientFrom("127.0.0.1").Do(req); err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("a head of %d bytes: %v, %v; want 431", p.limits.maxHeaderBytes+5000, resp, err)
			} else {
				resp.Body.Close()
			}
		})
	}
}

// TestPortsBoundThePodsOwnConnections: the pod's own containers have a bound of their own, which other
// pods cannot use up and which does not use up theirs.
func TestPortsBoundThePodsOwnConnections(t *testing.T) {
	for _, p := range startPorts(t, func(l *portLimits) { l.loopback, l.remote, l.perAddress = 4, 4, 4 }) {
		t.Run(p.name, func(t *testing.T) {
			for range 10 {
				unfinishedHead(t, "127.0.0.1", p.addr, 10)
			}
			if _, held := p.limited.held(); held != 4 {
				t.Errorf("the pod itself holds %d connections, want its bound 4", held)
			}
			if resp, err := clientFrom("127.0.0.2").Get("http://" + p.addr + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("another pod's request while the pod's own bound is full: %v, %v", resp, err)
			} else {
				resp.Body.Close()
			}
		})
	}
}

// TestPortsQueueConnectionsPastTheBounds: a connection past the bounds waits for a place and is
// served once one is given back; past the queue's bound, or waiting past the head timeout, it is closed.
func TestPortsQueueConnectionsPastTheBounds(t *testing.T) {
	ports := startPorts(t, func(l *portLimits) {
		l.loopback, l.remote, l.perAddress, l.waiting, l.readHeaderTimeout = 2, 2, 2, 1, 500*time.Millisecond
	})
	for _, p := range ports {
		t.Run(p.name, func(t *testing.T) {
			first, _ := unfinishedHead(t, "127.0.0.1", p.addr, 10)
			unfinishedHead(t, "127.0.0.1", p.addr, 10)
			served := make(chan error, 1)
			go func() {
				resp, err := clientFrom("127.0.0.1").Get("http://" + p.addr + "/healthz")
				if err == nil {
					resp.Body.Close()
				}
				served <- err
			}()
			for p.limited.waitingNow() == 0 {
				time.Sleep(time.Millisecond)
			}
			// One past the queue's bound is closed.
			over := dialFrom(t, "127.0.0.1", p.addr)
			defer over.Close()
			_ = over.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, err := over.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
				t.Error("a connection past the queue's bound is still open")
			}
			first.Close()
			if err := <-served; err != nil {
				t.Errorf("the waiting request once a place was given back: %v", err)
			}
			// A connection waiting past the head timeout is closed.
			unfinishedHead(t, "127.0.0.1", p.addr, 10)
			late := dialFrom(t, "127.0.0.1", p.addr)
			defer late.Close()
			_ = late.SetReadDeadline(time.Now().Add(3 * time.Second))
			if _, err := late.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
				t.Error("a connection waiting past the head timeout is still open")
			}
		})
	}
}

// TestPortsCloseSlowHeadsAndIdleConnections: on both ports a head that does not arrive within the
// head timeout, and a kept connection idle past the idle timeout, are closed.
func TestPortsCloseSlowHeadsAndIdleConnections(t *testing.T) {
	ports := startPorts(t, func(l *portLimits) { l.readHeaderTimeout, l.idleTimeout = 300*time.Millisecond, 300*time.Millisecond })
	for _, p := range ports {
		t.Run(p.name, func(t *testing.T) {
			closedWithin := func(conn net.Conn, r *bufio.Reader, d time.Duration) error {
				_ = conn.SetReadDeadline(time.Now().Add(d))
				if _, err := r.ReadByte(); errors.Is(err, os.ErrDeadlineExceeded) {
					return fmt.Errorf("still open after %s", d)
				}
				return nil
			}
			slow, _ := unfinishedHead(t, "127.0.0.2", p.addr, 10)
			if err := closedWithin(slow, bufio.NewReader(slow), 2*time.Second); err != nil {
				t.Errorf("an unfinished head: %v", err)
			}
			for _, from := range []string{"127.0.0.1", "127.0.0.3"} {
				idle := dialFrom(t, from, p.addr)
				defer idle.Close()
				r := bufio.NewReader(idle)
				_, _ = io.WriteString(idle, "GET /healthz HTTP/1.1\r\nHost: agent\r\n\r\n")
				resp, err := http.ReadResponse(r, nil)
				if err != nil || resp.Close {
					t.Fatalf("a kept-alive request: %v, %v", resp, err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				if err := closedWithin(idle, r, 2*time.Second); err != nil {
					t.Errorf("an idle connection from %s: %v", from, err)
				}
			}
			if remote, loopback := p.limited.held(); remote != 0 || loopback != 0 {
				t.Errorf("after the connections were closed the port counts %d remote, %d local", remote, loopback)
			}
		})
	}
}

// TestEndpointsCloseRequestsWithBodies: a body trickled to the agent's endpoints cannot hold the
// connection: the answer closes it.
func TestEndpointsCloseRequestsWithBodies(t *testing.T) {
	p := startPorts(t, nil)[0]
	conn := dialFrom(t, "127.0.0.2", p.addr)
	defer conn.Close()
	_, _ = io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: agent\r\nContent-Length: 1000\r\n\r\nsome")
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close {
		t.Fatalf("a request with a body: %v, %v; want 413 closing the connection", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := r.ReadByte(); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Error("the connection is still open after the answer")
	}
}

// The limiter itself: a full remote bound takes a place only from an address holding at least two more
// than the newcomer's, and only from a connection not serving a request.
func TestLimitListenerTakesPlacesFairly(t *testing.T) {
	l := newLimitListener(nil, portLimits{remote: 4, perAddress: 4, loopback: 1})
	l.local = onlyPodItself
	conn := func(addr string) net.Conn {
		return fakeConn{remote: &net.TCPAddr{IP: net.ParseIP(addr), Port: 1}}
	}
	a := []*limitedConn{l.admit(conn("10.0.0.1")), l.admit(conn("10.0.0.1")), l.admit(conn("10.0.0.2")), l.admit(conn("10.0.0.2"))}
	for i, c := range a {
		if c == nil {
			t.Fatalf("connection %d refused below the bound", i)
		}
	}
	if l.admit(conn("10.0.0.2")) != nil {
		t.Fatal("10.0.0.2, holding 2, took a place from 10.0.0.1, holding 2: a newcomer takes one only from an address holding at least 2 more than its own")
	}
	a[2].Close()
	if c := l.admit(conn("10.0.0.1")); c == nil {
		t.Fatal("a place given back was not taken")
	} else {
		a[2] = c
	}
	// 10.0.0.1 holds 3, 10.0.0.2 one, 10.0.0.3 nothing.
	for _, c := range a {
		c.state.Store(int32(http.StateActive))
	}
	if l.admit(conn("10.0.0.3")) != nil {
		t.Error("a newcomer took the place of a connection serving a request")
	}
	a[1].state.Store(int32(http.StateIdle))
	if l.admit(conn("10.0.0.3")) == nil {
		t.Error("a newcomer holding nothing was refused though 10.0.0.1 holds 3 and one is idle")
	}
	if a[1].counted {
		t.Error("the idle connection whose place was taken is still counted")
	}
	if l.admit(conn("127.0.0.1")) == nil || l.admit(conn("127.0.0.1")) != nil {
		t.Error("the pod's own bound of 1: want the first admitted, the second refused")
	}
	if remote, loopback := l.held(); remote != 4 || loopback != 1 {
		t.Errorf("held %d remote, %d local; want 4, 1", remote, loopback)
	}
}

// fakeConn is a connection with only a remote address.
type fakeConn struct {
	net.Conn
	remote net.Addr
}

func (c fakeConn) RemoteAddr() net.Addr { return c.remote }
func (c fakeConn) Close() error         { return nil }

// TestEndpointsBoundStreamsPerConnection: the endpoints speak cleartext HTTP/2, for followers' waits, and
// tell each connection how many requests it may carry at once: maxStreamsPerConnection, not Go's 250, so
// the connection bounds above bound the requests too.
func TestEndpointsBoundStreamsPerConnection(t *testing.T) {
	p := startPorts(t, nil)[0]
	conn := dialFrom(t, "127.0.0.2", p.addr)
	defer conn.Close()
	// The client preface with prior knowledge, and an empty SETTINGS frame.
	_, _ = io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	_, _ = conn.Write([]byte{0, 0, 0, 0x4, 0, 0, 0, 0, 0})
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	header := make([]byte, 9)
	if _, err := io.ReadFull(conn, header); err != nil {
		t.Fatalf("no HTTP/2 frame from the endpoints: %v", err)
	}
	length := int(header[0])<<16 | int(header[1])<<8 | int(header[2])
	if header[3] != 0x4 || length%6 != 0 {
		t.Fatalf("first frame type %d, length %d: want the server's SETTINGS", header[3], length)
	}
	payload := make([]byte, length)
	if _, err := io.ReadFull(conn, payload); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < length; i += 6 {
		id := int(payload[i])<<8 | int(payload[i+1])
		value := int(payload[i+2])<<24 | int(payload[i+3])<<16 | int(payload[i+4])<<8 | int(payload[i+5])
		if id == 0x3 { // SETTINGS_MAX_CONCURRENT_STREAMS
			if value != maxStreamsPerConnection {
				t.Errorf("MAX_CONCURRENT_STREAMS %d, want %d", value, maxStreamsPerConnection)
			}
			return
		}
	}
	t.Errorf("the server's SETTINGS name no MAX_CONCURRENT_STREAMS: every connection may carry 250 requests")
}
