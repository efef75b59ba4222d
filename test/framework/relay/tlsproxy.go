package relay

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"sync"
)

// TLSProxy terminates TLS in front of an API server with a certificate the test chooses, as the API
// server itself would serve one after a CA rotation, and relays the bytes over its own TLS connection to
// the API server (the protocol the client negotiated, HTTP/2 or HTTP/1.1, passes through unchanged, and
// so do bearer tokens).
type TLSProxy struct {
	Addr     string
	target   string
	upstream *tls.Config
	listener net.Listener

	mu    sync.Mutex
	cert  *tls.Certificate
	conns []net.Conn
}

// StartTLSProxy listens on a free loopback port, serving cert, for the API server at target (host:port),
// whose certificate upstreamCA verifies.
func StartTLSProxy(target string, upstreamCA []byte, cert *tls.Certificate) (*TLSProxy, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(upstreamCA) {
		return nil, fmt.Errorf("the API server's CA holds no PEM certificate")
	}
	p := &TLSProxy{target: target, upstream: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, cert: cert}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			return &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}, Certificates: []tls.Certificate{*p.cert}}, nil
		},
	})
	if err != nil {
		return nil, err
	}
	p.Addr, p.listener = l.Addr().String(), l
	go p.serve()
	return p, nil
}

// Serve makes every later connection get cert; connections already made keep theirs, as with an API
// server that reloads its serving certificate.
func (p *TLSProxy) Serve(cert *tls.Certificate) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cert = cert
}

// CutConnections closes every connection made so far, so clients must connect again.
func (p *TLSProxy) CutConnections() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Close stops listening and closes every connection.
func (p *TLSProxy) Close() {
	p.listener.Close()
	p.CutConnections()
}

func (p *TLSProxy) serve() {
	for {
		conn, err := p.listener.Accept()
		if err != nil {
			return
		}
		go p.relay(conn.(*tls.Conn))
	}
}

func (p *TLSProxy) relay(client *tls.Conn) {
	p.track(client)
	defer client.Close()
	if err := client.Handshake(); err != nil {
		return // a client that does not trust the certificate: what a rotation spec is about
	}
	upstream := p.upstream.Clone()
	if proto := client.ConnectionState().NegotiatedProtocol; proto != "" {
		upstream.NextProtos = []string{proto}
	}
	server, err := tls.Dial("tcp", p.target, upstream)
	if err != nil {
		return
	}
	p.track(server)
	defer server.Close()
	go func() {
		_, _ = io.Copy(server, client)
		server.Close()
	}()
	_, _ = io.Copy(client, server)
}

func (p *TLSProxy) track(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns = append(p.conns, c)
}
