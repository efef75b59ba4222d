package gate

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasegate/leasegate/internal/gate/rules"
)

// leaderGate is a gate that leads, in front of app.
func leaderGate(t *testing.T, app string) string {
	t.Helper()
	url, _, _ := leaderGateOf(t, app)
	return url
}

// leaderGateOf is leaderGate with the Gate itself and the registry of its metrics.
func leaderGateOf(t *testing.T, app string) (string, *Gate, *prometheus.Registry) {
	t.Helper()
	l := &leadership{}
	l.leading.Store(true)
	policy, _ := rules.NewPolicy("POST,PUT,PATCH,DELETE", "*")
	registry := prometheus.NewRegistry()
	g, err := New(app, policy, l, registry, rules.DefaultBodyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	return h2cServer(t, g).URL, g, registry
}

func TestGatePassesUpgrades(t *testing.T) {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "want Upgrade: echo", http.StatusBadRequest)
			return
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		_ = rw.Flush()
		line, _ := rw.ReadString('\n')
		_, _ = rw.WriteString("echo: " + line)
		_ = rw.Flush()
	}))
	t.Cleanup(app.Close)
	url := leaderGate(t, strings.TrimPrefix(app.URL, "http://"))

	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "GET /socket HTTP/1.1\r\nHost: app\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade answered %v, %v; want 101", resp, err)
	}
	_, _ = io.WriteString(conn, "hello\n")
	if line, _ := br.ReadString('\n'); line != "echo: hello\n" {
		t.Errorf("after the upgrade the app answered %q, want the echo", line)
	}
}

// rawExchange writes a request as bytes to the gate at url and reads the answer's head and body.
func rawExchange(t *testing.T, url, request string) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", request, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// TestGateJudgesWhatCannotBeListed: on a follower that gates no POST, an unregistered method, an
// override header spelt with underscores or as a list, and an upgrade to h2c are each judged (refused,
// or passed as plain HTTP/1.1 without the upgrade), never passed unjudged.
func TestGateJudgesWhatCannotBeListed(t *testing.T) {
	app, _ := echoApp(t, nil)
	policy, _ := rules.NewPolicy("PUT,PATCH,DELETE", "*")
	l := &leadership{}
	g, err := New(app, policy, l, prometheus.NewRegistry(), rules.DefaultBodyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	url := h2cServer(t, g).URL
	refused := []struct{ name, request string }{
		{"an unregistered method", "PURGE /cache HTTP/1.1\r\nHost: app\r\n\r\n"},
		{"an unregistered method with a body", "FROBNICATE /orders/1 HTTP/1.1\r\nHost: app\r\nContent-Length: 2\r\n\r\n{}"},
		{"X_HTTP_METHOD_OVERRIDE", "POST /orders/1 HTTP/1.1\r\nHost: app\r\nX_HTTP_METHOD_OVERRIDE: DELETE\r\nContent-Length: 0\r\n\r\n"},
		{"x-http-method in lower case", "POST /orders/1 HTTP/1.1\r\nHost: app\r\nx-http-method: delete\r\nContent-Length: 0\r\n\r\n"},
		{"an override list", "POST /orders/1 HTTP/1.1\r\nHost: app\r\nX-HTTP-Method-Override: DELETE, POST\r\nContent-Length: 0\r\n\r\n"},
		{"a mutation asking to upgrade to h2c", "PUT /orders/1 HTTP/1.1\r\nHost: app\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\nContent-Length: 0\r\n\r\n"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			if resp, body := rawExchange(t, url, tc.request); resp.StatusCode != http.StatusServiceUnavailable {
				t.Errorf("a follower answered %d %q, want 503", resp.StatusCode, body)
			}
		})
	}
	upgrades := []struct{ name, request string }{
		{"a read asking to upgrade to h2c", "GET /orders HTTP/1.1\r\nHost: app\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n"},
		{"an ungated POST asking to upgrade to h2c", "POST /search HTTP/1.1\r\nHost: app\r\nConnection: upgrade, http2-settings\r\nUpgrade: H2C\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\nContent-Length: 2\r\n\r\n{}"},
		{"an upgrade to HTTP/2.0", "GET /orders HTTP/1.1\r\nHost: app\r\nConnection: Upgrade\r\nUpgrade: HTTP/2.0\r\n\r\n"},
	}
	for _, tc := range upgrades {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rawExchange(t, url, tc.request)
			var got received
			if err := json.Unmarshal([]byte(body), &got); resp.StatusCode != http.StatusOK || err != nil {
				t.Fatalf("a follower answered %d %q, want the app's answer over HTTP/1.1", resp.StatusCode, body)
			}
			for _, key := range []string{"Upgrade", "Http2-Settings", "Connection"} {
				if values, ok := got.Header[key]; ok {
					t.Errorf("the app got %s: %q; the upgrade must not reach it", key, values)
				}
			}
		})
	}
	// Another upgrade listed beside h2c still asks for it alone.
	resp, body := rawExchange(t, url, "GET /orders HTTP/1.1\r\nHost: app\r\nConnection: Upgrade\r\nUpgrade: h2c, echo\r\n\r\n")
	var got received
	if err := json.Unmarshal([]byte(body), &got); err != nil || resp.StatusCode != http.StatusOK || strings.Join(got.Header["Upgrade"], ",") != "echo" {
		t.Errorf("Upgrade: h2c, echo reached the app as %q (%d %v), want echo alone", got.Header["Upgrade"], resp.StatusCode, err)
	}
}
