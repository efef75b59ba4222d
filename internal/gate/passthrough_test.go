package gate

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// received is what the echo app saw of a request.
type received struct {
	Method, URI, Host string
	Header            http.Header
	Body              string
	ContentLength     int64
}

const fixedAnswer = "the same answer every time"

// echoApp answers every request with what it received, as JSON, except on the paths that test one kind
// of answer. It counts the connections made to it.
func echoApp(t *testing.T, configure func(*http.Server)) (addr string, conns *atomic.Int32) {
	t.Helper()
	conns = &atomic.Int32{}
	app := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/trailers":
			w.Header().Set("Trailer", "X-Checksum")
			_, _ = io.WriteString(w, "body")
			w.Header().Set("X-Checksum", "abc")
			return
		case "/fixed":
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, fixedAnswer)
			return
		case "/no-content":
			w.WriteHeader(http.StatusNoContent)
			return
		case "/connection-header":
			w.Header().Set("Connection", "X-Internal")
			w.Header().Set("X-Internal", "secret")
			w.Header().Set("X-Public", "yes")
			return
		case "/close-delimited":
			conn, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = rw.WriteString("HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nall of it, then the end of the connection")
			_ = rw.Flush()
			conn.Close()
			return
		}
		body, _ := io.ReadAll(r.Body)
		_ = json.NewEncoder(w).Encode(received{Method: r.Method, URI: r.RequestURI, Host: r.Host, Header: r.Header, Body: string(body), ContentLength: r.ContentLength})
	}))
	app.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			conns.Add(1)
		}
	}
	if configure != nil {
		configure(app.Config)
	}
	app.Start()
	t.Cleanup(app.Close)
	return app.Listener.Addr().String(), conns
}

func decodeReceived(t *testing.T, resp *http.Response) received {
	t.Helper()
	defer resp.Body.Close()
	var got received
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatalf("the app's answer (%d): %v", resp.StatusCode, err)
	}
	return got
}

func TestGatePassesRequests(t *testing.T) {
	app, _ := echoApp(t, nil)
	url := leaderGate(t, app)

	for _, tt := range []struct {
		name  string
		build func() *http.Request
		check func(t *testing.T, got received)
		// wantContinue: the client gets a 100 Continue before it sends the body.
		wantContinue bool
	}{{
		name: "a body of known length arrives whole, with its length",
		build: func() *http.Request {
			req, _ := http.NewRequest("POST", url+"/orders?dry=1", strings.NewReader(`{"item":1}`))
			return req
		},
		check: func(t *testing.T, got received) {
			if got.Method != "POST" || got.URI != "/orders?dry=1" || got.Body != `{"item":1}` || got.ContentLength != 10 {
				t.Errorf("the app received %+v", got)
			}
		},
	}, {
		name: "a chunked body of unknown length arrives whole",
		build: func() *http.Request {
			req, _ := http.NewRequest("PUT", url+"/orders/1", io.MultiReader(strings.NewReader("part one, "), strings.NewReader(strings.Repeat("x", 100_000))))
			return req
		},
		check: func(t *testing.T, got received) {
			if got.Body != "part one, "+strings.Repeat("x", 100_000) || got.ContentLength != -1 {
				t.Errorf("the app received %d bytes (length %d), want the whole chunked body", len(got.Body), got.ContentLength)
			}
		},
	}, {
		name: "a POST without a body says its length is 0",
		build: func() *http.Request {
			req, _ := http.NewRequest("POST", url+"/orders", nil)
			return req
		},
		check: func(t *testing.T, got received) {
			if got.Header.Get("Content-Length") != "0" {
				t.Errorf("Content-Length %q, want 0", got.Header.Get("Content-Length"))
			}
		},
	}, {
		name: "the client's Host reaches the app, and the gate's X-Forwarded headers replace the client's",
		build: func() *http.Request {
			req, _ := http.NewRequest("GET", url+"/orders", nil)
			req.Host = "orders.shop.example"
			req.Header.Set("X-Forwarded-For", "203.0.113.9")
			req.Header.Set("Forwarded", "for=203.0.113.9")
			return req
		},
		check: func(t *testing.T, got received) {
			if got.Host != "orders.shop.example" || got.Header.Get("X-Forwarded-For") != "127.0.0.1" ||
				got.Header.Get("X-Forwarded-Host") != "orders.shop.example" || got.Header.Get("X-Forwarded-Proto") != "http" ||
				got.Header.Get("Forwarded") != "" {
				t.Errorf("the app received Host %q and headers %v", got.Host, got.Header)
			}
		},
	}, {
		name: "a client's X-Forwarded headers spelt with underscores, which CGI-style apps read as the gate's, never reach the app",
		build: func() *http.Request {
			req, _ := http.NewRequest("GET", url+"/orders", nil)
			req.Header["X_Forwarded_For"] = []string{"203.0.113.9"}
			req.Header["x_forwarded_host"] = []string{"evil.example"}
			req.Header["X-FORWARDED_PROTO"] = []string{"https"}
			req.Header["X_Forwarded_Other"] = []string{"kept"}
			return req
		},
		check: func(t *testing.T, got received) {
			for key := range got.Header {
				if name := strings.ToLower(strings.ReplaceAll(key, "_", "-")); strings.HasPrefix(name, "x-forwarded-") && key != "X-Forwarded-For" &&
					key != "X-Forwarded-Host" && key != "X-Forwarded-Proto" && key != "X_forwarded_other" {
					t.Errorf("the app received the client's %s: %v", key, got.Header[key])
				}
			}
			if got.Header.Get("X-Forwarded-For") != "127.0.0.1" || got.Header.Get("X_forwarded_other") != "kept" {
				t.Errorf("the app received headers %v", got.Header)
			}
		},
	}, {
		name: "headers for the hop to the gate stay there: hop-by-hop ones and those Connection names",
		build: func() *http.Request {
			req, _ := http.NewRequest("GET", url+"/orders", nil)
			req.Header.Set("Connection", "X-Hop")
			req.Header.Set("X-Hop", "1")
			req.Header.Set("Keep-Alive", "timeout=5")
			req.Header.Set("Proxy-Authorization", "Basic c2VjcmV0")
			req.Header.Set("X-End-To-End", "kept")
			return req
		},
		check: func(t *testing.T, got received) {
			for _, key := range []string{"Connection", "X-Hop", "Keep-Alive", "Proxy-Authorization"} {
				if got.Header.Get(key) != "" {
					t.Errorf("the app received %s: %q", key, got.Header.Get(key))
				}
			}
			if got.Header.Get("X-End-To-End") != "kept" {
				t.Errorf("an end-to-end header was lost: %v", got.Header)
			}
		},
	}, {
		name: "a client that waits for 100 Continue gets it, and the app the body",
		build: func() *http.Request {
			req, _ := http.NewRequest("POST", url+"/orders", strings.NewReader("after continue"))
			req.Header.Set("Expect", "100-continue")
			return req
		},
		check: func(t *testing.T, got received) {
			if got.Body != "after continue" {
				t.Errorf("the app received body %q", got.Body)
			}
		},
		wantContinue: true,
	}} {
		t.Run(tt.name, func(t *testing.T) {
			var gotContinue bool
			req := tt.build()
			req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{Got100Continue: func() { gotContinue = true }}))
			transport := &http.Transport{ExpectContinueTimeout: 5 * time.Second}
			defer transport.CloseIdleConnections()
			resp, err := (&http.Client{Transport: transport}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, decodeReceived(t, resp))
			if gotContinue != tt.wantContinue {
				t.Errorf("the client got 100 Continue: %v, want %v", gotContinue, tt.wantContinue)
			}
		})
	}
}

func TestGatePassesAnswers(t *testing.T) {
	app, _ := echoApp(t, nil)
	url := leaderGate(t, app)

	for _, tt := range []struct {
		name, method, path string
		check              func(t *testing.T, resp *http.Response, body string)
	}{{
		name: "trailers follow the body", method: "GET", path: "/trailers",
		check: func(t *testing.T, resp *http.Response, body string) {
			if body != "body" || resp.Trailer.Get("X-Checksum") != "abc" {
				t.Errorf("got %q with trailers %v, want the body and X-Checksum: abc", body, resp.Trailer)
			}
		},
	}, {
		name: "an answer without a body", method: "DELETE", path: "/no-content",
		check: func(t *testing.T, resp *http.Response, body string) {
			if resp.StatusCode != http.StatusNoContent || body != "" {
				t.Errorf("got %d %q, want 204 and nothing", resp.StatusCode, body)
			}
		},
	}, {
		name: "HEAD gets the length and type a GET would, and no body", method: "HEAD", path: "/fixed",
		check: func(t *testing.T, resp *http.Response, body string) {
			if resp.StatusCode != http.StatusOK || resp.ContentLength != int64(len(fixedAnswer)) || resp.Header.Get("Content-Type") != "text/plain" {
				t.Errorf("got %d, length %d, type %q; want 200, %d, text/plain", resp.StatusCode, resp.ContentLength, resp.Header.Get("Content-Type"), len(fixedAnswer))
			}
		},
	}, {
		name: "the app's hop-by-hop headers stay with the gate", method: "GET", path: "/connection-header",
		check: func(t *testing.T, resp *http.Response, _ string) {
			if resp.Header.Get("X-Internal") != "" || resp.Header.Get("X-Public") != "yes" {
				t.Errorf("the client received %v", resp.Header)
			}
		},
	}, {
		name: "an answer that ends with its connection arrives whole", method: "GET", path: "/close-delimited",
		check: func(t *testing.T, _ *http.Response, body string) {
			if body != "all of it, then the end of the connection" {
				t.Errorf("got %q", body)
			}
		},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := do(t, tt.method, url+tt.path)
			tt.check(t, resp, body)
		})
	}
}

func TestGateKeepsConnectionsToTheApp(t *testing.T) {
	app, conns := echoApp(t, nil)
	url := leaderGate(t, app)
	for range 20 {
		do(t, "POST", url+"/orders")
	}
	if conns.Load() > 1 {
		t.Errorf("20 requests in a row opened %d connections to the app, want 1", conns.Load())
	}
}

func TestGateConnectionsToTheApp(t *testing.T) {
	t.Run("a connection the app closed while it was free is not used", func(t *testing.T) {
		// The app drops idle connections after 50 ms (Node.js does after 5 s). Each request comes after
		// the app dropped the gate's last connection: a POST, which could not be retried, must not be
		// written to it.
		app, conns := echoApp(t, func(s *http.Server) { s.IdleTimeout = 50 * time.Millisecond })
		url := leaderGate(t, app)
		for i := range 5 {
			if resp, _ := do(t, "POST", url+"/orders"); resp.StatusCode != http.StatusOK {
				t.Fatalf("request %d after the app closed its idle connection: %d", i, resp.StatusCode)
			}
			time.Sleep(150 * time.Millisecond)
		}
		if conns.Load() != 5 {
			t.Errorf("the app saw %d connections, want 5 (one per request, each closed while idle)", conns.Load())
		}
	})

	t.Run("a client that gives up frees the app's connection", func(t *testing.T) {
		arrived, cancelled := make(chan struct{}), make(chan struct{})
		app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				close(arrived)
				select {
				case <-r.Context().Done(): // only the end of the gate's connection gets it here
					close(cancelled)
				case <-time.After(10 * time.Second):
				}
				return
			}
			_, _ = io.WriteString(w, "quick")
		}))
		t.Cleanup(app.Close)
		url := leaderGate(t, strings.TrimPrefix(app.URL, "http://"))

		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go func() {
			<-arrived
			cancel()
		}()
		req, _ := http.NewRequestWithContext(ctx, "POST", url+"/slow", nil)
		if _, err := http.DefaultClient.Do(req); !errors.Is(err, context.Canceled) {
			t.Fatalf("the slow request ended with %v, want the client's cancellation", err)
		}
		select {
		case <-cancelled:
		case <-time.After(5 * time.Second):
			t.Fatal("the app's request was not cancelled after the client gave up")
		}
		if _, body := do(t, "POST", url+"/quick"); body != "quick" {
			t.Errorf("the next request got %q", body)
		}
	})

	t.Run("an app that does not listen is a 502 that says so", func(t *testing.T) {
		listener, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := listener.Addr().String()
		listener.Close()
		resp, body := do(t, "POST", leaderGate(t, closed)+"/orders")
		if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "the app did not answer") {
			t.Errorf("got %d %q, want 502 naming the app", resp.StatusCode, body)
		}
	})

	t.Run("an answer cut short is not passed off as whole", func(t *testing.T) {
		app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			conn, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part")
			_ = rw.Flush()
			conn.Close()
		}))
		t.Cleanup(app.Close)
		url, _, registry := leaderGateOf(t, strings.TrimPrefix(app.URL, "http://"))
		conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second)) // a gate that held the connection open fails, not hangs
		_, _ = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: app\r\n\r\n")
		// The connection ends before the answer does: before its headers, or within its body.
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			if os.IsTimeout(err) {
				t.Error("the gate neither answered nor closed the connection")
			}
		} else if body, err := io.ReadAll(resp.Body); err == nil || os.IsTimeout(err) {
			t.Errorf("the client read %q (%v), want the connection aborted", body, err)
		}
		// The gate counted it before it dropped the client's connection.
		if got := requests(t, registry, "read", "passed"); got != 1 {
			t.Errorf("reads passed = %v after an answer cut short, want 1", got)
		}
	})

	t.Run("closing the gate closes the connections it keeps to the app", func(t *testing.T) {
		closed := make(chan struct{}, 4)
		app, _ := echoApp(t, func(s *http.Server) {
			s.ConnState = func(_ net.Conn, state http.ConnState) {
				if state == http.StateClosed {
					closed <- struct{}{}
				}
			}
		})
		url, g, _ := leaderGateOf(t, app)
		do(t, "POST", url+"/orders")
		// A body over maxForwardedBody goes through ReverseProxy, whose connection Close closes too.
		resp, err := http.Post(url+"/orders", "text/plain", strings.NewReader(strings.Repeat("x", maxForwardedBody+1)))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		g.Close()
		for i := range 2 {
			select {
			case <-closed:
			case <-time.After(10 * time.Second):
				t.Fatalf("%d of the gate's 2 connections to the app are still open after Close", 2-i)
			}
		}
	})
}

// rawApp listens on loopback and hands each connection to serve, for apps no net/http server would
// imitate: one that reads the request as its socket gets it, or misbehaves.
func rawApp(t *testing.T, serve func(conn net.Conn, r *bufio.Reader)) string {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { listener.Close() })
	go func() {
		for {
			conn, err := listener.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				serve(conn, bufio.NewReader(conn))
			}()
		}
	}()
	return listener.Addr().String()
}

// readHead reads a request's head as it came, up to its blank line, and skips a body of bodyLength.
func readHead(r *bufio.Reader, bodyLength int64) (string, error) {
	var head strings.Builder
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return head.String(), err
		}
		if line == "\r\n" {
			_, err := io.CopyN(io.Discard, r, bodyLength)
			return head.String(), err
		}
		head.WriteString(line)
	}
}

// TestGateWritesOneFraming reads the request as the app's socket gets it, before any server could tidy
// it: the body's length is said once.
func TestGateWritesOneFraming(t *testing.T) {
	heads := make(chan string, 1)
	app := rawApp(t, func(conn net.Conn, r *bufio.Reader) {
		head, _ := readHead(r, int64(len(`{"item":1}`)))
		heads <- head
		_, _ = io.WriteString(conn, "HTTP/1.1 204 No Content\r\n\r\n")
	})
	req, _ := http.NewRequest("POST", leaderGate(t, app)+"/orders", strings.NewReader(`{"item":1}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	head := <-heads
	if !strings.HasPrefix(head, "POST /orders HTTP/1.1\r\n") || strings.Count(strings.ToLower(head), "content-length:") != 1 ||
		!strings.Contains(head, "Content-Length: 10\r\n") || strings.Contains(strings.ToLower(head), "transfer-encoding") {
		t.Errorf("the app's socket got the head\n%s\nwant the request line and Content-Length: 10, once", head)
	}
}

func TestGateWithAppsThatMisbehave(t *testing.T) {
	t.Run("an app that answers before it reads the body is heard, whatever the body's size", func(t *testing.T) {
		// Auth middleware and upload limits answer 401 or 413 and never read what was sent.
		app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "who are you", http.StatusUnauthorized)
		}))
		t.Cleanup(app.Close)
		url := leaderGate(t, strings.TrimPrefix(app.URL, "http://"))
		client := &http.Client{Timeout: 5 * time.Second}
		for _, size := range []int{10, maxForwardedBody, 4 << 20} {
			resp, err := client.Post(url+"/upload", "application/octet-stream", strings.NewReader(strings.Repeat("x", size)))
			if err != nil {
				t.Fatalf("a %d-byte upload: %v", size, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("a %d-byte upload got %d, want the app's 401", size, resp.StatusCode)
			}
		}
	})

	t.Run("an answer whose head never ends is a 502, not the agent's memory", func(t *testing.T) {
		app := rawApp(t, func(conn net.Conn, r *bufio.Reader) {
			if _, err := readHead(r, 0); err != nil {
				return
			}
			_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nX-Endless: ")
			chunk := strings.Repeat("a", 64<<10)
			for range 2 * maxResponseHead / len(chunk) {
				if _, err := io.WriteString(conn, chunk); err != nil {
					return
				}
			}
		})
		resp, body := do(t, "GET", leaderGate(t, app)+"/")
		if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "larger than") {
			t.Errorf("got %d %q, want 502 saying the head is too large", resp.StatusCode, body)
		}
	})

	t.Run("a request the app dropped unanswered on a kept connection is sent again, if it may be", func(t *testing.T) {
		// The app answers the first request on each connection and closes the connection on the second
		// without answering, as one whose keep-alive timeout fires just as a request arrives.
		app := rawApp(t, func(conn net.Conn, r *bufio.Reader) {
			if _, err := readHead(r, 0); err != nil {
				return
			}
			_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			_, _ = readHead(r, 0)
		})
		url := leaderGate(t, app)
		for _, tt := range []struct {
			method string
			header http.Header
			want   int
		}{
			{"GET", nil, http.StatusOK},
			{"GET", nil, http.StatusOK},
			{"POST", http.Header{"Idempotency-Key": {"order-7"}}, http.StatusOK},
			{"POST", nil, http.StatusBadGateway}, // it may have acted: only the client may decide to retry
		} {
			req, _ := http.NewRequest(tt.method, url+"/orders", nil)
			maps.Copy(req.Header, tt.header)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("%s %v on a connection the app drops: %d, want %d", tt.method, tt.header, resp.StatusCode, tt.want)
			}
		}
	})

	t.Run("early hints reach the client before the answer, their headers only on them", func(t *testing.T) {
		app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
			_, _ = io.WriteString(w, "page")
		}))
		t.Cleanup(app.Close)
		var hints []string
		trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, header textproto.MIMEHeader) error {
			hints = append(hints, fmt.Sprintf("%d %s", code, header.Get("Link")))
			return nil
		}}
		req, _ := http.NewRequest("GET", leaderGate(t, strings.TrimPrefix(app.URL, "http://"))+"/", nil)
		resp, err := http.DefaultClient.Do(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if len(hints) != 1 || hints[0] != "103 </style.css>; rel=preload" || resp.Header.Get("Link") != "" {
			t.Errorf("hints %q, final Link %q; want one 103 with the Link, and none on the answer", hints, resp.Header.Get("Link"))
		}
	})
}

func TestHasToken(t *testing.T) {
	for _, tt := range []struct {
		name   string
		values []string
		want   bool
	}{
		{"alone", []string{"upgrade"}, true},
		{"in another case", []string{"Upgrade"}, true},
		{"in a list, with spaces", []string{"keep-alive , Upgrade"}, true},
		{"in the second of two headers", []string{"keep-alive", "upgrade"}, true},
		{"as part of a longer token", []string{"upgrades, x-upgrade"}, false},
		{"no header", nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := hasToken(tt.values, "upgrade"); got != tt.want {
				t.Errorf("hasToken(%q, upgrade) = %v, want %v", tt.values, got, tt.want)
			}
		})
	}
}
