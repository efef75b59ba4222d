package agent

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/lease"
)

type fixedElection struct {
	status lease.Status
	synced bool
}

func (f fixedElection) Status() lease.Status { return f.status }
func (f fixedElection) Synced() bool         { return f.synced }

func TestReadyz(t *testing.T) {
	leading := lease.Status{Lease: "shop/orders", Holder: "orders-a_1", IsLeader: true}
	following := lease.Status{Lease: "shop/orders", Holder: "orders-b_2"}
	released := lease.Status{Lease: "shop/orders"}
	tests := []struct {
		name      string
		synced    bool
		status    lease.Status
		readiness Readiness
		wantCode  int
		wantBody  string
	}{
		{"health mode: a follower is ready and names the leader", true, following, ReadinessHealth, 200, "ok: lease shop/orders is held by orders-b_2"},
		{"health mode: the leader is ready", true, leading, ReadinessHealth, 200, "ok: this pod (orders-a_1) leads lease shop/orders"},
		{"health mode: ready while nobody leads", true, released, ReadinessHealth, 200, "ok: nobody holds lease shop/orders"},
		{"leader mode: the leader is ready", true, leading, ReadinessLeader, 200, "ok: this pod (orders-a_1) leads lease shop/orders"},
		{"leader mode: a follower is not ready and says who leads", true, following, ReadinessLeader, 503, "not leader: lease shop/orders is held by orders-b_2"},
		{"before the lease is observed nobody is ready", false, released, ReadinessHealth, 503, "not ready: lease shop/orders not observed yet (is the API server reachable?)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := readyz(tt.synced, tt.status, tt.readiness)
			if code != tt.wantCode || body != tt.wantBody {
				t.Errorf("readyz() = %d %q, want %d %q", code, body, tt.wantCode, tt.wantBody)
			}
		})
	}
}

func TestEndpoints(t *testing.T) {
	since := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	status := lease.Status{Lease: "shop/orders", Holder: "orders-a_1", IsLeader: true, Since: &since, Transitions: 3}
	m := newMetrics(status.Lease)
	m.observe(true)
	server := httptest.NewServer(newMux(fixedElection{status: status, synced: true}, ReadinessLeader, m))
	defer server.Close()

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(server.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("/readyz = %d, want 200 for the leader", code)
	}
	if code, body := get("/leaderz"); code != 200 || !strings.HasPrefix(body, "ok: this pod (orders-a_1) leads") {
		t.Errorf("/leaderz = %d %q, want 200 for the leader", code, body)
	}
	follower := httptest.NewServer(newMux(fixedElection{status: lease.Status{Lease: "shop/orders", Holder: "orders-b_2"}, synced: true}, ReadinessHealth, m))
	defer follower.Close()
	if resp, err := http.Get(follower.URL + "/leaderz"); err != nil || resp.StatusCode != 503 {
		t.Errorf("/leaderz of a follower in health mode = %v %v, want 503: it reports leadership whatever the readiness mode", resp, err)
	}
	code, body := get("/leader")
	want := `{"lease":"shop/orders","holder":"orders-a_1","isLeader":true,"since":"2026-11-22T12:00:00Z","transitions":3}` + "\n"
	if code != 200 || body != want {
		t.Errorf("/leader = %d %s, want %s", code, body, want)
	}
	_, body = get("/metrics")
	for _, series := range []string{
		`leasegate_agent_is_leader{lease="shop/orders"} 1`,
		`leasegate_agent_leader_transitions_total{lease="shop/orders"} 1`,
		"go_goroutines", "process_resident_memory_bytes",
	} {
		if !strings.Contains(body, series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
}

func TestMetricsCountTransitionsNotObservations(t *testing.T) {
	m := newMetrics("shop/orders")
	for _, leading := range []bool{false, true, true, true, false, false, true} {
		m.observe(leading)
	}
	families, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]float64{}
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "leasegate_") {
			metric := f.GetMetric()[0]
			values[f.GetName()] = metric.GetGauge().GetValue() + metric.GetCounter().GetValue()
		}
	}
	if got := values["leasegate_agent_leader_transitions_total"]; got != 3 {
		t.Errorf("transitions = %v, want 3 (start, stop, start)", got)
	}
	if got := values["leasegate_agent_is_leader"]; got != 1 {
		t.Errorf("is_leader = %v, want 1", got)
	}
}

func TestWriteStatusFileReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "status.json")
	for _, s := range []lease.Status{
		{Lease: "shop/orders", Holder: "orders-b_2"},
		{Lease: "shop/orders", Holder: "orders-a_1", IsLeader: true, Transitions: 1},
	} {
		if err := writeStatusFile(path, s); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var got lease.Status
		if err := json.Unmarshal(data, &got); err != nil {
			t.Fatalf("status file is not JSON: %v: %s", err, data)
		}
		if got.Holder != s.Holder || got.IsLeader != s.IsLeader {
			t.Errorf("status file = %+v, want %+v", got, s)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("the directory holds %d files, want only status.json (no temporary files left behind)", len(entries))
	}
}
