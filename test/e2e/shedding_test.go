package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasegate/leasegate/test/framework/process"
)

// sheddingProxy stands in front of the real kube-apiserver for one agent, as API Priority and Fairness
// does for one flow: it passes requests through, or answers those shed asks for with 429 and a
// Retry-After, and records each request and when it arrived.
type sheddingProxy struct {
	*httptest.Server

	mu         sync.Mutex
	shed       func(r *http.Request) bool // nil: shed nothing
	retryAfter int
	arrivals   []arrival
}

type arrival struct {
	at     time.Time
	method string
	url    *url.URL
	shed   bool
}

func startSheddingProxy() *sheddingProxy {
	target, err := url.Parse(controlPlane.Config.Host)
	Expect(err).NotTo(HaveOccurred())
	roots := x509.NewCertPool()
	Expect(roots.AppendCertsFromPEM(controlPlane.Config.CAData)).To(BeTrue())
	forward := httputil.NewSingleHostReverseProxy(target)
	forward.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true}
	forward.FlushInterval = -1 // watch events as they come
	p := &sheddingProxy{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		shed := p.shed != nil && p.shed(r)
		p.arrivals = append(p.arrivals, arrival{at: time.Now(), method: r.Method, url: r.URL, shed: shed})
		retryAfter := p.retryAfter
		p.mu.Unlock()
		if shed {
			w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"TooManyRequests","code":429,"message":"Too many requests, please try again later.","details":{"retryAfterSeconds":` + strconv.Itoa(retryAfter) + `}}`))
			return
		}
		forward.ServeHTTP(w, r)
	}))
	DeferCleanup(p.Close)
	return p
}

// shedFrom sheds the requests shed chooses, with Retry-After seconds, from now on; it cuts the open
// connections, so that the agent's watch, too, must come back through the shedding.
func (p *sheddingProxy) shedFrom(retryAfter int, shed func(r *http.Request) bool) {
	p.mu.Lock()
	p.shed, p.retryAfter, p.arrivals = shed, retryAfter, nil
	p.mu.Unlock()
	p.CloseClientConnections()
}

func (p *sheddingProxy) seen() []arrival {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]arrival(nil), p.arrivals...)
}

func everything(*http.Request) bool { return true }

// expectAtMostOnePer checks that no two requests arrived within window of each other: at most one in any
// window-long span.
func expectAtMostOnePer(arrivals []arrival, window time.Duration, who string) {
	for i := 1; i < len(arrivals); i++ {
		gap := arrivals[i].at.Sub(arrivals[i-1].at)
		Expect(gap).To(BeNumerically(">=", window), "%s sent request %d (%s) %s after the one before, inside the Retry-After of %s: %v",
			who, i+1, arrivals[i].method, gap, window, arrivals)
	}
}

var _ = Describe("Agents that the API server sheds", func() {
	// observe is how long the specs watch the shed agents: several Retry-Afters, and past the first
	// doublings of the followers' backoff.
	const observe = 14 * time.Second

	It("send at most one request per Retry-After: 2 s while every answer is a 429", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		leaderProxy, shedProxy := startSheddingProxy(), startSheddingProxy()
		agents := startAgents(ctx, ns, 1, process.AgentOptions{}, leaderProxy.URL)
		Eventually(agents[0].IsLeader).WithContext(ctx).Should(BeTrue())

		By("starting an agent whose every request is answered 429 with Retry-After: 2")
		shedProxy.shedFrom(2, everything)
		dir := GinkgoT().TempDir()
		pod, err := controlPlane.CreatePod(ctx, ns, "worker-shed", dir, shedProxy.URL)
		Expect(err).NotTo(HaveOccurred())
		shed := startAgent(pod, process.AgentOptions{})
		time.Sleep(observe)

		arrivals := shedProxy.seen()
		Expect(len(arrivals)).To(BeNumerically(">=", 3), "the shed agent stopped asking altogether: %v", arrivals)
		expectAtMostOnePer(arrivals, 2*time.Second, "the shed agent")
		Expect(shed.IsLeader()).To(BeFalse())
		Expect(agents[0].IsLeader()).To(BeTrue())
	})

	It("keep a shed leader leading while its shed followers back off", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		proxies := []*sheddingProxy{startSheddingProxy(), startSheddingProxy(), startSheddingProxy()}
		leader := startAgents(ctx, ns, 1, process.AgentOptions{}, proxies[0].URL)[0]
		Eventually(leader.IsLeader).WithContext(ctx).Should(BeTrue())
		dir := GinkgoT().TempDir()
		var followers []*process.Agent
		for i, p := range proxies[1:] {
			pod, err := controlPlane.CreatePod(ctx, ns, "follower-"+strconv.Itoa(i), dir, p.URL)
			Expect(err).NotTo(HaveOccurred())
			followers = append(followers, startAgent(pod, process.AgentOptions{}))
		}
		for _, f := range followers {
			Eventually(func() (string, error) {
				s, err := f.Leader()
				return s.Holder, err
			}).WithContext(ctx).Should(Equal(leader.Pod.Identity()))
		}
		before, err := controlPlane.Client.CoordinationV1().Leases(ns).Get(ctx, leaseName, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())

		By("shedding every other write of the leader (Retry-After: 1) and every request of the followers (Retry-After: 2)")
		var writes int
		proxies[0].shedFrom(1, func(r *http.Request) bool {
			if r.Method == http.MethodGet {
				return false
			}
			writes++
			return writes%2 == 1
		})
		for _, p := range proxies[1:] {
			p.shedFrom(2, everything)
		}
		time.Sleep(observe)

		after, err := controlPlane.Client.CoordinationV1().Leases(ns).Get(ctx, leaseName, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(*after.Spec.HolderIdentity).To(Equal(leader.Pod.Identity()), "the shed leader lost its lease")
		Expect(*after.Spec.LeaseTransitions).To(Equal(*before.Spec.LeaseTransitions))
		Expect(after.Spec.RenewTime.Time).To(BeTemporally(">", before.Spec.RenewTime.Time))
		Expect(leader.IsLeader()).To(BeTrue())

		var renewed, shedRenewals int
		leaderArrivals := proxies[0].seen()
		for i, a := range leaderArrivals {
			if a.method != http.MethodPut {
				continue
			}
			if !a.shed {
				renewed++
				continue
			}
			shedRenewals++
			// The renewal after a shed one waits out the Retry-After.
			for _, next := range leaderArrivals[i+1:] {
				if next.method == http.MethodPut {
					Expect(next.at.Sub(a.at)).To(BeNumerically(">=", time.Second), "the leader renewed again inside the Retry-After: %v", leaderArrivals)
					break
				}
			}
		}
		Expect(shedRenewals).To(BeNumerically(">=", 2), "the leader was not shed: %v", leaderArrivals)
		Expect(renewed).To(BeNumerically(">=", 2), "the leader's renewals did not get through: %v", leaderArrivals)

		for i, p := range proxies[1:] {
			expectAtMostOnePer(p.seen(), 2*time.Second, "follower "+strconv.Itoa(i))
		}
		for _, f := range followers {
			Expect(f.IsLeader()).To(BeFalse())
		}
	})
})
