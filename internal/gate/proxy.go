package gate

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
	policy Policy
	leader Leadership
	// forward takes plain HTTP/1.x requests, nearly all of them; reverseProxy the rest (upgrades such as
	// WebSocket, HTTP/2 that is not gRPC, requests with trailers, large or streamed bodies); grpc the
	// gRPC calls.
	forward      *forwarder
	reverseProxy http.Handler
	grpc         http.Handler
	// transports are reverseProxy's and grpc's, whose free connections Close closes.
	transports []*http.Transport
	metrics    *metrics
}

// New returns a gate in front of upstream ("127.0.0.1:<the app's port>").
func New(upstream string, policy Policy, leader Leadership, registry prometheus.Registerer) (*Gate, error) {
	if _, _, err := net.SplitHostPort(upstream); err != nil {
		return nil, fmt.Errorf("upstream %q: want host:port, such as 127.0.0.1:8080: %w", upstream, err)
	}
	target := &url.URL{Scheme: "http", Host: upstream}
	rewrite := func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		pr.Out.Host = pr.In.Host // the app sees the Host its clients asked for
		pr.SetXForwarded()
	}
	// gRPC needs HTTP/2 end to end; the app listens in cleartext on loopback, so h2c.
	h2c := &http.Transport{Protocols: new(http.Protocols), MaxIdleConnsPerHost: 64}
	h2c.Protocols.SetUnencryptedHTTP2(true)
	http1 := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}
	return &Gate{
		policy:  policy,
		leader:  leader,
		forward: newForwarder(upstream),
		// FlushInterval 0: a response of known length goes out in one write. Streamed ones (server-sent
		// events, gRPC, anything without a Content-Length) are flushed as they come: ReverseProxy does so
		// for them whatever this says.
		reverseProxy: &httputil.ReverseProxy{Rewrite: rewrite, Transport: http1, FlushInterval: 0, ErrorHandler: badGateway, BufferPool: buffers},
		grpc:         &httputil.ReverseProxy{Rewrite: rewrite, Transport: h2c, FlushInterval: 0, ErrorHandler: badGateway, BufferPool: buffers},
		transports:   []*http.Transport{http1, h2c},
		metrics:      newMetrics(registry),
	}, nil
}

// Close closes the gate's connections to the app once their requests are done: call it after the
// server in front of it has shut down, so the app does not keep connections open for a gate that is gone.
func (g *Gate) Close() {
	g.forward.closeIdle()
	for _, t := range g.transports {
		t.CloseIdleConnections()
	}
}

// ServeHTTP passes the request to the app unless it mutates and this pod does not lead.
func (g *Gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	req := Request{Method: r.Method, Path: r.URL.Path, ContentType: r.Header.Get("Content-Type")}
	mutates := g.policy.Mutates(req)
	if mutates {
		if status := g.leader.Status(); !status.IsLeader {
			g.refuse(w, req, status)
			g.metrics.observe(mutates, outcomeGated, start)
			return
		}
	}
	// Deferred, so that a request whose answer was cut short (the app's connection broke mid-answer, and
	// the handler aborts with http.ErrAbortHandler) is counted and timed too.
	defer g.metrics.observe(mutates, outcomePassed, start)
	switch {
	case req.IsGRPC():
		g.grpc.ServeHTTP(w, r)
	case g.forward.takes(r):
		g.forward.ServeHTTP(w, r)
	default:
		g.reverseProxy.ServeHTTP(w, r)
	}
}

// Refusal is the JSON body of a follower's 503.
type Refusal struct {
	Error             string `json:"error"`
	Lease             string `json:"lease"`
	Holder            string `json:"holder"`
	RetryAfterSeconds int    `json:"retryAfterSeconds"`
}

// refuse answers a mutation on a follower: HTTP 503 with Retry-After and who leads, or gRPC UNAVAILABLE
// with the same in its message.
func (g *Gate) refuse(w http.ResponseWriter, req Request, status lease.Status) {
	retry := RetryAfter(g.leader.Expiry(), time.Now())
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
