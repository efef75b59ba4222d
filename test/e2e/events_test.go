package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/test/framework/process"
	"github.com/leasegate/leasegate/test/framework/report"
)

// followEvents opens an agent's event stream for the rest of the spec.
func followEvents(a *process.Agent) *process.EventStream {
	s, err := a.FollowEvents("/leader")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(s.Stop)
	return s
}

// namesHolder matches an event whose status names holder as the lease's holder.
func namesHolder(holder string) func(process.LeaderEvent) bool {
	return func(e process.LeaderEvent) bool { return e.Status.Holder == holder }
}

var _ = Describe("Leadership events and fencing tokens", func() {
	It("streams each change of leader to an event-stream client on every agent, each new term with a higher fencing token, and ends the stream of an agent that stops", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		agents := startAgents(ctx, ns, 3, process.AgentOptions{Timing: fastTiming})
		leader := soleLeader(agents)
		holders := watchLeaseOf(ctx, ns)
		streams := map[*process.Agent]*process.EventStream{}
		for _, a := range agents {
			streams[a] = followEvents(a)
			state, err := streams[a].Next(5*time.Second, func(e process.LeaderEvent) bool { return true })
			Expect(err).NotTo(HaveOccurred())
			Expect(state.Name).To(Equal("state"), "a stream opens with the state")
			Expect(state.Status.Holder).To(Equal(leader.Pod.Identity()))
		}
		token := streams[leader].Events()[0].Status.FencingToken
		Expect(token).To(BeEquivalentTo(ptr.Deref(getLease(ctx, ns).Spec.LeaseTransitions, -1)), "the token is the lease's term count")

		// afterWrite: from the new holder's write (its acquireTime); afterWatch: from the moment this test's
		// own watch of the Lease delivered that write, as any watcher of the API server learns of it.
		var afterWrite, afterWatch []time.Duration
		for round := range 5 {
			By(fmt.Sprintf("round %d: SIGTERM to the leader", round))
			stopped := streams[leader]
			Expect(leader.Signal(syscall.SIGTERM)).To(Succeed())
			change, err := holders.NextHolder(leader.Pod.Identity(), 5*time.Second)
			Expect(err).NotTo(HaveOccurred())
			// The new holder's write started at its acquireTime, on this machine's clock: the moment the
			// lease changed hands.
			changed := change.Spec.AcquireTime.Time
			_, err = stopped.Next(time.Second, func(e process.LeaderEvent) bool { return e.Name == "stopped" })
			Expect(err).NotTo(HaveOccurred(), "the stopping leader's stream says it stopped")
			Expect(stopped.WaitEnd(2*time.Second)).To(Succeed(), "and then ends cleanly")
			Expect(leader.WaitExit(ctx, 2*time.Second)).To(BeTrue())

			var newToken int64
			for _, a := range others(agents, leader) {
				e, err := streams[a].Next(5*time.Second, namesHolder(change.Holder))
				Expect(err).NotTo(HaveOccurred())
				if a.Pod.Identity() == change.Holder {
					Expect(e.Name).To(Equal("started"))
				} else {
					Expect(e.Name).To(Equal("leader"))
				}
				Expect(e.Status.FencingToken).To(BeNumerically(">", token), "a new term, a higher token")
				Expect(e.Status.FencingToken).To(BeEquivalentTo(ptr.Deref(change.Spec.LeaseTransitions, -1)), "the same token for everyone")
				afterWrite = append(afterWrite, e.At.Sub(changed))
				afterWatch = append(afterWatch, e.At.Sub(change.At))
				newToken = e.Status.FencingToken
			}
			token = newToken

			By("restarting the stopped agent, which follows with a stream of its own")
			restarted := startAgent(leader.Pod, process.AgentOptions{Timing: fastTiming})
			agents[slices.Index(agents, leader)] = restarted
			Eventually(func() (string, error) { s, err := restarted.Leader(); return s.Holder, err }).Should(Equal(change.Holder))
			streams[restarted] = followEvents(restarted)
			leader = soleLeader(agents)
		}
		figures := &report.FigureTable{}
		figures.Durations("event-stream clients hear of a new leader, after its write began", afterWrite)
		figures.Durations("event-stream clients hear of a new leader, after a watch of the Lease delivered that write", afterWatch)
		GinkgoWriter.Println(figures.Markdown("Leadership events"))
		AddReportEntry("leadership event latency", figures.Markdown("Leadership events"))
		Expect(leader.Metric("leasegate_agent_fencing_token")).To(BeEquivalentTo(token))
	})

	It("after a freeze and a takeover, the thawed leader's last mutation carries a lower token than the new leader's first, and an etcd transaction comparing tokens refuses its late write", func(ctx SpecContext) {
		etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{controlPlane.EtcdURL()}, DialTimeout: 5 * time.Second})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(etcd.Close)
		ns := newNamespace(ctx)
		store := &tokenStore{etcd: etcd, key: "/leasegate-e2e/" + ns + "/orders"}

		dir := GinkgoT().TempDir()
		var agents []*process.Agent
		apps := map[*process.Agent]*storeApp{}
		for i := range 3 {
			pod, err := controlPlane.CreatePod(ctx, ns, fmt.Sprintf("worker-%d", i), dir, "")
			Expect(err).NotTo(HaveOccurred())
			app := newStoreApp(pod.Name, store)
			a := startAgent(pod, process.AgentOptions{Timing: fastTiming, GateUpstream: strings.TrimPrefix(app.URL, "http://")})
			agents = append(agents, a)
			apps[a] = app
		}
		stale := soleLeader(agents)

		By("the leader's app takes a mutation, then stalls before it writes (a pause, a slow disk)")
		apps[stale].stall()
		late := make(chan int, 1)
		go func() {
			defer GinkgoRecover()
			code, _, _, err := through(stale.GateURL, http.MethodPost, "/orders")
			Expect(err).NotTo(HaveOccurred())
			late <- code
		}()
		Eventually(apps[stale].tokens).Should(HaveLen(1))
		staleToken := apps[stale].tokens()[0]

		By("freezing the leader's agent: another takes over, and its app writes")
		Expect(stale.Signal(syscall.SIGSTOP)).To(Succeed())
		next, _ := timeUntilOneLeads(others(agents, stale), time.Now(), 10*time.Second)
		Eventually(func() (int, error) {
			code, _, _, err := through(next.GateURL, http.MethodPost, "/orders")
			return code, err
		}).Should(Equal(http.StatusOK))
		newToken := apps[next].tokens()[0]
		Expect(staleToken).To(BeNumerically("<", newToken), "the old leader's last forwarded mutation carries a lower token than the new leader's first")

		By("thawing it: its gate forwards nothing more, and its app's late write is refused by the store")
		Expect(stale.Signal(syscall.SIGCONT)).To(Succeed())
		code, _, _, err := through(stale.GateURL, http.MethodPost, "/orders")
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusServiceUnavailable))
		Expect(apps[stale].tokens()).To(HaveLen(1), "the thawed gate forwarded no mutation")
		apps[stale].resume()
		Eventually(late).Should(Receive(Equal(http.StatusConflict)), "the store refuses the write with the lower token")
		owner, token, err := store.read(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(owner).To(Equal(next.Pod.Name), "the new leader's write stands")
		Expect(token).To(Equal(newToken))
	})
})

// tokenStore is a store that compares fencing tokens, on etcd: a write lands only if its token is at
// least the highest one the store has seen, in one transaction with recording that token.
type tokenStore struct {
	etcd *clientv3.Client
	key  string
}

// write stores value with token, unless the store has seen a higher token; it reports whether it did.
func (s *tokenStore) write(ctx context.Context, value string, token int64) (bool, error) {
	// Zero-padded, so etcd's byte-wise comparison orders tokens as numbers.
	padded := fmt.Sprintf("%020d", token)
	resp, err := s.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(s.key+"/token"), ">", padded)).
		Else(clientv3.OpPut(s.key+"/token", padded), clientv3.OpPut(s.key+"/value", value)).
		Commit()
	if err != nil {
		return false, err
	}
	// The comparison fails on a token key that does not exist yet, so the first write lands too.
	return !resp.Succeeded, nil
}

func (s *tokenStore) read(ctx context.Context) (value string, token int64, err error) {
	resp, err := s.etcd.Get(ctx, s.key+"/", clientv3.WithPrefix())
	if err != nil {
		return "", 0, err
	}
	for _, kv := range resp.Kvs {
		switch string(kv.Key) {
		case s.key + "/value":
			value = string(kv.Value)
		case s.key + "/token":
			token, err = strconv.ParseInt(string(kv.Value), 10, 64)
		}
	}
	return value, token, err
}

// storeApp is the app behind a gate: on each mutation it records the fencing token the gate sent and
// writes its pod's name to the store with it; stall holds its writes until resume.
type storeApp struct {
	*httptest.Server
	mu      sync.Mutex
	seen    []int64
	stalled chan struct{}
}

func newStoreApp(name string, store *tokenStore) *storeApp {
	app := &storeApp{}
	app.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			return
		}
		token, err := strconv.ParseInt(r.Header.Get(contract.FencingTokenHeader), 10, 64)
		if err != nil {
			http.Error(w, "no fencing token: "+err.Error(), http.StatusBadRequest)
			return
		}
		app.mu.Lock()
		app.seen = append(app.seen, token)
		stalled := app.stalled
		app.mu.Unlock()
		if stalled != nil {
			<-stalled
		}
		ok, err := store.write(r.Context(), name, token)
		switch {
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		case !ok:
			http.Error(w, "a higher fencing token has written", http.StatusConflict)
		}
	}))
	DeferCleanup(app.Close)
	return app
}

func (a *storeApp) tokens() []int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.seen)
}

func (a *storeApp) stall() {
	a.mu.Lock()
	a.stalled = make(chan struct{})
	a.mu.Unlock()
}

func (a *storeApp) resume() {
	a.mu.Lock()
	close(a.stalled)
	a.stalled = nil
	a.mu.Unlock()
}
