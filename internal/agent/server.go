package agent

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/lease"
)

// election is what the endpoints read: the elector, or a fixed value in unit tests.
type election interface {
	Status() lease.Status
	Synced() bool
}

// namedElection is one of the pod's elections as the endpoints serve it.
type namedElection struct {
	name      string
	readiness Readiness
	election
}

// electionStatus is one election's status in a several-election report.
type electionStatus struct {
	Election string `json:"election"`
	lease.Status
}

// report is what /leader and the status file say: for one election its status, as it always was; for
// several, {"elections": [...]}, each named.
func report(elections []namedElection) any {
	if len(elections) == 1 {
		return elections[0].Status()
	}
	all := struct {
		Elections []electionStatus `json:"elections"`
	}{}
	for _, e := range elections {
		all.Elections = append(all.Elections, electionStatus{Election: e.name, Status: e.Status()})
	}
	return all
}

// newMux serves the agent's endpoints. Kubelet probes /healthz and /readyz on the pod IP; apps read
// /leader through LEASEGATE_AGENT_URL, or follow it as server-sent events from events; Prometheus
// scrapes /metrics.
func newMux(elections []namedElection, events *eventHub, wake http.Handler, registry prometheus.Gatherer) *http.ServeMux {
	mux := http.NewServeMux()
	byName := map[string]int{}
	for i, e := range elections {
		byName[e.name] = i
	}
	find := func(w http.ResponseWriter, r *http.Request) (int, bool) {
		i, ok := byName[r.PathValue("election")]
		if !ok {
			names := make([]string, len(elections))
			for i, e := range elections {
				names[i] = e.name
			}
			http.Error(w, fmt.Sprintf("no election %q; this pod runs %s", r.PathValue("election"), strings.Join(names, ", ")), http.StatusNotFound)
		}
		return i, ok
	}
	mux.HandleFunc("GET "+contract.AgentHealthPath, func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET "+contract.AgentReadyPath, func(w http.ResponseWriter, _ *http.Request) {
		writeProbe(w, elections, func(e namedElection) Readiness { return e.readiness })
	})
	// /leaderz is /readyz in leader mode whatever the readiness setting: 200 only while this pod leads
	// every election (/leaderz/<name>: that one). The startup probe of `leasegate.io/start: leader`
	// pods, and a check for scripts (`curl -f`).
	leaderMode := func(namedElection) Readiness { return ReadinessLeader }
	mux.HandleFunc("GET "+contract.AgentLeadingPath, func(w http.ResponseWriter, _ *http.Request) {
		writeProbe(w, elections, leaderMode)
	})
	mux.HandleFunc("GET "+contract.AgentLeadingPath+"/{election}", func(w http.ResponseWriter, r *http.Request) {
		if i, ok := find(w, r); ok {
			writeProbe(w, elections[i:i+1], leaderMode)
		}
	})
	mux.HandleFunc("GET "+contract.AgentLeaderPath, func(w http.ResponseWriter, r *http.Request) {
		if acceptsEvents(r) {
			events.serve(w, r, -1)
			return
		}
		writeJSON(w, report(elections))
	})
	mux.HandleFunc("GET "+contract.AgentLeaderPath+"/{election}", func(w http.ResponseWriter, r *http.Request) {
		i, ok := find(w, r)
		switch {
		case !ok:
		case acceptsEvents(r):
			events.serve(w, r, i)
		default:
			writeJSON(w, electionStatus{Election: elections[i].name, Status: elections[i].Status()})
		}
	})
	mux.Handle("GET "+contract.AgentMetricsPath, promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	// Followers on other pods wait here for this agent to let go of a lease it leads (leaseelection.WakeHub).
	mux.Handle("GET "+contract.AgentWakePath, wake)
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// writeProbe answers a probe over elections: the worst answer wins, and the body says who leads each.
func writeProbe(w http.ResponseWriter, elections []namedElection, mode func(namedElection) Readiness) {
	code, bodies := http.StatusOK, make([]string, len(elections))
	for i, e := range elections {
		c, body := readyz(e.Synced(), e.Status(), mode(e))
		code = max(code, c)
		if len(elections) > 1 {
			body = e.name + ": " + body
		}
		bodies[i] = body
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	fmt.Fprintln(w, strings.Join(bodies, "\n"))
}

// readyz decides the readiness probe's answer for one election. The body always says who leads, so
// `kubectl describe pod` on a follower that is not Ready explains itself.
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
