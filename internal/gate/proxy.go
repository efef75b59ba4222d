package gate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/gate/rules"
	"github.com/leasegate/leasegate/internal/lease"
)

// Leadership is what the gate reads on every request: the elector of the election it follows.
type Leadership interface {
	// Status says whether this pod leads, and who does.
	Status() lease.Status
	// Expiry is when the lease could change hands, as this pod judges it; zero when unknown or released.
	Expiry() time.Time
}

// Gate is the proxy. It is an http.Handler; serve it over HTTP/1.1 and cleartext HTTP/2 (h2c, for gRPC).
type Gate struct {
	policy rules.Policy
	leader Leadership
	// bodyTimeout bounds how long a forwarded request's body may take to arrive.
	bodyTimeout time.Duration
	// forward takes plain HTTP/1.x requests, nearly all of them; reverseProxy the rest (upgrades such as
	// WebSocket, HTTP/2 that is not gRPC, requests with trailers, large or streamed bodies); grpc the
	// gRPC calls.
	forward      *forwarder
	reverseProxy http.Handler
	grpc         http.Handler
	// transports are reverseProxy's and grpc's, whose free connections Close closes.
	transports []*http.Transport
	metrics    *metrics

	// token is the fencing token of the term this pod leads, as the header value (stampToken).
	token atomic.Pointer[fencingToken]

	// streaming are the mutations whose bodies are still streaming to the app; Lost cuts them.
	mu        sync.Mutex
	streaming map[*exchange]struct{}
}

// New returns a gate in front of upstream ("127.0.0.1:<the app's port>"); a forwarded request's body
// has bodyTimeout to arrive.
func New(upstream string, policy rules.Policy, leader Leadership, registry prometheus.Registerer, bodyTimeout time.Duration) (*Gate, error) {
	if err := rules.CheckUpstream(upstream); err != nil {
		return nil, fmt.Errorf("upstream %q: %w", upstream, err)
	}
	if err := rules.CheckBodyTimeout(bodyTimeout); err != nil {
		return nil, fmt.Errorf("body timeout %w", err)
	}
	target := &url.URL{Scheme: "http", Host: upstream}
	rewrite := func(pr *httputil.ProxyRequest) {
		if e, ok := pr.In.Context().Value(exchangeKey{}).(*exchange); ok {
			pr.Out = pr.Out.WithContext(httptrace.WithClientTrace(pr.Out.Context(), e.trace()))
		}
		pr.SetURL(target)
		pr.Out.Host = pr.In.Host // the app sees the Host its clients asked for
		pr.SetXForwarded()
		// The fencing token is set again after ReverseProxy removed the hop-by-hop headers, which by then
		// included any header the client's Connection header named: a client naming the token there
		// must not strip it. In's header is the client's with the gate's token (ServeHTTP dropped the
		// client's own), untouched by that removal.
		if token := pr.In.Header[contract.FencingTokenHeader]; token != nil {
			pr.Out.Header[contract.FencingTokenHeader] = token
		}
		// The gate's server answered the client's Expect when the body was read; the app's own 100
		// would reach the client as a second one.
		pr.Out.Header.Del("Expect")
	}
	// gRPC needs HTTP/2 end to end; the app listens in cleartext on loopback, so h2c.
	// DisableCompression: the app gets the Accept-Encoding its client sent, not one the gate added (and
	// then undid by decompressing the answer).
	h2c := &http.Transport{Protocols: new(http.Protocols), MaxIdleConnsPerHost: 64, DisableCompression: true}
	h2c.Protocols.SetUnencryptedHTTP2(true)
	// The HTTP/1 transport's connections read the Connection header of each answer before net/http
	// drops it (see headConn); its heads are bounded as the forwarder's are.
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	http1 := &http.Transport{
		MaxIdleConnsPerHost: 64, IdleConnTimeout: idleUpstreamTimeout, DisableCompression: true, MaxResponseHeaderBytes: maxResponseHead,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &headConn{Conn: direct(conn)}, nil
		},
	}
	g := &Gate{
		policy:      policy,
		leader:      leader,
		bodyTimeout: bodyTimeout,
		forward:     newForwarder(upstream),
		transports:  []*http.Transport{http1, h2c},
		metrics:     newMetrics(registry),
		streaming:   map[*exchange]struct{}{},
	}
	// FlushInterval 0: a response of known length goes out in one write. Streamed ones (server-sent
	// events, gRPC, anything without a Content-Length) are flushed as they come: ReverseProxy does so
	// for them whatever this says.
	g.reverseProxy = &httputil.ReverseProxy{Rewrite: rewrite, Transport: http1, FlushInterval: 0, ErrorHandler: g.proxyError, ModifyResponse: checkAnswer, BufferPool: buffers}
	g.grpc = &httputil.ReverseProxy{Rewrite: rewrite, Transport: h2c, FlushInterval: 0, ErrorHandler: g.proxyError, ModifyResponse: checkAnswer, BufferPool: buffers}
	return g, nil
}

// Close closes the gate's connections to the app once their requests are done: call it after the
// server in front of it has shut down, so the app does not keep connections open for a gate that is gone.
func (g *Gate) Close() {
	g.forward.closeIdle()
	for _, t := range g.transports {
		t.CloseIdleConnections()
	}
}

// Lost cuts the mutations whose bodies are still streaming to the app: call it the moment this pod
// stops leading. Their requests to the app are aborted (the connection or HTTP/2 stream reset), so the
// app never gets the end of their bodies. Each streamed body also checks leadership on every piece it
// passes, so Lost only makes the cut prompt; nothing passes after the loss without it.
func (g *Gate) Lost() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for b := range g.streaming {
		b.cut()
	}
}

// ServeHTTP passes the request to the app unless it mutates and this pod does not lead.
func (g *Gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	dropClientGateHeaders(r.Header)
	if _, ok := r.Header["Upgrade"]; ok {
		dropHTTPUpgrades(r.Header)
	}
	req := rules.RequestOf(r)
	mutates := g.policy.Mutates(req)
	if mutates && g.refused(w, req, start) {
		return
	}
	switch {
	case req.IsGRPC():
		g.stream(g.grpc, w, r, mutates, start)
	case g.forward.takes(r):
		g.forwardWhole(w, r, req, mutates, start)
	default:
		g.stream(g.reverseProxy, w, r, mutates, start)
	}
}

// dropHTTPUpgrades removes from a request's Upgrade header the protocols that carry HTTP requests of
// their own (h2c, h2, HTTP/<version>), and the Upgrade header itself when none is left, with its mentions
// in Connection and h2c's HTTP2-Settings. Passed to the app, such an upgrade would turn the connection
// into a tunnel whose requests the gate never sees: mutations on a follower, and on a leader after it
// stopped leading. A server that does not take an upgrade answers the request as it came (RFC 9110,
// 7.8), so the client gets an HTTP/1.1 answer, judged as any request; the gate serves HTTP/2 itself to
// clients that speak it from the start (prior knowledge), as gRPC clients do.
func dropHTTPUpgrades(header http.Header) {
	var kept []string
	dropped := false
	for _, value := range header["Upgrade"] {
		for protocol := range strings.SplitSeq(value, ",") {
			if protocol = strings.TrimSpace(protocol); protocol == "" {
				continue
			}
			name, _, _ := strings.Cut(protocol, "/")
			if strings.EqualFold(name, "h2c") || strings.EqualFold(name, "h2") || strings.EqualFold(name, "http") {
				dropped = true
				continue
			}
			kept = append(kept, protocol)
		}
	}
	if !dropped {
		return
	}
	delete(header, "Http2-Settings")
	if len(kept) > 0 {
		header["Upgrade"] = []string{strings.Join(kept, ", ")}
		return
	}
	delete(header, "Upgrade")
	var connection []string
	for _, value := range header["Connection"] {
		for token := range strings.SplitSeq(value, ",") {
			if token = strings.TrimSpace(token); token != "" && !strings.EqualFold(token, "upgrade") && !strings.EqualFold(token, "http2-settings") {
				connection = append(connection, token)
			}
		}
	}
	if len(connection) == 0 {
		delete(header, "Connection")
	} else {
		header["Connection"] = []string{strings.Join(connection, ", ")}
	}
}

// refused answers a mutation while this pod does not lead, and reports whether it did. A mutation it
// passes carries the fencing token of the term it was passed in, from the same reading of the elector.
func (g *Gate) refused(w http.ResponseWriter, req rules.Request, start time.Time) bool {
	status := g.leader.Status()
	if status.IsLeader {
		g.stampToken(req.Header, status.FencingToken)
		return false
	}
	g.refuse(w, req, status)
	g.metrics.observe(true, outcomeGated, start)
	return true
}

// forwardWhole reads the body (which the forwarder takes whole, at most maxForwardedBody) within the
// body timeout, decides a mutation again once it is in, so that the app never gets a mutation after
// this pod stopped leading however slowly its body came, and forwards it.
func (g *Gate) forwardWhole(w http.ResponseWriter, r *http.Request, req rules.Request, mutates bool, start time.Time) {
	buf := buffers.Get()
	defer buffers.Put(buf)
	body := buf[:r.ContentLength]
	if len(body) > 0 {
		if err := g.readBody(w, r, body, start); err != nil {
			code := http.StatusBadRequest
			if errors.Is(err, os.ErrDeadlineExceeded) {
				code = http.StatusRequestTimeout
				err = fmt.Errorf("it did not arrive within %s", g.bodyTimeout)
			}
			http.Error(w, "leasegate gate: reading the request's body: "+err.Error(), code)
			g.metrics.observe(mutates, outcomeIncomplete, start)
			return
		}
		if mutates && g.refused(w, req, start) {
			return
		}
	}
	// Deferred, so that a request whose answer was cut short (the app's connection broke mid-answer, and
	// the handler aborts with http.ErrAbortHandler) is counted and timed too.
	defer g.metrics.observe(mutates, outcomePassed, start)
	g.forward.forward(w, r, body, buf)
}

// readBody reads r's body into body, all of it within the body timeout from start, the request's
// arrival.
func (g *Gate) readBody(w http.ResponseWriter, r *http.Request, body []byte, start time.Time) error {
	client := readDeadline(w)
	_ = client.SetReadDeadline(start.Add(g.bodyTimeout))
	if _, err := io.ReadFull(r.Body, body); err != nil {
		// The deadline stays: the server would otherwise wait for the rest of the body before it
		// answers, to keep the connection.
		return err
	}
	// Lifted once the body is in: the server reads on to notice a client that goes away, and a
	// deadline left behind would end the request while the app answers.
	_ = client.SetReadDeadline(time.Time{})
	return nil
}

// deadliner sets the read deadline of a request's body.
type deadliner interface{ SetReadDeadline(time.Time) error }

// readDeadline is what sets the read deadline of the request w answers: the server's own writer,
// without the allocation of an http.ResponseController, when it is that.
func readDeadline(w http.ResponseWriter) deadliner {
	if d, ok := w.(deadliner); ok {
		return d
	}
	return http.NewResponseController(w)
}

// stream passes r through proxy, its body streaming to the app as it comes. A mutation's body is
// guarded: every piece is passed on only while this pod leads, and Lost cuts it, so the app never gets
// the end of a mutation's body after this pod stopped leading; it must also arrive within the body
// timeout, but a gRPC call's, whose client streams may rightly last as long as the call.
func (g *Gate) stream(proxy http.Handler, w http.ResponseWriter, r *http.Request, mutates bool, start time.Time) {
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	e := &exchange{gate: g, cancel: cancel, grpc: rules.RequestOf(r).IsGRPC()}
	defer func() { g.metrics.observe(mutates, outcomeOf(e.stopped()), start) }()
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		e.ReadCloser, e.guarded, e.http1 = r.Body, mutates, r.ProtoMajor == 1
		if mutates && !e.grpc {
			e.client = readDeadline(w)
			_ = e.client.SetReadDeadline(start.Add(g.bodyTimeout))
		}
		if mutates {
			g.mu.Lock()
			g.streaming[e] = struct{}{}
			g.mu.Unlock()
			defer e.done()
		}
		r.Body = e
	}
	proxy.ServeHTTP(hopByHop1xx{w}, r.WithContext(context.WithValue(ctx, exchangeKey{}, e)))
}

// outcomeOf is the outcome of a streamed request that cause stopped (nil: nothing did).
func outcomeOf(cause error) string {
	switch {
	case errors.Is(cause, errLost):
		return outcomeGated
	case errors.Is(cause, errBodyTimeout), errors.Is(cause, errIncomplete):
		return outcomeIncomplete
	}
	return outcomePassed
}

var (
	// errLost ends a mutation's body that was streaming when this pod stopped leading.
	errLost = errors.New("this pod stopped leading while the request's body was streaming")
	// errBodyTimeout ends a mutation's body that did not arrive within the body timeout.
	errBodyTimeout = errors.New("the request's body did not arrive within the body timeout")
	// errIncomplete ends a body whose client went away or broke its framing.
	errIncomplete = errors.New("the request's body did not arrive whole")
)

type exchangeKey struct{}

// exchange is a request that streams through ReverseProxy: its body as the app gets it (a mutation's
// guarded: a piece read from the client passes only while this pod leads, and its end (EOF) too), and
// what the gate saw of its way to the app.
type exchange struct {
	io.ReadCloser
	gate   *Gate
	cancel context.CancelCauseFunc
	// guarded: a mutation's body; grpc: a gRPC call; http1: the client speaks HTTP/1.
	guarded, grpc, http1 bool
	// client sets the read deadline of the client's body: the body timeout, and on HTTP/1 the cut.
	client deadliner
	// reached: the request's head was written toward the app, so the app may act on it whatever
	// follows; conn is the HTTP/1 connection to the app it took.
	reached atomic.Bool
	conn    atomic.Pointer[headConn]
	// why is what stopped the body (errLost, errBodyTimeout, errIncomplete), the first of them: the
	// context's cause may be the server's own cancellation, which comes first when the client's
	// connection fails.
	why atomic.Pointer[error]
}

// stop ends the request to the app for why, unless something stopped it before.
func (e *exchange) stop(why error) {
	e.why.CompareAndSwap(nil, &why)
	e.cancel(why)
}

// stopped is what stopped the body, or nil.
func (e *exchange) stopped() error {
	if why := e.why.Load(); why != nil {
		return *why
	}
	return nil
}

func (e *exchange) Read(p []byte) (int, error) {
	n, err := e.ReadCloser.Read(p)
	if e.guarded && !e.gate.leader.Status().IsLeader {
		e.cut()
		return 0, errLost
	}
	switch {
	case err == io.EOF:
		// The body is in: what follows is the answer, which Lost leaves alone, and which the server,
		// reading on to notice a client that goes away, must not end at the deadline.
		e.done()
		if e.client != nil {
			_ = e.client.SetReadDeadline(time.Time{})
		}
	case errors.Is(err, os.ErrDeadlineExceeded):
		e.stop(fmt.Errorf("%w (%s)", errBodyTimeout, e.gate.bodyTimeout)) // unless cut, which came first
	case err != nil:
		e.stop(fmt.Errorf("%w: %w", errIncomplete, err))
	}
	return n, err
}

// cut aborts the request to the app, and ends a read of the body that may be waiting on the client
// (http.Transport waits for it before it gives up on the app). On HTTP/1 an expired read deadline ends
// it, so that the server also does not wait for the rest of the body before it sends the answer, and
// closes the connection after; on HTTP/2 closing the body does, and the stream is reset when the
// handler returns.
func (e *exchange) cut() {
	e.stop(errLost)
	if e.http1 {
		_ = e.client.SetReadDeadline(time.Unix(1, 0))
	} else {
		_ = e.ReadCloser.Close()
	}
}

// done takes the body off the gate's streaming bodies.
func (e *exchange) done() {
	e.gate.mu.Lock()
	delete(e.gate.streaming, e)
	e.gate.mu.Unlock()
}

// trace follows the request on its way to the app.
func (e *exchange) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			if c, ok := info.Conn.(*headConn); ok {
				c.expect()
				e.conn.Store(c)
			}
		},
		WroteHeaders: func() { e.reached.Store(true) },
	}
}

// unanswered is the status a streamed request gets when the app's answer did not come: what the
// client may do next. A 503 (or gRPC UNAVAILABLE) tells it to retry, so it is given only while nothing
// of the request was written toward the app; once its head was, the app may have acted on it, whatever
// cut it, and the answer is a 502 (gRPC INTERNAL), which promises nothing.
func unanswered(cause error, reached bool) int {
	switch {
	case reached:
		return http.StatusBadGateway
	case errors.Is(cause, errLost):
		return http.StatusServiceUnavailable
	case errors.Is(cause, errBodyTimeout):
		return http.StatusRequestTimeout
	case errors.Is(cause, errIncomplete):
		return http.StatusBadRequest
	}
	return http.StatusBadGateway
}

// proxyError answers when ReverseProxy could not get the app's answer (see unanswered).
func (g *Gate) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	e, ok := r.Context().Value(exchangeKey{}).(*exchange)
	if !ok {
		badGateway(w, r, err)
		return
	}
	reached, cause := e.reached.Load(), e.stopped()
	switch code := unanswered(cause, reached); {
	case code == http.StatusServiceUnavailable:
		g.refuse(w, rules.RequestOf(r), g.leader.Status())
	case code != http.StatusBadGateway:
		http.Error(w, "leasegate gate: reading the request's body: "+cause.Error(), code)
	case reached && e.grpc:
		// A gRPC client takes a 502 for UNAVAILABLE, which it may retry.
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Grpc-Status", "13") // INTERNAL
		w.Header().Set("Grpc-Message", grpcEncode("leasegate gate: the call reached the app, which did not answer: "+reason(err, cause)))
		w.WriteHeader(http.StatusOK)
	default:
		badGateway(w, r, errors.New(reason(err, cause)))
	}
}

// reason says why a request that reached the app got no answer: the gate's cut, which the app may have
// acted on before it, or the transport's error.
func reason(err, cause error) string {
	if errors.Is(cause, errLost) || errors.Is(cause, errBodyTimeout) || errors.Is(cause, errIncomplete) {
		return cause.Error() + "; part of the request had reached the app, which may have acted on it"
	}
	return err.Error()
}

// checkAnswer refuses an answer whose status is not an HTTP status (below 100), which the server would
// refuse to write: it becomes a 502. It removes the headers the app's Connection header named, which
// ReverseProxy cannot when net/http's client dropped that header for saying close (see headConn).
func checkAnswer(resp *http.Response) error {
	if resp.StatusCode < 100 {
		return fmt.Errorf("the app answered with status %d, not an HTTP status", resp.StatusCode)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return nil // its Connection and Upgrade are ReverseProxy's to check and pass
	}
	if e, ok := resp.Request.Context().Value(exchangeKey{}).(*exchange); ok {
		if c := e.conn.Load(); c != nil {
			removeHopByHop(resp.Header, c.connection())
		}
	}
	return nil
}

// hopByHop1xx removes the app's hop-by-hop headers from the informational answers (103 Early Hints)
// ReverseProxy passes on, which it copies whole; the final answer's it removes itself.
type hopByHop1xx struct{ http.ResponseWriter }

func (w hopByHop1xx) WriteHeader(code int) {
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		removeHopByHop(w.Header(), nil)
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets ReverseProxy flush and hijack (upgrades) the server's writer.
func (w hopByHop1xx) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Refusal is the JSON body of a follower's 503.
type Refusal struct {
	Error             string `json:"error"`
	Lease             string `json:"lease"`
	Holder            string `json:"holder"`
	RetryAfterSeconds int    `json:"retryAfterSeconds"`
}

// refuse answers a mutation on a follower: HTTP 503 with Retry-After and who leads, or gRPC UNAVAILABLE
// with the same in its message.
func (g *Gate) refuse(w http.ResponseWriter, req rules.Request, status lease.Status) {
	retry := rules.RetryAfter(g.leader.Expiry(), time.Now())
	holder := status.Holder
	if holder == "" {
		holder = "nobody"
	}
	w.Header().Set("Retry-After", strconv.Itoa(retry))
	if req.IsGRPC() {
		// A trailers-only response: the status travels in the headers of a response without a body.
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Grpc-Status", "14") // UNAVAILABLE: the client may retry, elsewhere or later
		w.Header().Set("Grpc-Message", grpcEncode(fmt.Sprintf("not the leader: lease %s is held by %s; retry in %ds", status.Lease, holder, retry)))
		w.WriteHeader(http.StatusOK)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusServiceUnavailable)
	_ = json.NewEncoder(w).Encode(Refusal{Error: "not the leader", Lease: status.Lease, Holder: status.Holder, RetryAfterSeconds: retry})
}

// grpcEncode percent-encodes a grpc-message as the gRPC HTTP/2 protocol asks: bytes outside printable
// ASCII, and '%'.
func grpcEncode(s string) string {
	const hex = "0123456789ABCDEF"
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '%' {
			out = append(out, '%', hex[c>>4], hex[c&15])
		} else {
			out = append(out, c)
		}
	}
	return string(out)
}

// bufferPool reuses the proxy's copy buffers: without it, every request allocates 32 KiB.
type bufferPool struct{ pool sync.Pool }

func (p *bufferPool) Get() []byte {
	if b, ok := p.pool.Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, 32<<10)
}

func (p *bufferPool) Put(b []byte) { p.pool.Put(&b) }

var buffers = &bufferPool{}

// badGateway answers when the app cannot be reached: its problem, not the gate's decision.
func badGateway(w http.ResponseWriter, _ *http.Request, err error) {
	http.Error(w, "leasegate gate: the app did not answer: "+err.Error(), http.StatusBadGateway)
}
