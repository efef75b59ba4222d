package gate

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasegate/leasegate/internal/gate/rules"
)

// answer is what a client got: the 1xx answers, the final status, headers (but Date), body and trailers,
// or that the connection was cut.
type answer struct {
	informational []string
	status        int
	header        http.Header
	body          string
	trailer       http.Header
	cut           bool
}

func (a answer) String() string {
	if a.cut {
		return "the connection cut mid-answer"
	}
	return fmt.Sprintf("1xx %q, %d %v %q, trailers %v", a.informational, a.status, a.header, a.body, a.trailer)
}

// TestForwarderAnswersAsReverseProxy runs every pass-through case through the gate's forwarder and
// through httputil.ReverseProxy as the gate runs it (the path of large, streamed and HTTP/2 requests),
// and holds the two to the same answers, as the client and as the app see them.
func TestForwarderAnswersAsReverseProxy(t *testing.T) {
	echo, _ := echoApp(t, nil)
	raw := rawApp(t, func(conn net.Conn, r *bufio.Reader) {
		req, err := http.ReadRequest(r)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		switch req.URL.Path {
		case "/connection-close":
			_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nConnection: X-Internal, close\r\nX-Internal: secret\r\nX-Public: yes\r\nContent-Length: 2\r\n\r\nok")
		case "/status-99":
			_, _ = io.WriteString(conn, "HTTP/1.1 099 Odd\r\nContent-Length: 2\r\n\r\nok")
		case "/hints":
			_, _ = io.WriteString(conn, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\nConnection: X-Hint\r\nX-Hint: internal\r\nKeep-Alive: timeout=5\r\n\r\n"+
				"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\npage")
		case "/hints-then-close":
			_, _ = io.WriteString(conn, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"+
				"HTTP/1.1 200 OK\r\nConnection: close, X-Internal\r\nX-Internal: secret\r\nContent-Length: 4\r\n\r\npage")
		case "/cut":
			_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part")
		case "/unauthorized":
			_, _ = io.WriteString(conn, "HTTP/1.1 401 Unauthorized\r\nContent-Length: 11\r\n\r\nwho are you")
		}
	})

	for _, tt := range []struct {
		name, app, method, target string
		header                    http.Header
		host, body                string
	}{
		{name: "a body of known length with a query", app: echo, method: "POST", target: "/orders?dry=1&x=%20", body: `{"item":1}`},
		{name: "a POST without a body", app: echo, method: "POST", target: "/orders"},
		{name: "a GET", app: echo, method: "GET", target: "/orders/1"},
		{name: "the client's Host, and X-Forwarded headers replaced", app: echo, method: "GET", target: "/orders", host: "orders.shop.example",
			header: http.Header{"X-Forwarded-For": {"203.0.113.9"}, "Forwarded": {"for=203.0.113.9"}, "X-Forwarded-Proto": {"https"}}},
		{name: "hop-by-hop request headers and those Connection names", app: echo, method: "PUT", target: "/orders/1", body: "x",
			header: http.Header{"Connection": {"X-Hop"}, "X-Hop": {"1"}, "Keep-Alive": {"timeout=5"}, "Proxy-Authorization": {"Basic c2VjcmV0"}, "Te": {"trailers"}, "X-End-To-End": {"kept"}}},
		{name: "a client that waits for 100 Continue", app: echo, method: "POST", target: "/orders", body: "after continue", header: http.Header{"Expect": {"100-continue"}}},
		{name: "an idempotency key", app: echo, method: "POST", target: "/orders", body: "x", header: http.Header{"Idempotency-Key": {"order-7"}}},
		{name: "a mutation carries the gate's fencing token, never the client's", app: echo, method: "POST", target: "/orders", body: "x",
			header: http.Header{"Leasegate-Fencing-Token": {"99"}, "Leasegate_Fencing_Token": {"99"}, "leasegate-fencing-token": {"99"}}},
		{name: "a read carries none, not even the client's", app: echo, method: "GET", target: "/orders",
			header: http.Header{"Leasegate-Fencing-Token": {"99"}, "LEASEGATE_FENCING_TOKEN": {"99"}}},
		{name: "trailers after the body", app: echo, method: "GET", target: "/trailers"},
		{name: "an answer without a body", app: echo, method: "DELETE", target: "/no-content"},
		{name: "HEAD", app: echo, method: "HEAD", target: "/fixed"},
		{name: "the app's Connection names a header", app: echo, method: "GET", target: "/connection-header"},
		{name: "an answer that ends with its connection", app: echo, method: "GET", target: "/close-delimited"},
		{name: "a status below 100 is a 502", app: raw, method: "GET", target: "/status-99"},
		{name: "early hints without their hop-by-hop headers", app: raw, method: "GET", target: "/hints"},
		{name: "an answer cut short cuts the client's connection", app: raw, method: "GET", target: "/cut"},
		{name: "an answer before the body is read", app: raw, method: "POST", target: "/unauthorized", body: strings.Repeat("x", 1000)},
		{name: "the app's Connection names a header and says close", app: raw, method: "GET", target: "/connection-close"},
		{name: "the app's Connection names a header and says close after early hints", app: raw, method: "GET", target: "/hints-then-close"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			forwarded, streamed := twoPaths(t, tt.app)
			send := func(url string) answer {
				t.Helper()
				return ask(t, url, tt.method, tt.target, tt.host, tt.header, tt.body)
			}
			got, want := send(forwarded), send(streamed)
			if got.header.Get("X-Internal") != "" || want.header.Get("X-Internal") != "" {
				t.Errorf("X-Internal, which the app's Connection header named, reached the client")
			}
			if !sameAnswer(got, want) {
				t.Errorf("the forwarder answered\n%v\nReverseProxy\n%v", got, want)
			}
		})
	}
}

// twoPaths is one gate in front of app, served twice: as it serves (the forwarder takes these requests)
// and with every request sent through its ReverseProxy.
func twoPaths(t *testing.T, app string) (forwarded, streamed string) {
	t.Helper()
	l := &leadership{}
	l.leading.Store(true)
	policy, _ := rules.NewPolicy("POST,PUT,PATCH,DELETE", "*")
	g, err := New(app, policy, l, prometheus.NewRegistry(), rules.DefaultBodyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	// As ServeHTTP decides, then always ReverseProxy.
	viaReverseProxy := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dropClientGateHeaders(r.Header)
		req := rules.RequestOf(r)
		mutates := policy.Mutates(req)
		if mutates && g.refused(w, req, time.Now()) {
			return
		}
		g.stream(g.reverseProxy, w, r, mutates, time.Now())
	})
	return h2cServer(t, g).URL, h2cServer(t, viaReverseProxy).URL
}

// ask sends one request on a connection of its own and reads the answer whole.
func ask(t *testing.T, url, method, target, host string, header http.Header, body string) answer {
	t.Helper()
	var got answer
	var bodyReader io.Reader
	if body != "" {
		bodyReader = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url+target, bodyReader)
	if err != nil {
		t.Fatal(err)
	}
	for key, values := range header {
		req.Header[key] = values
	}
	// One Host for both paths, whose servers listen on ports of their own.
	req.Host = cmp.Or(host, "gate.example")
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, header textproto.MIMEHeader) error {
		keys := slices.Sorted(func(yield func(string) bool) {
			for key := range header {
				if !yield(key + ": " + strings.Join(header[key], ",")) {
					return
				}
			}
		})
		got.informational = append(got.informational, fmt.Sprintf("%d %s", code, strings.Join(keys, "; ")))
		return nil
	}}
	transport := &http.Transport{ExpectContinueTimeout: 5 * time.Second, DisableCompression: true}
	defer transport.CloseIdleConnections()
	resp, err := (&http.Client{Transport: transport, Timeout: 10 * time.Second}).Do(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
	if err != nil {
		return answer{cut: true}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{cut: true}
	}
	got.status, got.header, got.body, got.trailer = resp.StatusCode, resp.Header, string(data), resp.Trailer
	got.header.Del("Date")
	return got
}

// sameAnswer compares two answers; the words of a 502 are the two clients' own, so only that it is the
// gate's 502 counts.
func sameAnswer(a, b answer) bool {
	if a.cut || b.cut {
		return a.cut == b.cut
	}
	if a.status == http.StatusBadGateway && b.status == http.StatusBadGateway {
		const prefix = "leasegate gate: the app did not answer: "
		return strings.HasPrefix(a.body, prefix) && strings.HasPrefix(b.body, prefix)
	}
	return slices.Equal(a.informational, b.informational) && a.status == b.status && a.body == b.body &&
		fmt.Sprint(a.header) == fmt.Sprint(b.header) && fmt.Sprint(a.trailer) == fmt.Sprint(b.trailer)
}
