package gate

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/leasegate/leasegate/internal/gate/rules"
	"github.com/leasegate/leasegate/internal/lease"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		expires time.Time
		want    int
	}{
		{"a held lease: whole seconds until it expires, rounded up", now.Add(12300 * time.Millisecond), 13},
		{"exactly on a second", now.Add(4 * time.Second), 4},
		{"about to expire: at least 1", now.Add(10 * time.Millisecond), 1},
		{"already expired: at least 1", now.Add(-time.Second), 1},
		{"released or unknown: 1", time.Time{}, 1},
	}
	for _, tt := range tests {
		if got := rules.RetryAfter(tt.expires, now); got != tt.want {
			t.Errorf("%s: RetryAfter = %d, want %d", tt.name, got, tt.want)
		}
	}
}

// leadership is a settable Leadership.
type leadership struct{ leading atomic.Bool }

func (l *leadership) Status() lease.Status {
	if l.leading.Load() {
		return lease.Status{Lease: "shop/orders", Holder: "orders-a_1", IsLeader: true, FencingToken: 7}
	}
	return lease.Status{Lease: "shop/orders", Holder: "orders-a_1", FencingToken: 7}
}
func (l *leadership) Expiry() time.Time { return time.Now().Add(7500 * time.Millisecond) }

// gated starts an app (HTTP handler and gRPC health service on one h2c port) behind a gate.
func gated(t *testing.T, policy rules.Policy) (gateURL string, l *leadership, registry *prometheus.Registry) {
	t.Helper()
	grpcServer := grpc.NewServer()
	healthServer := health.NewServer()
	healthpb.RegisterHealthServer(grpcServer, healthServer)
	app := http.NewServeMux()
	app.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			grpcServer.ServeHTTP(w, r)
			return
		}
		if r.URL.Path == "/events" {
			// A stream: two events, flushed apart, as server-sent events are.
			for i := range 2 {
				fmt.Fprintf(w, "data: %d\n\n", i)
				w.(http.Flusher).Flush()
				time.Sleep(50 * time.Millisecond)
			}
			return
		}
		fmt.Fprintf(w, "app: %s %s host %s", r.Method, r.URL.Path, r.Host)
	})
	upstream := h2cServer(t, app)

	l = &leadership{}
	registry = prometheus.NewRegistry()
	g, err := New(strings.TrimPrefix(upstream.URL, "http://"), policy, l, registry, rules.DefaultBodyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	return h2cServer(t, g).URL, l, registry
}

// h2cServer serves handler on loopback over HTTP/1.1 and cleartext HTTP/2, as the gate and a gRPC app do.
func h2cServer(t *testing.T, handler http.Handler) *httptest.Server {
	server := httptest.NewUnstartedServer(handler)
	server.Config.Protocols = new(http.Protocols)
	server.Config.Protocols.SetHTTP1(true)
	server.Config.Protocols.SetUnencryptedHTTP2(true)
	server.Start()
	t.Cleanup(server.Close)
	return server
}

func do(t *testing.T, method, url string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func TestGateHTTP(t *testing.T) {
	policy, _ := rules.NewPolicy("POST,PUT,PATCH,DELETE", "*")
	url, l, registry := gated(t, policy)

	resp, body := do(t, "GET", url+"/orders")
	if resp.StatusCode != 200 || !strings.HasPrefix(body, "app: GET /orders host 127.0.0.1") {
		t.Errorf("a follower's GET = %d %q, want the app's answer with the client's Host", resp.StatusCode, body)
	}
	resp, body = do(t, "POST", url+"/orders")
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "8" {
		t.Errorf("a follower's POST = %d, Retry-After %q; want 503 and 8 (7.5 s until the lease could change hands, rounded up)",
			resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	var refusal Refusal
	if err := json.Unmarshal([]byte(body), &refusal); err != nil || refusal != (Refusal{Error: "not the leader", Lease: "shop/orders", Holder: "orders-a_1", RetryAfterSeconds: 8}) {
		t.Errorf("refusal body %s (%v)", body, err)
	}

	l.leading.Store(true)
	for _, method := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		if resp, body := do(t, method, url+"/orders/1"); resp.StatusCode != 200 || !strings.HasPrefix(body, "app: "+method) {
			t.Errorf("the leader's %s = %d %q, want it passed to the app", method, resp.StatusCode, body)
		}
	}

	// A stream on the leader arrives as the app flushes it, not at the end.
	resp, err := http.Post(url+"/events", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	reader := bufio.NewReader(resp.Body)
	first, _ := reader.ReadString('\n')
	if first != "data: 0\n" {
		t.Errorf("first streamed line %q", first)
	}
	rest, _ := io.ReadAll(reader)
	resp.Body.Close()
	if !strings.Contains(string(rest), "data: 1") {
		t.Errorf("the stream was cut: %q", rest)
	}

	if got := requests(t, registry, "mutation", "gated"); got != 1 {
		t.Errorf("gated mutations = %v, want 1", got)
	}
	if got := requests(t, registry, "mutation", "passed"); got != 5 {
		t.Errorf("passed mutations = %v, want 5", got)
	}
}

// requests reads leasegate_gate_requests_total{class, outcome}.
func requests(t *testing.T, registry *prometheus.Registry, class, outcome string) float64 {
	t.Helper()
	families, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if f.GetName() == "leasegate_gate_requests_total" && labels["class"] == class && labels["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestGateGRPC(t *testing.T) {
	policy, _ := rules.NewPolicy("POST", "/grpc.health.v1.Health/Check")
	url, l, _ := gated(t, policy)
	conn, err := grpc.NewClient(strings.TrimPrefix(url, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "not the leader: lease shop/orders is held by orders-a_1; retry in 8s") {
		t.Errorf("a gated gRPC method on a follower = %v, want UNAVAILABLE naming the holder", err)
	}
	stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if update, err := stream.Recv(); err != nil || update.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("an ungated streaming method on a follower = %v, %v; want it served", update, err)
	}

	l.leading.Store(true)
	if resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("the gated method on the leader = %v, %v; want it passed to the app", resp, err)
	}
}

func TestGateUpstreamMustBeHostPort(t *testing.T) {
	if _, err := New("8080", rules.Policy{}, &leadership{}, prometheus.NewRegistry(), rules.DefaultBodyTimeout); err == nil || !strings.Contains(err.Error(), "want the app's host:port") {
		t.Errorf("New(8080) = %v", err)
	}
}

// BenchmarkGate measures a POST through the gate on the leader, over loopback to an app, against the
// same POST sent to the app directly: the difference is what the gate adds.
func BenchmarkGate(b *testing.B) {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	defer app.Close()
	l := &leadership{}
	l.leading.Store(true)
	policy, _ := rules.NewPolicy("POST,PUT,PATCH,DELETE", "*")
	g, err := New(strings.TrimPrefix(app.URL, "http://"), policy, l, prometheus.NewRegistry(), rules.DefaultBodyTimeout)
	if err != nil {
		b.Fatal(err)
	}
	front := httptest.NewServer(g)
	defer front.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	for _, target := range []struct{ name, url string }{{"direct", app.URL}, {"through the gate", front.URL}} {
		b.Run(target.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				resp, err := client.Post(target.url+"/orders", "application/json", strings.NewReader(`{"item":1}`))
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
