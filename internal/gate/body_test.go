package gate

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasegate/leasegate/internal/gate/rules"
	"github.com/leasegate/leasegate/internal/lease"
)

// watchedLeadership is a settable Leadership that says when the gate first asked it.
type watchedLeadership struct {
	leadership
	once  sync.Once
	asked chan struct{}
}

func newWatchedLeadership() *watchedLeadership {
	l := &watchedLeadership{asked: make(chan struct{})}
	l.leading.Store(true)
	return l
}

func (l *watchedLeadership) Status() lease.Status {
	l.once.Do(func() { close(l.asked) })
	return l.leadership.Status()
}

// bodyApp records what reached it: "complete <body>" or "cut" (its body read failed), one line each, and
// says when the first bytes of a body arrived.
type bodyApp struct {
	mu       sync.Mutex
	got      []string
	started  chan struct{}
	once     sync.Once
	finished chan struct{}
}

func newBodyApp(t *testing.T) (*bodyApp, string) {
	t.Helper()
	a := &bodyApp{started: make(chan struct{}), finished: make(chan struct{}, 8)}
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { a.finished <- struct{}{} }()
		var body strings.Builder
		buf := make([]byte, 1024)
		for {
			n, err := r.Body.Read(buf)
			body.Write(buf[:n])
			if n > 0 {
				a.once.Do(func() { close(a.started) })
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				a.record("cut")
				return
			}
		}
		a.record("complete " + body.String())
		_, _ = io.WriteString(w, "done")
	}))
	t.Cleanup(server.Close)
	return a, strings.TrimPrefix(server.URL, "http://")
}

func (a *bodyApp) record(s string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append(a.got, s)
}

func (a *bodyApp) served() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.got...)
}

// gateFor is a gate in front of app following l, with the body timeout given, and its metrics.
func gateFor(t *testing.T, app string, l Leadership, bodyTimeout time.Duration) (*Gate, string, *prometheus.Registry) {
	t.Helper()
	policy, _ := rules.NewPolicy("POST,PUT,PATCH,DELETE", "*")
	registry := prometheus.NewRegistry()
	g, err := New(app, policy, l, registry, bodyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	return g, strings.TrimPrefix(h2cServer(t, g).URL, "http://"), registry
}

// rawRequest opens a connection to the gate and writes head, the start of a request.
func rawRequest(t *testing.T, addr, head string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second)) // a gate that hangs fails the test, not the run
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	return conn, bufio.NewReader(conn)
}

func readAnswer(t *testing.T, r *bufio.Reader) (int, string) {
	t.Helper()
	resp, body := readResponse(t, r)
	return resp.StatusCode, body
}

func readResponse(t *testing.T, r *bufio.Reader) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("reading the gate's answer: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// mayHaveActed checks a 502 that says the app got part of the request: never a Retry-After, which
// would tell the client it may send it again.
func mayHaveActed(t *testing.T, resp *http.Response, body, why string) {
	t.Helper()
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Retry-After") != "" || !strings.Contains(body, why) || !strings.Contains(body, "may have acted on it") {
		t.Errorf("got %d (Retry-After %q) %q, want a 502 without Retry-After saying %q and that the app may have acted", resp.StatusCode, resp.Header.Get("Retry-After"), body, why)
	}
}

func TestGateDecidesAgainOnceTheBodyIsIn(t *testing.T) {
	t.Run("a mutation whose body arrives after the pod stopped leading is refused, and the app never gets it", func(t *testing.T) {
		app, addr := newBodyApp(t)
		l := newWatchedLeadership()
		_, gate, _ := gateFor(t, addr, l, rules.DefaultBodyTimeout)
		conn, r := rawRequest(t, gate, "POST /orders HTTP/1.1\r\nHost: shop\r\nContent-Length: 10\r\n\r\n")
		<-l.asked // the gate decided on the head while this pod led
		l.leading.Store(false)
		_, _ = io.WriteString(conn, `{"item":1}`)
		if code, body := readAnswer(t, r); code != http.StatusServiceUnavailable || !strings.Contains(body, "not the leader") {
			t.Errorf("got %d %q, want the follower's 503", code, body)
		}
		if got := app.served(); len(got) != 0 {
			t.Errorf("the app got %q", got)
		}
	})

	t.Run("a body that does not arrive within the body timeout is a 408, the app never gets it, and it counts as incomplete", func(t *testing.T) {
		app, addr := newBodyApp(t)
		_, gate, registry := gateFor(t, addr, newWatchedLeadership(), 100*time.Millisecond)
		_, r := rawRequest(t, gate, "POST /orders HTTP/1.1\r\nHost: shop\r\nContent-Length: 10\r\n\r\n{\"item\"")
		if code, body := readAnswer(t, r); code != http.StatusRequestTimeout || !strings.Contains(body, "did not arrive within 100ms") {
			t.Errorf("got %d %q, want 408 naming the timeout", code, body)
		}
		if got := app.served(); len(got) != 0 {
			t.Errorf("the app got %q", got)
		}
		if passed, incomplete := requests(t, registry, "mutation", "passed"), requests(t, registry, "mutation", "incomplete"); passed != 0 || incomplete != 1 {
			t.Errorf("counted %v passed and %v incomplete, want the one incomplete", passed, incomplete)
		}
	})

	t.Run("a body whose client goes away counts as incomplete", func(t *testing.T) {
		app, addr := newBodyApp(t)
		_, gate, registry := gateFor(t, addr, newWatchedLeadership(), rules.DefaultBodyTimeout)
		conn, _ := rawRequest(t, gate, "POST /orders HTTP/1.1\r\nHost: shop\r\nContent-Length: 10\r\n\r\n{\"item\"")
		conn.Close()
		for requests(t, registry, "mutation", "incomplete")+requests(t, registry, "mutation", "passed") == 0 {
			time.Sleep(5 * time.Millisecond) // the gate counts it when its handler returns
		}
		if passed, incomplete := requests(t, registry, "mutation", "passed"), requests(t, registry, "mutation", "incomplete"); passed != 0 || incomplete != 1 {
			t.Errorf("counted %v passed and %v incomplete, want the one incomplete", passed, incomplete)
		}
		if got := app.served(); len(got) != 0 {
			t.Errorf("the app got %q", got)
		}
	})

	t.Run("once the body is in, the app may take longer than the body timeout to answer", func(t *testing.T) {
		app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			time.Sleep(300 * time.Millisecond)
			_, _ = io.WriteString(w, "slow but whole")
		}))
		t.Cleanup(app.Close)
		_, gate, _ := gateFor(t, strings.TrimPrefix(app.URL, "http://"), newWatchedLeadership(), 100*time.Millisecond)
		resp, err := http.Post("http://"+gate+"/orders", "application/json", strings.NewReader(`{"item":1}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "slow but whole" {
			t.Errorf("got %d %q, want the app's answer", resp.StatusCode, body)
		}
	})
}

func TestGateGuardsStreamedBodies(t *testing.T) {
	// Chunked: of unknown length, so the body streams through ReverseProxy as it comes.
	const head = "POST /orders HTTP/1.1\r\nHost: shop\r\nTransfer-Encoding: chunked\r\n\r\n"
	chunk := func(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }

	t.Run("a piece that arrives after the pod stopped leading is not passed, the app never gets the end, and the client is not told to retry what the app began to get", func(t *testing.T) {
		app, addr := newBodyApp(t)
		l := newWatchedLeadership()
		_, gate, registry := gateFor(t, addr, l, rules.DefaultBodyTimeout)
		conn, r := rawRequest(t, gate, head+chunk("first piece"))
		<-app.started
		l.leading.Store(false)
		_, _ = io.WriteString(conn, chunk("second piece")+"0\r\n\r\n")
		resp, body := readResponse(t, r)
		mayHaveActed(t, resp, body, "stopped leading")
		if got := requests(t, registry, "mutation", "gated"); got != 1 {
			t.Errorf("counted %v gated, want 1", got)
		}
		<-app.finished
		if got := app.served(); len(got) != 1 || got[0] != "cut" {
			t.Errorf("the app got %q, want its body cut", got)
		}
	})

	t.Run("Lost cuts a body that is streaming, without waiting for its next piece", func(t *testing.T) {
		app, addr := newBodyApp(t)
		l := newWatchedLeadership()
		g, gate, _ := gateFor(t, addr, l, rules.DefaultBodyTimeout)
		_, r := rawRequest(t, gate, head+chunk("first piece"))
		<-app.started
		l.leading.Store(false)
		g.Lost()
		resp, body := readResponse(t, r)
		mayHaveActed(t, resp, body, "stopped leading")
		<-app.finished
		if got := app.served(); len(got) != 1 || got[0] != "cut" {
			t.Errorf("the app got %q, want its body cut", got)
		}
	})

	t.Run("Lost cuts an HTTP/2 body that is streaming", func(t *testing.T) {
		app, addr := newBodyApp(t)
		l := newWatchedLeadership()
		g, gate, _ := gateFor(t, addr, l, rules.DefaultBodyTimeout)
		body, send := io.Pipe()
		defer send.Close()
		go func() { _, _ = io.WriteString(send, "first piece") }()
		req, _ := http.NewRequest("POST", "http://"+gate+"/orders", body)
		transport := &http.Transport{Protocols: new(http.Protocols)}
		transport.Protocols.SetUnencryptedHTTP2(true)
		defer transport.CloseIdleConnections()
		answered := make(chan *http.Response, 1)
		go func() {
			resp, err := (&http.Client{Transport: transport}).Do(req)
			if err != nil {
				t.Error(err)
			}
			answered <- resp
		}()
		<-app.started
		l.leading.Store(false)
		g.Lost()
		if resp := <-answered; resp == nil || resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Retry-After") != "" {
			t.Errorf("got %v, want a 502 without Retry-After: the app had part of the body", resp)
		}
		<-app.finished
		if got := app.served(); len(got) != 1 || got[0] != "cut" {
			t.Errorf("the app got %q, want its body cut", got)
		}
	})

	t.Run("a streamed body that ends while the pod leads arrives whole, and Lost after it leaves the answer alone", func(t *testing.T) {
		app, addr := newBodyApp(t)
		g, gate, _ := gateFor(t, addr, newWatchedLeadership(), rules.DefaultBodyTimeout)
		conn, r := rawRequest(t, gate, head+chunk("first piece"))
		<-app.started
		_, _ = io.WriteString(conn, chunk(", second piece")+"0\r\n\r\n")
		<-app.finished
		g.Lost()
		if code, body := readAnswer(t, r); code != http.StatusOK || body != "done" {
			t.Errorf("got %d %q, want the app's answer", code, body)
		}
		if got := app.served(); len(got) != 1 || got[0] != "complete first piece, second piece" {
			t.Errorf("the app got %q", got)
		}
	})

	t.Run("a streamed mutation's body that does not arrive within the body timeout is cut, and counts as incomplete", func(t *testing.T) {
		app, addr := newBodyApp(t)
		_, gate, registry := gateFor(t, addr, newWatchedLeadership(), 100*time.Millisecond)
		_, r := rawRequest(t, gate, head+chunk("first piece"))
		resp, body := readResponse(t, r)
		mayHaveActed(t, resp, body, "did not arrive within the body timeout (100ms)")
		<-app.finished
		if got := app.served(); len(got) != 1 || got[0] != "cut" {
			t.Errorf("the app got %q, want its body cut", got)
		}
		if got := requests(t, registry, "mutation", "incomplete"); got != 1 {
			t.Errorf("counted %v incomplete, want 1", got)
		}
	})

	t.Run("reads stream unguarded on a follower", func(t *testing.T) {
		_, addr := newBodyApp(t)
		l := newWatchedLeadership()
		l.leading.Store(false)
		_, gate, _ := gateFor(t, addr, l, rules.DefaultBodyTimeout)
		_, r := rawRequest(t, gate, "GET /search HTTP/1.1\r\nHost: shop\r\nTransfer-Encoding: chunked\r\n\r\n"+chunk("query")+"0\r\n\r\n")
		if code, body := readAnswer(t, r); code != http.StatusOK || body != "done" {
			t.Errorf("got %d %q, want the app's answer", code, body)
		}
	})
}

func TestUnansweredTellsARetryOnlyWhenTheAppGotNothing(t *testing.T) {
	for _, tt := range []struct {
		name    string
		cause   error
		reached bool
		want    int
	}{
		{name: "leadership lost before anything was written toward the app: the follower's 503", cause: errLost, want: http.StatusServiceUnavailable},
		{name: "leadership lost after the head was written: 502, the app may have acted", cause: errLost, reached: true, want: http.StatusBadGateway},
		{name: "the body timed out before anything was written: 408", cause: errBodyTimeout, want: http.StatusRequestTimeout},
		{name: "the body timed out after the head was written: 502", cause: errBodyTimeout, reached: true, want: http.StatusBadGateway},
		{name: "the client went away before anything was written: 400", cause: errIncomplete, want: http.StatusBadRequest},
		{name: "the client went away after the head was written: 502", cause: errIncomplete, reached: true, want: http.StatusBadGateway},
		{name: "the app could not be reached: 502", want: http.StatusBadGateway},
		{name: "the app broke the exchange: 502", reached: true, want: http.StatusBadGateway},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := unanswered(tt.cause, tt.reached); got != tt.want {
				t.Errorf("unanswered(%v, %v) = %d, want %d", tt.cause, tt.reached, got, tt.want)
			}
		})
	}
}

func TestGateConnectionPool(t *testing.T) {
	idle := func(g *Gate) int {
		g.forward.mu.Lock()
		defer g.forward.mu.Unlock()
		return len(g.forward.idle)
	}
	// eventually waits for cond, which the pool's reaper makes true within milliseconds here; the
	// bound only keeps a broken reaper from hanging the test.
	eventually := func(t *testing.T, what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
		}
	}
	newGate := func(t *testing.T, app string, idleTimeout time.Duration) (*Gate, string) {
		l := &leadership{}
		l.leading.Store(true)
		policy, _ := rules.NewPolicy("POST", "*")
		g, err := New(app, policy, l, prometheus.NewRegistry(), rules.DefaultBodyTimeout)
		if err != nil {
			t.Fatal(err)
		}
		g.forward.idleTimeout, g.forward.reapEvery = idleTimeout, 10*time.Millisecond
		t.Cleanup(g.Close)
		return g, h2cServer(t, g).URL
	}

	t.Run("a free connection the app closed leaves the pool, whatever its place in it", func(t *testing.T) {
		app, _ := echoApp(t, func(s *http.Server) { s.IdleTimeout = 50 * time.Millisecond })
		g, url := newGate(t, app, idleUpstreamTimeout)
		// Three requests at once: three connections, freed together; the app then closes all three.
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() { do(t, "POST", url+"/orders") })
		}
		wg.Wait()
		eventually(t, "the gate keeps connections the app closed", func() bool { return idle(g) == 0 })
	})

	t.Run("a free connection idle past the idle timeout is closed", func(t *testing.T) {
		closed := make(chan struct{}, 1)
		app, _ := echoApp(t, func(s *http.Server) {
			s.ConnState = func(_ net.Conn, state http.ConnState) {
				if state == http.StateClosed {
					closed <- struct{}{}
				}
			}
		})
		g, url := newGate(t, app, 50*time.Millisecond)
		do(t, "POST", url+"/orders")
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatalf("the gate kept a connection idle past its idle timeout (%d free)", idle(g))
		}
		if n := idle(g); n != 0 {
			t.Errorf("%d connections still free", n)
		}
	})
}
