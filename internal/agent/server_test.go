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

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/internal/leaseelection"
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

// muxOf serves the endpoints of elections, with their event streams.
func muxOf(elections []namedElection, registry *prometheus.Registry) *http.ServeMux {
	return newMux(elections, newEventHub(elections), leaseelection.NewWakeHub(), registry)
}

// one is a single election, named after its lease as the agent names it.
func one(status lease.Status, synced bool, readiness Readiness) []namedElection {
	return []namedElection{{name: "orders", readiness: readiness, election: fixedElection{status: status, synced: synced}}}
}

func get(t *testing.T, server *httptest.Server, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(server.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestEndpoints(t *testing.T) {
	since := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	status := lease.Status{Lease: "shop/orders", Holder: "orders-a_1", IsLeader: true, Since: &since, Transitions: 3, FencingToken: 3}
	registry := newRegistry()
	renewed := time.Now().Add(-1500 * time.Millisecond)
	m := newMetrics(registry, status.Lease, "orders", 16*time.Second, func() time.Time { return renewed })
	m.observe(true)
	m.tookOver(lease.TakeoverCrash)
	server := httptest.NewServer(muxOf(one(status, true, ReadinessLeader), registry))
	defer server.Close()

	if code, body := get(t, server, "/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	if code, _ := get(t, server, "/readyz"); code != 200 {
		t.Errorf("/readyz = %d, want 200 for the leader", code)
	}
	if code, body := get(t, server, "/leaderz"); code != 200 || !strings.HasPrefix(body, "ok: this pod (orders-a_1) leads") {
		t.Errorf("/leaderz = %d %q, want 200 for the leader", code, body)
	}
	follower := httptest.NewServer(muxOf(one(lease.Status{Lease: "shop/orders", Holder: "orders-b_2"}, true, ReadinessHealth), registry))
	defer follower.Close()
	if code, _ := get(t, follower, "/leaderz"); code != 503 {
		t.Errorf("/leaderz of a follower in health mode = %d, want 503: it reports leadership whatever the readiness mode", code)
	}
	code, body := get(t, server, "/leader")
	want := `{"lease":"shop/orders","holder":"orders-a_1","isLeader":true,"since":"2026-11-22T12:00:00Z","transitions":3,"fencingToken":3}` + "\n"
	if code != 200 || body != want {
		t.Errorf("/leader = %d %s, want %s: one election keeps the single-lease shape", code, body, want)
	}
	if code, body := get(t, server, "/leader/orders"); code != 200 || !strings.HasPrefix(body, `{"election":"orders","lease":"shop/orders"`) {
		t.Errorf("/leader/orders = %d %s", code, body)
	}
	_, body = get(t, server, "/metrics")
	for _, series := range []string{
		`leasegate_agent_is_leader{election="orders",lease="shop/orders"} 1`,
		`leasegate_agent_leader_transitions_total{election="orders",lease="shop/orders"} 1`,
		`leasegate_agent_lock_wait_seconds_count{election="orders",lease="shop/orders"} 1`,
		`leasegate_agent_takeover_budget_seconds{election="orders",lease="shop/orders"} 16`,
		`leasegate_agent_lease_renew_age_seconds{election="orders",lease="shop/orders"} 1.5`,
		`leasegate_agent_takeovers_total{election="orders",kind="crash",lease="shop/orders"} 1`,
		`leasegate_agent_takeovers_total{election="orders",kind="graceful",lease="shop/orders"} 0`,
		`leasegate_agent_takeovers_total{election="orders",kind="handover",lease="shop/orders"} 0`,
		"go_goroutines", "process_resident_memory_bytes",
	} {
		if !strings.Contains(body, series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
}

func TestEndpointsOfSeveralElections(t *testing.T) {
	elections := []namedElection{
		{name: "reconciler", readiness: ReadinessHealth, election: fixedElection{synced: true,
			status: lease.Status{Lease: "shop/orders-reconciler", Holder: "orders-b_2"}}},
		{name: "poller", readiness: ReadinessLeader, election: fixedElection{synced: true,
			status: lease.Status{Lease: "shop/orders-poller", Holder: "orders-a_1", IsLeader: true}}},
	}
	server := httptest.NewServer(muxOf(elections, newRegistry()))
	defer server.Close()
	tests := []struct {
		path     string
		wantCode int
		wantBody string
	}{
		{"/readyz", 200, "reconciler: ok: lease shop/orders-reconciler is held by orders-b_2\npoller: ok: this pod (orders-a_1) leads lease shop/orders-poller\n"},
		{"/leaderz", 503, "reconciler: not leader: lease shop/orders-reconciler is held by orders-b_2\npoller: ok: this pod (orders-a_1) leads lease shop/orders-poller\n"},
		{"/leaderz/poller", 200, "ok: this pod (orders-a_1) leads lease shop/orders-poller\n"},
		{"/leaderz/reconciler", 503, "not leader: lease shop/orders-reconciler is held by orders-b_2\n"},
		{"/leaderz/snapshots", 404, "no election \"snapshots\"; this pod runs reconciler, poller\n"},
		{"/leader", 200, `{"elections":[{"election":"reconciler","lease":"shop/orders-reconciler","holder":"orders-b_2","isLeader":false,"transitions":0,"fencingToken":0},` +
			`{"election":"poller","lease":"shop/orders-poller","holder":"orders-a_1","isLeader":true,"transitions":0,"fencingToken":0}]}` + "\n"},
		{"/leader/poller", 200, `{"election":"poller","lease":"shop/orders-poller","holder":"orders-a_1","isLeader":true,"transitions":0,"fencingToken":0}` + "\n"},
	}
	for _, tt := range tests {
		if code, body := get(t, server, tt.path); code != tt.wantCode || body != tt.wantBody {
			t.Errorf("%s = %d %q, want %d %q", tt.path, code, body, tt.wantCode, tt.wantBody)
		}
	}

	elections[1].election = fixedElection{synced: true, status: lease.Status{Lease: "shop/orders-poller", Holder: "orders-c_3"}}
	notLeading := httptest.NewServer(muxOf(elections, newRegistry()))
	defer notLeading.Close()
	if code, body := get(t, notLeading, "/readyz"); code != 503 || !strings.Contains(body, "poller: not leader") {
		t.Errorf("/readyz = %d %q, want 503: readiness follows the election that sets readiness leader", code, body)
	}
}

func TestMetricsCountTransitionsNotObservations(t *testing.T) {
	registry := newRegistry()
	m := newMetrics(registry, "shop/orders", "orders", time.Second, func() time.Time { return time.Time{} })
	for _, leading := range []bool{false, true, true, true, false, false, true} {
		m.observe(leading)
	}
	families, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]float64{}
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "leasegate_") {
			metric := f.GetMetric()[0]
			values[f.GetName()] = metric.GetGauge().GetValue() + metric.GetCounter().GetValue() + float64(metric.GetHistogram().GetSampleCount())
		}
	}
	if got := values["leasegate_agent_leader_transitions_total"]; got != 3 {
		t.Errorf("transitions = %v, want 3 (start, stop, start)", got)
	}
	if got := values["leasegate_agent_is_leader"]; got != 1 {
		t.Errorf("is_leader = %v, want 1", got)
	}
	if got := values["leasegate_agent_lock_wait_seconds"]; got != 2 {
		t.Errorf("lock waits observed = %v, want 2 (one per time it started leading)", got)
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
