package gate

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// forwarder passes a plain HTTP/1.1 request to the app on a pooled connection and copies the answer back,
// all in the handler's goroutine. It is the gate's path for every request but upgrades, gRPC, other
// HTTP/2 and requests with trailers, which ReverseProxy takes.
//
// Why not ReverseProxy for all: its Transport hands each request to a writing and a reading goroutine and
// the answer back through channels, and writes a request's headers and its body apart. In a process of
// its own on shared cores every hand-off can wake a thread, and each wake is time added to the request.
// gatebench, three runs alternating the two in one binary: 0.20-0.23 ms added at p50 and 0.51-0.55 ms at
// p99 with the forwarder, 0.26-0.31 and 0.63-1.06 with ReverseProxy, the agent's CPU 181-205 µs a request
// against 236-258; a bare TCP relay added 0.11-0.13 ms at p50 in the same runs.
type forwarder struct {
	upstream string
	dialer   net.Dialer
	// idle are the connections to the app that are free, newest last.
	idle chan *upstreamConn
}

// upstreamConn is one connection to the app with its buffers.
type upstreamConn struct {
	net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

const maxIdleUpstreamConns = 64

func newForwarder(upstream string) *forwarder {
	return &forwarder{upstream: upstream, dialer: net.Dialer{Timeout: 5 * time.Second}, idle: make(chan *upstreamConn, maxIdleUpstreamConns)}
}

// takes reports whether the forwarder serves r: an HTTP/1.x request that does not ask to upgrade the
// connection and carries no trailers.
func (f *forwarder) takes(r *http.Request) bool {
	return r.ProtoMajor == 1 && len(r.Trailer) == 0 && !hasToken(r.Header["Connection"], "upgrade")
}

// ServeHTTP forwards r and copies the answer to w. Failures before the answer started are 502s; a failure
// in the middle of the answer aborts the client's connection, as ReverseProxy does, so the client cannot
// take a cut answer for a whole one.
func (f *forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	conn, err := f.conn(r.Context())
	if err != nil {
		badGateway(w, r, err)
		return
	}
	// A client that goes away while the app works ends the wait: the connection is then closed, not
	// pooled, since the app's answer would still be on it.
	stop := context.AfterFunc(r.Context(), func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	resp, err := f.roundTrip(conn, r)
	if err != nil {
		stop()
		conn.Close()
		badGateway(w, r, err)
		return
	}
	header := w.Header()
	for key, values := range resp.Header {
		header[key] = values
	}
	removeHopByHop(header)
	announceTrailers(header, resp.Trailer)
	w.WriteHeader(resp.StatusCode)
	err = copyBody(w, resp)
	for key, values := range resp.Trailer {
		header[http.TrailerPrefix+key] = values
	}
	if !stop() || err != nil || resp.Close {
		conn.Close()
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		return
	}
	f.release(conn)
}

// roundTrip writes r to the app and reads the head of its answer, skipping informational (1xx) ones.
func (f *forwarder) roundTrip(conn *upstreamConn, r *http.Request) (*http.Response, error) {
	if err := writeRequest(conn.w, r, f.upstream); err != nil {
		return nil, err
	}
	for {
		resp, err := http.ReadResponse(conn.r, r)
		switch {
		case err != nil || resp.StatusCode >= 200:
			return resp, err
		case resp.StatusCode == http.StatusSwitchingProtocols:
			return nil, errors.New("the app switched protocols for a request that did not ask to upgrade")
		}
	}
}

// writeRequest writes r as the app should see it: the client's method, target and Host, the headers
// but those that concern only the hop to the gate, X-Forwarded-For/-Host/-Proto set by the gate (as
// ReverseProxy's SetXForwarded does), and the body, in one write when it fits the buffer.
func writeRequest(w *bufio.Writer, r *http.Request, upstream string) error {
	host := r.Host
	if host == "" {
		host = upstream // an HTTP/1.0 client named none
	}
	w.WriteString(r.Method)
	w.WriteByte(' ')
	w.WriteString(r.URL.RequestURI())
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(host)
	w.WriteString("\r\n")
	connectionTokens := r.Header["Connection"]
	for key, values := range r.Header {
		// The body's framing is written below; Expect was for the hop to the gate, whose server answered
		// it when the body was first read.
		if isHopByHop(key, connectionTokens) || isForwarding(key) || key == "Content-Length" || key == "Expect" {
			continue
		}
		for _, value := range values {
			w.WriteString(key)
			w.WriteString(": ")
			w.WriteString(value)
			w.WriteString("\r\n")
		}
	}
	if client, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		w.WriteString("X-Forwarded-For: ")
		w.WriteString(client)
		w.WriteString("\r\n")
	}
	w.WriteString("X-Forwarded-Host: ")
	w.WriteString(host)
	if r.TLS != nil {
		w.WriteString("\r\nX-Forwarded-Proto: https\r\n")
	} else {
		w.WriteString("\r\nX-Forwarded-Proto: http\r\n")
	}
	switch {
	case r.ContentLength > 0:
		w.WriteString("Content-Length: ")
		w.WriteString(strconv.FormatInt(r.ContentLength, 10))
		w.WriteString("\r\n\r\n")
		if _, err := io.Copy(w, r.Body); err != nil {
			return err
		}
	case r.ContentLength < 0:
		w.WriteString("Transfer-Encoding: chunked\r\n\r\n")
		chunked := httputil.NewChunkedWriter(w)
		if _, err := io.Copy(chunked, r.Body); err != nil {
			return err
		}
		chunked.Close()
		w.WriteString("\r\n")
	case r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch:
		w.WriteString("Content-Length: 0\r\n\r\n")
	default:
		w.WriteString("\r\n")
	}
	return w.Flush()
}

// copyBody copies the answer's body. One of unknown length (a stream: server-sent events, chunked
// output) is flushed as it comes; one of known length goes out when the handler returns, in one write if
// it fits the server's buffer.
func copyBody(w http.ResponseWriter, resp *http.Response) error {
	buf := buffers.Get()
	defer buffers.Put(buf)
	if resp.ContentLength >= 0 && !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		_, err := io.CopyBuffer(writerOnly{w}, resp.Body, buf)
		return err
	}
	flusher := http.NewResponseController(w)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if ferr := flusher.Flush(); ferr != nil {
				return ferr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// writerOnly hides the ResponseWriter's ReadFrom, which would copy through a buffer of its own.
type writerOnly struct{ io.Writer }

// conn returns a free connection to the app that is still open, or a new one.
func (f *forwarder) conn(ctx context.Context) (*upstreamConn, error) {
	for {
		select {
		case c := <-f.idle:
			if c.open() {
				return c, nil
			}
			c.Close()
		default:
			conn, err := f.dialer.DialContext(ctx, "tcp", f.upstream)
			if err != nil {
				return nil, err
			}
			return &upstreamConn{Conn: conn, r: bufio.NewReader(conn), w: bufio.NewWriter(conn)}, nil
		}
	}
}

// release returns c to the free connections, or closes it when there are enough.
func (f *forwarder) release(c *upstreamConn) {
	select {
	case f.idle <- c:
	default:
		c.Close()
	}
}

// open reports whether the app has not closed c while it was free (an app's keep-alive timeout, a
// restart): one non-blocking peek, so a request is never written to a connection that is gone.
func (c *upstreamConn) open() bool {
	if c.r.Buffered() > 0 {
		return false // the app said something unasked: the connection is out of step
	}
	raw, err := c.Conn.(syscall.Conn).SyscallConn()
	if err != nil {
		return false
	}
	open := false
	var peek [1]byte
	if err := raw.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), peek[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = n < 0 && errors.Is(err, syscall.EAGAIN)
		return true
	}); err != nil {
		return false
	}
	return open
}

// hopByHop are the headers that concern one connection, not the request (RFC 9110, 7.6.1).
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// isHopByHop reports whether the header key is hop-by-hop: one of hopByHop or named by the Connection
// header.
func isHopByHop(key string, connectionTokens []string) bool {
	for _, h := range hopByHop {
		if key == h {
			return true
		}
	}
	return hasToken(connectionTokens, key)
}

// hasToken reports whether a comma-separated header's values name token, in any case (RFC 9110, 5.6.1).
// The gate's own, not golang.org/x/net's: that one would link a second copy of the IDNA tables net/http
// already carries.
func hasToken(values []string, token string) bool {
	for _, value := range values {
		for item := range strings.SplitSeq(value, ",") {
			if strings.EqualFold(strings.TrimSpace(item), token) {
				return true
			}
		}
	}
	return false
}

// isForwarding reports whether the header key is one the gate sets itself, so a client's own never
// reaches the app.
func isForwarding(key string) bool {
	return key == "Forwarded" || key == "X-Forwarded-For" || key == "X-Forwarded-Host" || key == "X-Forwarded-Proto"
}

func removeHopByHop(header http.Header) {
	connectionTokens := header["Connection"]
	for key := range header {
		if isHopByHop(key, connectionTokens) {
			delete(header, key)
		}
	}
}

// announceTrailers declares the answer's trailers before its headers are written, so the server sends
// them after the body.
func announceTrailers(header http.Header, trailer http.Header) {
	for key := range trailer {
		header.Add("Trailer", key)
	}
}
