package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/test/framework/process"
	"github.com/leasegate/leasegate/test/framework/relay"
)

// recordingApp is the app behind a gate: it answers every request and records the mutations it served.
type recordingApp struct {
	*httptest.Server
	mu        sync.Mutex
	mutations []string
}

func newRecordingApp(name string) *recordingApp {
	app := &recordingApp{}
	app.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			app.mu.Lock()
			app.mutations = append(app.mutations, r.Method+" "+r.URL.Path)
			app.mu.Unlock()
		}
		fmt.Fprintf(w, "%s served %s %s", name, r.Method, r.URL.Path)
	}))
	DeferCleanup(app.Close)
	return app
}

func (a *recordingApp) served() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.mutations...)
}

func through(gateURL, method, path string) (int, http.Header, string, error) {
	req, _ := http.NewRequest(method, gateURL+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(body), err
}

var _ = Describe("The mutation gate", func() {
	It("passes reads on every replica and mutations only on the leader, answers the others 503 with Retry-After and the holder, and closes within the renew deadline of a leader cut off", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		dir := GinkgoT().TempDir()
		var agents []*process.Agent
		var proxies []*relay.Proxy
		apps := map[*process.Agent]*recordingApp{}
		for i := range 3 {
			proxy, err := relay.StartProxy(controlPlane.Address())
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(proxy.Close)
			proxies = append(proxies, proxy)
			pod, err := controlPlane.CreatePod(ctx, ns, fmt.Sprintf("worker-%d", i), dir, "https://"+proxy.Addr)
			Expect(err).NotTo(HaveOccurred())
			app := newRecordingApp(pod.Name)
			agent := startAgent(pod, process.AgentOptions{Timing: fastTiming, GateUpstream: strings.TrimPrefix(app.URL, "http://")})
			agents = append(agents, agent)
			apps[agent] = app
		}
		leader := soleLeader(agents)
		// An agent serving the gate runs on one thread too, but keeps the runtime's collector: its heap
		// follows the app's traffic.
		Expect(leader.Metric("go_sched_gomaxprocs_threads")).To(Equal(1.0))
		Expect(leader.Metric("go_gc_gogc_percent")).To(Equal(100.0))

		By("reads reach every app; mutations only the leader's")
		for _, a := range agents {
			code, _, body, err := through(a.GateURL, http.MethodGet, "/orders")
			Expect(err).NotTo(HaveOccurred())
			Expect(code).To(Equal(http.StatusOK))
			Expect(body).To(Equal(a.Pod.Name + " served GET /orders"))
			for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
				code, header, body, err := through(a.GateURL, method, "/orders/1")
				Expect(err).NotTo(HaveOccurred())
				if a == leader {
					Expect(code).To(Equal(http.StatusOK), "the leader's %s", method)
					continue
				}
				Expect(code).To(Equal(http.StatusServiceUnavailable), "a follower's %s", method)
				retry, err := strconv.Atoi(header.Get("Retry-After"))
				Expect(err).NotTo(HaveOccurred())
				Expect(retry).To(BeNumerically(">=", 1))
				Expect(retry).To(BeNumerically("<=", int((fastTiming.LeaseDuration+lease.DefaultClockSkewMargin)/time.Second)), "at most until the lease could change hands")
				var refusal struct{ Error, Lease, Holder string }
				Expect(json.Unmarshal([]byte(body), &refusal)).To(Succeed())
				Expect(refusal.Holder).To(Equal(leader.Pod.Identity()))
				Expect(refusal.Lease).To(Equal(ns + "/" + leaseName))
			}
		}
		for a, app := range apps {
			if a != leader {
				Expect(app.served()).To(BeEmpty(), "a follower's app served no mutation")
			}
		}
		Expect(apps[leader].served()).To(HaveLen(4))

		By("cutting the leader off from the API server: its gate refuses mutations once its renew deadline passes")
		for i, a := range agents {
			if a == leader {
				proxies[i].Cut()
			}
		}
		cut := time.Now()
		Eventually(func() int {
			code, _, _, _ := through(leader.GateURL, http.MethodPost, "/orders")
			return code
		}).WithTimeout(5 * time.Second).WithPolling(10 * time.Millisecond).Should(Equal(http.StatusServiceUnavailable))
		closed := time.Since(cut)
		GinkgoWriter.Printf("the cut-off leader's gate refused mutations %s after the cut (renew deadline %s)\n", closed, fastTiming.RenewDeadline)
		Expect(closed).To(BeNumerically("<=", fastTiming.RenewDeadline+100*time.Millisecond))

		next := soleLeader(others(agents, leader))
		Eventually(func() int {
			code, _, _, _ := through(next.GateURL, http.MethodPost, "/orders")
			return code
		}).Should(Equal(http.StatusOK), "the new leader's gate passes mutations")
		code, _, _, err := through(leader.GateURL, http.MethodGet, "/orders")
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusOK), "reads still reach the old leader's app")
	})

	It("judges every request the app would take as a mutation as one: a follower refuses post in lower case and a REST POST that claims gRPC", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		dir := GinkgoT().TempDir()
		var agents []*process.Agent
		apps := map[*process.Agent]*recordingApp{}
		for i := range 2 {
			pod, err := controlPlane.CreatePod(ctx, ns, fmt.Sprintf("worker-%d", i), dir, "")
			Expect(err).NotTo(HaveOccurred())
			app := newRecordingApp(pod.Name)
			// The gRPC list narrowed to one method: before, any request that claimed gRPC was judged by it.
			agent := startAgent(pod, process.AgentOptions{Timing: fastTiming, GateUpstream: strings.TrimPrefix(app.URL, "http://"), GateGRPCMethods: "/orders.Orders/Create"})
			agents = append(agents, agent)
			apps[agent] = app
		}
		leader := soleLeader(agents)
		follower := others(agents, leader)[0]

		send := func(a *process.Agent, method, contentType string) int {
			req, err := http.NewRequest(method, a.GateURL+"/orders", strings.NewReader(`{"item":1}`))
			Expect(err).NotTo(HaveOccurred())
			req.Header.Set("Content-Type", contentType)
			resp, err := http.DefaultClient.Do(req)
			Expect(err).NotTo(HaveOccurred())
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode
		}
		for _, tc := range []struct{ method, contentType string }{
			{"post", "application/json"},
			{"Delete", "application/json"},
			{http.MethodPost, "application/grpc"},
			{http.MethodPost, "application/grpc+proto"},
		} {
			Expect(send(follower, tc.method, tc.contentType)).To(Equal(http.StatusServiceUnavailable), "a follower's %s with %s", tc.method, tc.contentType)
			Expect(send(leader, tc.method, tc.contentType)).To(Equal(http.StatusOK), "the leader's %s with %s", tc.method, tc.contentType)
		}
		Expect(apps[follower].served()).To(BeEmpty(), "the follower's app served no mutation")
		Expect(apps[leader].served()).To(Equal([]string{"post /orders", "Delete /orders", "POST /orders", "POST /orders"}))
	})
})
