package gate

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
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
	policy, _ := NewPolicy("POST,PUT,PATCH,DELETE", "*")
	registry := prometheus.NewRegistry()
	g, err := New(app, policy, l, registry, DefaultBodyTimeout)
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
