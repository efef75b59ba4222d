package kubeclient

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// serve answers every request with handler and returns a client of it.
func serve(t *testing.T, handler http.HandlerFunc) *Client {
	t.Helper()
	server := httptest.NewServer(handler)
	t.Cleanup(server.Close)
	client, err := New(&Config{Host: server.URL})
	if err != nil {
		t.Fatal(err)
	}
	return client
}

func TestDoSendsJSONAndDecodesTheAnswer(t *testing.T) {
	client := serve(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPut || r.URL.Path != "/apis/coordination.k8s.io/v1/namespaces/shop/leases/orders" ||
			r.URL.Query().Get("dryRun") != "All" || r.Header.Get("Content-Type") != "application/json" ||
			r.Header.Get("Accept") != "application/json" || string(body) != `{"spec":{"holderIdentity":"a"}}` {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.String()+" "+string(body), http.StatusTeapot)
			return
		}
		_, _ = w.Write([]byte(`{"metadata":{"resourceVersion":"7"}}`))
	})
	var got struct {
		Metadata struct{ ResourceVersion string } `json:"metadata"`
	}
	req := Request{Method: http.MethodPut, Path: "/apis/coordination.k8s.io/v1/namespaces/shop/leases/orders",
		Query: url.Values{"dryRun": {"All"}}, Body: json.RawMessage(`{"spec":{"holderIdentity":"a"}}`)}
	if err := client.Do(context.Background(), req, &got); err != nil {
		t.Fatal(err)
	}
	if got.Metadata.ResourceVersion != "7" {
		t.Errorf("decoded %+v, want resourceVersion 7", got)
	}
}

func TestFailuresAreTheServersStatus(t *testing.T) {
	tests := []struct {
		name        string
		code        int
		body        string
		wantReason  string
		wantMessage string
		is          func(error) bool
	}{
		{name: "a conflict, as the API server words it", code: 409,
			body:       `{"kind":"Status","status":"Failure","message":"Operation cannot be fulfilled on leases.coordination.k8s.io \"orders\": the object has been modified","reason":"Conflict","code":409}`,
			wantReason: "Conflict", wantMessage: `Operation cannot be fulfilled on leases.coordination.k8s.io "orders": the object has been modified`, is: IsConflict},
		{name: "already exists", code: 409, body: `{"kind":"Status","reason":"AlreadyExists","code":409,"message":"exists"}`,
			wantReason: "AlreadyExists", wantMessage: "exists", is: IsAlreadyExists},
		{name: "a 404 from something that is not the API server keeps its first line", code: 404, body: "404 page not found\nmore",
			wantReason: "NotFound", wantMessage: "404 page not found", is: IsNotFound},
		{name: "an expired resourceVersion", code: 410, body: `{"kind":"Status","reason":"Expired","code":410,"message":"too old resource version"}`,
			wantReason: "Expired", wantMessage: "too old resource version", is: IsResourceExpired},
		{name: "forbidden names no reason the elector acts on", code: 403, body: `{"kind":"Status","reason":"Forbidden","code":403,"message":"leases.coordination.k8s.io \"orders\" is forbidden"}`,
			wantReason: "Forbidden", wantMessage: `leases.coordination.k8s.io "orders" is forbidden`, is: func(err error) bool { return !IsConflict(err) && !IsNotFound(err) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := serve(t, func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tt.code)
				_, _ = w.Write([]byte(tt.body))
			})
			err := client.Do(context.Background(), Request{Method: http.MethodGet, Path: "/x"}, nil)
			if ReasonOf(err) != tt.wantReason || err.Error() != tt.wantMessage || !tt.is(err) {
				t.Errorf("error %v (reason %q): want reason %q and message %q", err, ReasonOf(err), tt.wantReason, tt.wantMessage)
			}
		})
	}
}

func TestStreamHandsOverTheOpenBody(t *testing.T) {
	client := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != "application/json;stream=watch" {
			http.Error(w, "want a watch", http.StatusBadRequest)
			return
		}
		_, _ = w.Write([]byte(`{"type":"ADDED"}` + "\n"))
	})
	body, err := client.Stream(context.Background(), Request{Method: http.MethodGet, Path: "/w"})
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	data, _ := io.ReadAll(body)
	if !strings.Contains(string(data), "ADDED") {
		t.Errorf("stream %q", data)
	}
	refusing := serve(t, func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", http.StatusForbidden) })
	if _, err := refusing.Stream(context.Background(), Request{Method: http.MethodGet, Path: "/w"}); ReasonOf(err) != "" || err == nil {
		t.Errorf("a refused watch: %v, want a StatusError without a reason", err)
	}
}

func TestNewRefusesAServerThatIsNotAURL(t *testing.T) {
	if _, err := NewForHTTPClient("https://", http.DefaultClient); err == nil || !strings.Contains(err.Error(), "not a URL") {
		t.Errorf("err = %v, want one that says what a server looks like", err)
	}
	client, err := NewForHTTPClient("10.96.0.1:443", http.DefaultClient)
	if err != nil || client.host.Scheme != "https" {
		t.Errorf("a bare host:port is https: %v, %v", client, err)
	}
}

func TestDoReusesAChunkedConnection(t *testing.T) {
	server := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"metadata":{}}`))
		w.(http.Flusher).Flush() // the answer goes out chunked, more chunks after the value
		time.Sleep(5 * time.Millisecond)
		_, _ = w.Write([]byte(strings.Repeat(" ", 2048) + "\n"))
	}))
	var connections atomic.Int32
	server.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			connections.Add(1)
		}
	}
	server.Start()
	defer server.Close()
	client, err := New(&Config{Host: server.URL})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		var into map[string]any
		if err := client.Do(context.Background(), Request{Method: http.MethodGet, Path: "/"}, &into); err != nil {
			t.Fatal(err)
		}
	}
	if n := connections.Load(); n != 1 {
		t.Errorf("%d connections for 3 requests: want the first reused", n)
	}
}

func TestRefusalsCarryTheServersRetryAfterAndAreNotRetried(t *testing.T) {
	tests := []struct {
		name       string
		code       int
		retryAfter string // the header
		body       string
		wantWait   time.Duration
		wantShed   bool
	}{
		{name: "429 from API Priority and Fairness, with Retry-After", code: 429, retryAfter: "2", wantWait: 2 * time.Second, wantShed: true},
		{name: "429 without Retry-After is still being shed", code: 429, wantShed: true},
		{name: "429 with a date for Retry-After: the date is not read, as in client-go", code: 429, retryAfter: "Wed, 25 Nov 2026 12:00:00 GMT", wantShed: true},
		{name: "429 whose Status carries retryAfterSeconds", code: 429,
			body: `{"kind":"Status","reason":"TooManyRequests","code":429,"details":{"retryAfterSeconds":3}}`, wantWait: 3 * time.Second, wantShed: true},
		{name: "the header wins over the Status's retryAfterSeconds", code: 429, retryAfter: "1",
			body: `{"kind":"Status","reason":"TooManyRequests","code":429,"details":{"retryAfterSeconds":3}}`, wantWait: time.Second, wantShed: true},
		{name: "503 with Retry-After", code: 503, retryAfter: "1", wantWait: time.Second, wantShed: true},
		{name: "504 server timeout with retryAfterSeconds", code: 504,
			body: `{"kind":"Status","reason":"Timeout","code":504,"details":{"retryAfterSeconds":1}}`, wantWait: time.Second, wantShed: true},
		{name: "409: the compare-and-swap lost, nothing to wait for", code: 409},
		{name: "409 with a Retry-After header: read on 429 and 5xx only, as in client-go", code: 409, retryAfter: "1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var requests atomic.Int32
			client := serve(t, func(w http.ResponseWriter, _ *http.Request) {
				requests.Add(1)
				if tt.retryAfter != "" {
					w.Header().Set("Retry-After", tt.retryAfter)
				}
				w.WriteHeader(tt.code)
				_, _ = w.Write([]byte(tt.body))
			})
			err := client.Do(context.Background(), Request{Method: http.MethodPut, Path: "/x", Body: "renewal"}, nil)
			wait, shed := RetryAfterOf(err)
			if err == nil || wait != tt.wantWait || shed != tt.wantShed {
				t.Errorf("error %v: RetryAfterOf = %s, %v; want %s, %v", err, wait, shed, tt.wantWait, tt.wantShed)
			}
			if n := requests.Load(); n != 1 {
				t.Errorf("%d requests: want 1, the caller judges when to send it again", n)
			}
		})
	}
}

func TestRetryAfterHoldsBackTheNextRequestOfItsKindOnly(t *testing.T) {
	var requests atomic.Int32
	client := serve(t, func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if r.Method == http.MethodPut {
			w.Header().Set("Retry-After", "60")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		_, _ = w.Write([]byte(`{}`))
	})
	ctx := context.Background()
	put := Request{Method: http.MethodPut, Path: "/x", Body: "take"}
	if err := client.Do(ctx, put, nil); err == nil {
		t.Fatal("the 429 was not an error")
	}
	// The next write is not sent: the server asked for none for a minute.
	err := client.Do(ctx, Request{Method: http.MethodPost, Path: "/x", Body: "create"}, nil)
	var throttled *ThrottledError
	wait, shed := RetryAfterOf(err)
	if !errors.As(err, &throttled) || throttled.Kind != KindWrite || !shed || wait <= 0 || wait > time.Minute {
		t.Errorf("the next write: error %v, RetryAfterOf %s %v; want a ThrottledError for writes, waiting (0, 1m]", err, wait, shed)
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("%d requests reached the server: want only the first write", n)
	}
	// Reads and watches were not asked to wait.
	if err := client.Do(ctx, Request{Method: http.MethodGet, Path: "/x"}, nil); err != nil {
		t.Errorf("a read after the writes' Retry-After: %v", err)
	}
	body, err := client.Stream(ctx, Request{Method: http.MethodGet, Path: "/x"})
	if err != nil {
		t.Errorf("a watch after the writes' Retry-After: %v", err)
	} else {
		body.Close()
	}
	if n := requests.Load(); n != 3 {
		t.Errorf("%d requests reached the server: want the write, the read and the watch", n)
	}
}

func TestAWatchsErrorEventHoldsBackTheNextWatchAndRead(t *testing.T) {
	tests := []struct {
		name         string
		details      *StatusDetails
		wantHeldBack bool
	}{
		{name: "an error event with retryAfterSeconds", details: &StatusDetails{RetryAfterSeconds: 60}, wantHeldBack: true},
		{name: "an error event without", details: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var requests atomic.Int32
			client := serve(t, func(w http.ResponseWriter, _ *http.Request) {
				requests.Add(1)
				_, _ = w.Write([]byte(`{}`))
			})
			event := client.WatchError(Status{Code: 429, Reason: "TooManyRequests", Details: tt.details})
			if wait, shed := RetryAfterOf(event); !shed || (wait > 0) != tt.wantHeldBack {
				t.Errorf("RetryAfterOf(%v) = %s, %v", event, wait, shed)
			}
			body, err := client.Stream(context.Background(), Request{Method: http.MethodGet, Path: "/x"})
			if err == nil {
				body.Close()
			}
			if heldBack := err != nil && requests.Load() == 0; heldBack != tt.wantHeldBack {
				t.Errorf("the next watch: error %v after %d requests; want held back %v", err, requests.Load(), tt.wantHeldBack)
			}
			err = client.Do(context.Background(), Request{Method: http.MethodGet, Path: "/x"}, nil)
			if heldBack := err != nil; heldBack != tt.wantHeldBack {
				t.Errorf("the next read: error %v; want held back %v", err, tt.wantHeldBack)
			}
			if err := client.Do(context.Background(), Request{Method: http.MethodPut, Path: "/x", Body: "renewal"}, nil); err != nil {
				t.Errorf("a write is not held back by a watch's Retry-After: %v", err)
			}
		})
	}
}

func TestRateLimitCapsWhatTheClientSends(t *testing.T) {
	var requests atomic.Int32
	client := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		_, _ = w.Write([]byte(`{}`))
	})
	// A token an hour, two in the bucket: a storm gets its burst, then waits.
	client.SetRateLimit(1.0/3600, 2)
	for i := range 2 {
		if err := client.Do(context.Background(), Request{Method: http.MethodGet, Path: "/x"}, nil); err != nil {
			t.Fatalf("request %d of the burst: %v", i+1, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := client.Do(ctx, Request{Method: http.MethodGet, Path: "/x"}, nil)
	if err == nil || !strings.Contains(err.Error(), "rate limit") {
		t.Errorf("the request after the burst: error %v, want the rate limit's (its token is an hour away, past the deadline)", err)
	}
	if n := requests.Load(); n != 2 {
		t.Errorf("%d requests reached the server: want the burst of 2", n)
	}
}

func TestUnlimitedRequestsPassASpentRateLimit(t *testing.T) {
	var requests atomic.Int32
	client := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		_, _ = w.Write([]byte(`{}`))
	})
	// A token an hour, one in the bucket, spent by a read: a holder's renewal or release still goes out.
	client.SetRateLimit(1.0/3600, 1)
	if err := client.Do(context.Background(), Request{Method: http.MethodGet, Path: "/x"}, nil); err != nil {
		t.Fatalf("the read that spends the bucket: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 3 {
		if err := client.Do(Unlimited(ctx), Request{Method: http.MethodPut, Path: "/x", Body: struct{}{}}, nil); err != nil {
			t.Fatalf("unlimited write %d: %v, want it sent past the spent rate limit", i+1, err)
		}
	}
	if err := client.Do(ctx, Request{Method: http.MethodGet, Path: "/x"}, nil); err == nil || !strings.Contains(err.Error(), "rate limit") {
		t.Errorf("a limited read after them: error %v, want the rate limit's (Unlimited must not refill the bucket)", err)
	}
	if n := requests.Load(); n != 4 {
		t.Errorf("%d requests reached the server, want 4 (the read and the three unlimited writes)", n)
	}
}

func TestRetriesAfterAConnectionFailure(t *testing.T) {
	tests := []struct {
		name        string
		method      string
		watch       bool
		cut         func(net.Conn) // what the server does to the first request's connection
		wantRetried bool
	}{
		{name: "a GET whose connection is reset is sent again", method: http.MethodGet, cut: reset, wantRetried: true},
		{name: "a GET whose connection closes without an answer is sent again", method: http.MethodGet, cut: closeConn, wantRetried: true},
		{name: "a PUT whose connection is reset is not: the server may have acted on it", method: http.MethodPut, cut: reset},
		{name: "a POST whose connection closes is not", method: http.MethodPost, cut: closeConn},
		{name: "a watch whose connection is reset is sent again", method: http.MethodGet, watch: true, cut: reset, wantRetried: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var requests atomic.Int32
			client := serve(t, func(w http.ResponseWriter, r *http.Request) {
				if requests.Add(1) == 1 {
					conn, _, err := w.(http.Hijacker).Hijack()
					if err != nil {
						t.Error(err)
						return
					}
					tt.cut(conn)
					return
				}
				_, _ = w.Write([]byte(`{}`))
			})
			req := Request{Method: tt.method, Path: "/x"}
			var err error
			if tt.watch {
				var body io.ReadCloser
				if body, err = client.Stream(context.Background(), req); err == nil {
					body.Close()
				}
			} else {
				err = client.Do(context.Background(), req, nil)
			}
			if retried := requests.Load() == 2; retried != tt.wantRetried || (err == nil) != tt.wantRetried {
				t.Errorf("%d requests, error %v: want retried %v", requests.Load(), err, tt.wantRetried)
			}
		})
	}
}

// reset closes conn with a TCP reset, as a peer whose process died or a middlebox that dropped it.
func reset(conn net.Conn) {
	_ = conn.(*net.TCPConn).SetLinger(0)
	conn.Close()
}

func closeConn(conn net.Conn) { conn.Close() }

func TestConnectionFailuresAsClientGoTellsThemApart(t *testing.T) {
	goAway := errors.New(`http2: server sent GOAWAY and closed the connection; LastStreamID=3, ErrCode=NO_ERROR, debug=""`)
	tests := []struct {
		name                                            string
		err                                             error
		probableEOF, reset, refused, lost, timeout, get bool
	}{
		{name: "end of file", err: io.EOF, probableEOF: true, get: true},
		{name: "end of file inside a url.Error", err: &url.Error{Op: "Get", URL: "https://x", Err: io.EOF}, probableEOF: true, get: true},
		{name: "unexpected end of file", err: io.ErrUnexpectedEOF, probableEOF: true, get: true},
		{name: "GOAWAY and close", err: &url.Error{Op: "Get", URL: "https://x", Err: goAway}, probableEOF: true, get: true},
		{name: "reset", err: &url.Error{Op: "Get", URL: "https://x", Err: &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}}, probableEOF: true, reset: true, get: true},
		{name: "HTTP/2 health check failed", err: errors.New("http2: client connection lost"), lost: true, get: true},
		{name: "timeout", err: &url.Error{Op: "Get", URL: "https://x", Err: context.DeadlineExceeded}, timeout: true},
		{name: "refused: the server is not there, no request was read", err: &url.Error{Op: "Get", URL: "https://x", Err: &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}, refused: true},
		{name: "a TLS failure", err: errors.New("tls: failed to verify certificate: x509: certificate signed by unknown authority")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := [6]bool{IsProbableEOF(tt.err), IsConnectionReset(tt.err), IsConnectionRefused(tt.err), IsHTTP2ConnectionLost(tt.err), IsTimeout(tt.err), retryableRequestError(http.MethodGet, tt.err)}
			if want := [6]bool{tt.probableEOF, tt.reset, tt.refused, tt.lost, tt.timeout, tt.get}; got != want {
				t.Errorf("probable EOF, reset, refused, lost, timeout, GET retried = %v, want %v", got, want)
			}
			apimachinery := [5]bool{utilnet.IsProbableEOF(tt.err), utilnet.IsConnectionReset(tt.err), utilnet.IsConnectionRefused(tt.err), utilnet.IsHTTP2ConnectionLost(tt.err), utilnet.IsTimeout(tt.err)}
			if [5]bool(got[:5]) != apimachinery {
				t.Errorf("probable EOF, reset, refused, lost, timeout = %v, apimachinery's util/net says %v", got[:5], apimachinery)
			}
			if retryableRequestError(http.MethodPut, tt.err) {
				t.Error("a PUT is retried")
			}
		})
	}
}
