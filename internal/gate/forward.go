package gate

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasegate/leasegate/internal/contract"
)

// forwarder passes a plain HTTP/1.1 request to the app on a pooled connection (connPool) and copies the
// answer back, all in the handler's goroutine. It is the gate's path for nearly every request (see
// takes); upgrades, gRPC, other HTTP/2, requests with trailers and bodies larger than maxForwardedBody or
// of unknown length go through ReverseProxy.
//
// Why not ReverseProxy for all: its Transport hands each request to a writing and a reading goroutine and
// the answer back through channels, and writes a request's headers and its body apart. In a process of
// its own on shared cores every hand-off can wake a thread, and each wake is time added to the request
// (docs/performance.md has test/bench/gate's comparison of the two).
type forwarder struct {
	connPool
}

func newForwarder(upstream string) *forwarder {
	return &forwarder{connPool{upstream: upstream, dialer: net.Dialer{Timeout: 5 * time.Second}, idleTimeout: idleUpstreamTimeout, reapEvery: reapEvery}}
}

// maxForwardedBody is the largest request body the forwarder takes: it reads such a body whole before it
// writes the request, so the write never waits on an app that answers before reading (a 401, a 413), and
// a request can be sent again on a fresh connection. Larger bodies, and bodies of unknown length, stream
// through ReverseProxy.
const maxForwardedBody = 32 << 10

// takes reports whether the forwarder serves r: an HTTP/1.x request with a body of known length up to
// maxForwardedBody, that does not ask to upgrade the connection, and carries no trailers.
func (f *forwarder) takes(r *http.Request) bool {
	return r.ProtoMajor == 1 && r.ContentLength >= 0 && r.ContentLength <= maxForwardedBody && len(r.Trailer) == 0 &&
		r.Method != http.MethodConnect && !hasToken(r.Header["Connection"], "upgrade")
}

// forward sends r with body (read whole by the caller) and copies the answer to w; buf is a spare buffer
// for the copy. Failures before the answer started are 502s; a failure in the middle of the answer
// aborts the client's connection, as ReverseProxy does, so the client cannot take a cut answer for a
// whole one.
func (f *forwarder) forward(w http.ResponseWriter, r *http.Request, body, buf []byte) {
	answer, err := f.roundTrip(w, r, body)
	if err != nil {
		badGateway(w, r, err)
		return
	}
	resp := answer.resp
	header := w.Header()
	for key, values := range resp.Header {
		header[key] = values
	}
	removeHopByHop(header, answer.conn.connection)
	announceTrailers(header, resp.Trailer)
	w.WriteHeader(resp.StatusCode)
	err = copyBody(w, resp, buf)
	for key, values := range resp.Trailer {
		header[http.TrailerPrefix+key] = values
	}
	if !answer.stop() || err != nil || resp.Close {
		answer.conn.Close()
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		return
	}
	f.release(answer.conn)
}

// answerHead is the head of the app's final answer to a request and the connection its body follows on.
type answerHead struct {
	resp *http.Response
	conn *upstreamConn
	// stop, called when the answer is copied, reports whether the client was still there: a client that
	// goes away ends the exchange, and the answer's streaming after it, by setting a deadline on conn,
	// which may then hold part of an answer and is closed instead of pooled.
	stop func() bool
}

// roundTrip sends r with body and reads the head of the app's answer. A connection taken from the pool
// that the app closed before answering (its keep-alive timeout raced the request) is replaced once by a
// fresh one, for requests that may be sent twice, as http.Transport does.
func (f *forwarder) roundTrip(w http.ResponseWriter, r *http.Request, body []byte) (answerHead, error) {
	for attempt := 0; ; attempt++ {
		c, err := f.conn(r.Context(), attempt > 0)
		if err != nil {
			return answerHead{}, err
		}
		stop := context.AfterFunc(r.Context(), func() { _ = c.SetDeadline(time.Unix(1, 0)) })
		resp, err := f.exchange(w, c, r, body)
		if err == nil {
			return answerHead{resp: resp, conn: c, stop: stop}, nil
		}
		stop()
		c.Close()
		if !c.reused || attempt > 0 || !c.nothingRead(err) || !replayable(r) {
			return answerHead{}, err
		}
	}
}

// exchange writes the request on conn and reads the head of the answer. Informational answers (102,
// 103) are passed on to the client as they come, at most maxInformational of them.
func (f *forwarder) exchange(w http.ResponseWriter, conn *upstreamConn, r *http.Request, body []byte) (*http.Response, error) {
	if err := writeRequest(conn.w, r, body, f.upstream); err != nil {
		return nil, err
	}
	for range maxInformational + 1 {
		conn.limitHead()
		conn.peekConnection()
		resp, err := http.ReadResponse(conn.r, r)
		conn.unlimit()
		switch {
		case err != nil:
			if errors.Is(err, errHeadTooLarge) {
				err = fmt.Errorf("the head of the app's answer is larger than %d bytes", maxResponseHead)
			}
			return nil, err
		case resp.StatusCode < 100:
			return nil, fmt.Errorf("the app answered with status %d, not an HTTP status", resp.StatusCode)
		case resp.StatusCode >= 200:
			return resp, nil
		case resp.StatusCode == http.StatusSwitchingProtocols:
			return nil, errors.New("the app switched protocols for a request that did not ask to upgrade")
		case resp.StatusCode != http.StatusContinue:
			header := w.Header()
			for key, values := range resp.Header {
				header[key] = values
			}
			removeHopByHop(header, conn.connection)
			w.WriteHeader(resp.StatusCode)
			clear(header) // a 1xx's headers are its own, not the final answer's
		}
	}
	return nil, fmt.Errorf("the app sent more than %d informational answers", maxInformational)
}

const (
	// maxInformational bounds the 1xx answers read before the final one, as http.Transport does (5).
	maxInformational = 5
	// maxResponseHead bounds the head of the app's answer, so an app that is not speaking HTTP on its
	// port (a wrong port) cannot make the agent, its pod's elector, run out of memory.
	maxResponseHead = 1 << 20
)

// replayable reports whether r may be sent to the app twice: a method that is safe to repeat, or a
// request that carries an idempotency key, as http.Transport decides.
func replayable(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, key := r.Header["Idempotency-Key"]
	_, xKey := r.Header["X-Idempotency-Key"]
	return key || xKey
}

// writeRequest writes r as the app should see it: the client's method, target (its query as sent) and
// Host, the headers but those that concern only the hop to the gate, X-Forwarded-For/-Host/-Proto set by
// the gate (as ReverseProxy's SetXForwarded does; ServeHTTP dropped the client's), and the body, in one write when it fits the buffer. A
// client that named no Host (HTTP/1.0) gets the app's address, as http.Transport would send.
func writeRequest(w *bufio.Writer, r *http.Request, body []byte, upstream string) error {
	host := r.Host
	if host == "" {
		host = upstream
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
		// it when the body was read; the fencing token is written after the hop-by-hop headers are left
		// out, so that a client's Connection header naming it cannot strip it.
		if isHopByHop(key, connectionTokens) || key == "Content-Length" || key == "Expect" || key == contract.FencingTokenHeader {
			continue
		}
		for _, value := range values {
			w.WriteString(key)
			w.WriteString(": ")
			w.WriteString(value)
			w.WriteString("\r\n")
		}
	}
	for _, token := range r.Header[contract.FencingTokenHeader] {
		w.WriteString(contract.FencingTokenHeader)
		w.WriteString(": ")
		w.WriteString(token)
		w.WriteString("\r\n")
	}
	if client, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		w.WriteString("X-Forwarded-For: ")
		w.WriteString(client)
		w.WriteString("\r\n")
	}
	if r.Host != "" {
		w.WriteString("X-Forwarded-Host: ")
		w.WriteString(r.Host)
		w.WriteString("\r\n")
	}
	// TE is hop-by-hop, but "trailers" in it says the client takes trailers, which gRPC-minded apps
	// check: passed on, as ReverseProxy does.
	if hasToken(r.Header["Te"], "trailers") {
		w.WriteString("Te: trailers\r\n")
	}
	if r.TLS != nil {
		w.WriteString("X-Forwarded-Proto: https\r\n")
	} else {
		w.WriteString("X-Forwarded-Proto: http\r\n")
	}
	// Content-Length as http.Transport sends it: for any body, and 0 for the methods that expect one.
	if len(body) > 0 || r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch {
		w.WriteString("Content-Length: ")
		w.WriteString(strconv.Itoa(len(body)))
		w.WriteString("\r\n")
	}
	w.WriteString("\r\n")
	w.Write(body)
	return w.Flush()
}

// copyBody copies the answer's body. One of unknown length (a stream: server-sent events, chunked
// output) is flushed as it comes; one of known length goes out when the handler returns, in one write if
// it fits the server's buffer.
func copyBody(w http.ResponseWriter, resp *http.Response, buf []byte) error {
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

var errHeadTooLarge = errors.New("head too large")

// Read reads from the app, within headRoom while a head is read.
func (c *upstreamConn) Read(p []byte) (int, error) {
	if c.limited {
		if c.headRoom <= 0 {
			return 0, errHeadTooLarge
		}
		if int64(len(p)) > c.headRoom {
			p = p[:c.headRoom]
		}
	}
	n, err := c.Conn.Read(p)
	c.headRoom -= int64(n)
	c.read += int64(n)
	return n, err
}

// limitHead bounds what the reader may take until unlimit: the head of an answer, and what the reader
// buffered of it already counts.
func (c *upstreamConn) limitHead() {
	c.limited, c.headRoom = true, maxResponseHead-int64(c.r.Buffered())
}

func (c *upstreamConn) unlimit() { c.limited = false }

// peekConnection keeps the Connection header of the answer head at the front of the reader, when the
// head fits the reader's buffer (4 KiB), without consuming it.
func (c *upstreamConn) peekConnection() {
	c.connection = connectionValues(c.connection[:0], c.peekHead())
}

// connectionValues appends the values of the Connection header lines in head to values.
func connectionValues(values []string, head []byte) []string {
	for len(head) > 0 {
		line, rest, _ := bytes.Cut(head, []byte("\n"))
		if len(line) > len("connection:") && bytes.EqualFold(line[:len("connection:")], []byte("connection:")) {
			values = append(values, string(bytes.TrimSpace(line[len("connection:"):])))
		}
		head = rest
	}
	return values
}

// headConn is a connection of ReverseProxy's HTTP/1 transport to the app. It reads the Connection
// header of each final answer head as the head passes: net/http's client drops the whole header when
// it says close, and with it the names of the headers that the client must not get (RFC 9110, 7.6.1).
type headConn struct {
	net.Conn

	mu sync.Mutex
	// reading: a request was sent (expect) and the final head of its answer has not ended; head holds
	// what of the answer's heads was read meanwhile; values are the final head's Connection values.
	reading bool
	head    []byte
	values  []string
}

// expect readies c for the answer to the request about to be written on it.
func (c *headConn) expect() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reading, c.head, c.values = true, c.head[:0], c.values[:0]
}

// connection is the Connection values of the final head of the last answer read.
func (c *headConn) connection() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.values
}

func (c *headConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		if c.reading {
			c.take(p[:n])
		}
		c.mu.Unlock()
	}
	return n, err
}

// take reads b, the next bytes of the answer, up to the end of its final head: informational heads
// (1xx but 101) come before it.
func (c *headConn) take(b []byte) {
	c.head = append(c.head, b...)
	for {
		end := headEnd(c.head)
		if end < 0 {
			if len(c.head) > maxResponseHead {
				c.reading, c.head = false, nil // the transport refuses the answer
			}
			return
		}
		status, _, _ := bytes.Cut(c.head, []byte("\n"))
		if fields := bytes.Fields(status); len(fields) < 2 || len(fields[1]) != 3 || fields[1][0] != '1' || string(fields[1]) == "101" {
			c.values = connectionValues(c.values, c.head[:end])
			c.reading, c.head = false, c.head[:0]
			return
		}
		sep := len("\n\n")
		if bytes.HasPrefix(c.head[end:], []byte("\n\r\n")) {
			sep = len("\n\r\n")
		}
		c.head = c.head[:copy(c.head, c.head[end+sep:])]
	}
}

// peekHead returns the answer head at the front of the reader, waiting for it as net/http would; nil
// when it does not fit the buffer or the connection fails (which the read of the head then reports).
func (c *upstreamConn) peekHead() []byte {
	for n := 1; ; n = c.r.Buffered() + 1 {
		if n > c.r.Size() {
			return nil
		}
		if _, err := c.r.Peek(n); err != nil {
			return nil
		}
		buffered, _ := c.r.Peek(c.r.Buffered())
		if end := headEnd(buffered); end >= 0 {
			return buffered[:end]
		}
	}
}

// nothingRead reports whether err ended an exchange in which the app sent nothing at all: it closed the
// connection (EOF, reset) without answering.
func (c *upstreamConn) nothingRead(err error) bool {
	return c.read == 0 && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE))
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

// headEnd is where a head ends: at its first empty line, "\r\n" or, as net/http also reads, "\n"; -1
// when it has not ended.
func headEnd(b []byte) int {
	crlf, lf := bytes.Index(b, []byte("\n\r\n")), bytes.Index(b, []byte("\n\n"))
	if crlf < 0 || (lf >= 0 && lf < crlf) {
		return lf
	}
	return crlf
}

// removeHopByHop deletes the app's hop-by-hop headers from the answer the client gets: those it names
// in its Connection header, as net/http left it or as connection (its values as the app sent them) has.
func removeHopByHop(header http.Header, connection []string) {
	connectionTokens := header["Connection"]
	for key := range header {
		if isHopByHop(key, connectionTokens) || hasToken(connection, key) {
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
