package agent

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leasegate/leasegate/internal/lease"
)

// election is what the endpoints read: the elector, or a fixed value in unit tests.
type election interface {
	Status() lease.Status
	Synced() bool
}

// newMux serves the agent's endpoints. Kubelet probes /healthz and /readyz on the pod IP; apps read
// /leader through LEASEGATE_AGENT_URL; Prometheus scrapes /metrics.
func newMux(e election, readiness Readiness, m *metrics) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		code, body := readyz(e.Synced(), e.Status(), readiness)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(code)
		fmt.Fprintln(w, body)
	})
	// /leaderz is /readyz in leader mode whatever the readiness setting: the startup probe of
	// `leasegate.io/start: leader` pods, and a check for scripts (`curl -f`).
	mux.HandleFunc("GET /leaderz", func(w http.ResponseWriter, _ *http.Request) {
		code, body := readyz(e.Synced(), e.Status(), ReadinessLeader)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(code)
		fmt.Fprintln(w, body)
	})
	mux.HandleFunc("GET /leader", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(e.Status())
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{}))
	return mux
}

// readyz decides the readiness probe's answer. The body always says who leads, so `kubectl describe pod`
// on a follower that is not Ready explains itself.
func readyz(synced bool, s lease.Status, readiness Readiness) (int, string) {
	if !synced {
		return http.StatusServiceUnavailable, fmt.Sprintf("not ready: lease %s not observed yet (is the API server reachable?)", s.Lease)
	}
	who := "nobody holds lease " + s.Lease
	if s.IsLeader {
		who = fmt.Sprintf("this pod (%s) leads lease %s", s.Holder, s.Lease)
	} else if s.Holder != "" {
		who = fmt.Sprintf("lease %s is held by %s", s.Lease, s.Holder)
	}
	if readiness == ReadinessLeader && !s.IsLeader {
		return http.StatusServiceUnavailable, "not leader: " + who
	}
	return http.StatusOK, "ok: " + who
}
