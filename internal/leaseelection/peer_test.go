package leaseelection

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/leasegate/leasegate/internal/contract"
)

// wakeServer serves a hub on loopback with cleartext HTTP/2, as the agent's endpoints do, and returns it
// with its holder URL.
func wakeServer(t testing.TB) (*WakeHub, string) {
	t.Helper()
	hub := NewWakeHub()
	mux := http.NewServeMux()
	mux.Handle("GET "+contract.AgentWakePath, hub)
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(func() {
		hub.Close()
		srv.Close()
	})
	addr := srv.Listener.Addr().(*net.TCPAddr)
	return hub, HolderURL(addr.IP.String(), addr.Port)
}

// runFollower is runAdvertising on a hub of its own: a follower that, as an agent does, answers on
// loopback, where its peers may then answer too.
func runFollower(t *testing.T, store Store, clock *clocktesting.FakeClock, identity string) (*Elector, context.CancelFunc) {
	t.Helper()
	hub, url := wakeServer(t)
	return runAdvertising(t, store, clock, identity, hub, url)
}

// runAdvertising is runElector for an elector that answers its followers' waits on hub at url.
func runAdvertising(t *testing.T, store Store, clock *clocktesting.FakeClock, identity string, hub *WakeHub, url string) (*Elector, context.CancelFunc) {
	t.Helper()
	return startElector(t, Config{Lock: LeaseLock{store}, Namespace: "shop", Name: "orders", Identity: identity, Timing: testTiming,
		ClockSkewMargin: time.Second, Clock: clock, Log: logr.Discard(), Wake: hub, WakeURL: url})
}

func openWatches(s *memStore) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.watchers)
}

// TestFollowersWaitOnTheHolderAndTakeItsReleaseWithoutAWatch: the leader writes its URL on the lease and
// watches nothing; its followers wait on it instead of watching, and take the lease it releases at once,
// the clock standing still, with one read each.
func TestFollowersWaitOnTheHolderAndTakeItsReleaseWithoutAWatch(t *testing.T) {
	store, clock := storeWith(t, nil), clocktesting.NewFakeClock(start)
	hubA, urlA := wakeServer(t)
	a, stopA := runAdvertising(t, store, clock, "a-0_ua", hubA, urlA)
	eventually(t, "a leads", func() bool { return a.Status().IsLeader })
	if got := store.current().Annotations[contract.HolderURL]; got != urlA {
		t.Fatalf("the lease names %q as the holder's URL, want %q", got, urlA)
	}
	hubB, urlB := wakeServer(t)
	b, _ := runAdvertising(t, store, clock, "b-0_ub", hubB, urlB)
	hubC, urlC := wakeServer(t)
	c, _ := runAdvertising(t, store, clock, "c-0_uc", hubC, urlC)
	eventually(t, "no watch is open: the leader watches nothing, its followers wait on it", func() bool {
		return b.Synced() && c.Synced() && openWatches(store) == 0
	})
	gets, _ := store.counts()

	stopA()
	eventually(t, "a follower takes the released lease, the clock standing still", func() bool {
		return b.Status().IsLeader || c.Status().IsLeader
	})
	winnerURL := urlB
	if c.Status().IsLeader {
		winnerURL = urlC
	}
	if got := store.current().Annotations[contract.HolderURL]; got != winnerURL {
		t.Errorf("the lease names %q as the holder's URL, want the new holder's %q", got, winnerURL)
	}
	eventually(t, "the other follower waits on the new holder, and nothing watches", func() bool {
		return openWatches(store) == 0
	})
	if after, _ := store.counts(); after-gets > 3 {
		t.Errorf("%d reads between the release and the take: want at most one per follower, and the loser's one after its lost race", after-gets)
	}
}

// TestFollowerWatchesWhereTheHolderCannotBeAsked: a lease naming a URL nobody answers (a NetworkPolicy,
// a holder gone) is watched, and its release is taken at once through the watch.
func TestFollowerWatchesWhereTheHolderCannotBeAsked(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close() // nothing answers there
	held := heldLease("b-0_ub", start)
	held.Spec.LeaseDurationSeconds = 3600
	held.Annotations = map[string]string{contract.HolderURL: "http://127.0.0.1:" + strconv.Itoa(port)}
	store, clock := storeWith(t, held), clocktesting.NewFakeClock(start)
	a, _ := runFollower(t, store, clock, "a-0_ua")
	eventually(t, "the wait fails, and it watches the lease instead", func() bool { return a.Synced() && openWatches(store) == 1 })

	store.write(t, func(l *Lease) { l.Spec.HolderIdentity = "" })
	eventually(t, "it takes the released lease from its watch, the clock standing still", func() bool { return a.Status().IsLeader })
}

// TestFollowerOfACrashedHolderTakesTheLeaseWhenItExpires: a holder that stops without releasing (its
// agent killed: the wait's connection ends) leaves the lease to expire; the follower, then watching,
// takes it at its expiry and not before.
func TestFollowerOfACrashedHolderTakesTheLeaseWhenItExpires(t *testing.T) {
	hub, url := wakeServer(t)
	hub.lead("shop/orders", "b-0_ub")
	held := heldLease("b-0_ub", start)
	held.Annotations = map[string]string{contract.HolderURL: url}
	store, clock := storeWith(t, held), clocktesting.NewFakeClock(start)
	a, _ := runFollower(t, store, clock, "a-0_ua")
	eventually(t, "it waits on the holder", func() bool { return a.Synced() && a.waitingOnHolder() && openWatches(store) == 0 })

	hub.Close() // answers the wait as a crash would end it: the lease still names b
	eventually(t, "it watches the lease once the wait ended", func() bool { return openWatches(store) == 1 })
	// b's term: renewed at start, 3 s, 1 s of margin.
	stepWithoutLeading(t, clock, a, start, start.Add(4*time.Second), "b's last renewal, within its term")
	clock.SetTime(start.Add(4*time.Second + time.Millisecond))
	stepUntilLeading(t, clock, a, "it takes the lease once b's term has ended")
}

// waitingOnHolder reports whether the elector's loop waits on a holder: for the tests, which read it
// while the loop runs, through the status it publishes and the watch it wants.
func (e *Elector) waitingOnHolder() bool {
	e.watch.gate.mu.Lock()
	defer e.watch.gate.mu.Unlock()
	return !e.watch.gate.on && !e.Status().IsLeader
}

func TestWakeHubAnswers(t *testing.T) {
	hub, url := wakeServer(t)
	client := NewPeerClient()
	ask := func(lease, holder string) int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+contract.AgentWakePath+"?lease="+lease+"&holder="+holder, nil)
		resp, err := client.Do(req)
		if err != nil {
			return 0 // still waiting when the test gave up
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := ask("shop/orders", "a-0_ua"); got != http.StatusNotFound {
		t.Errorf("a wait on a holder that does not lead here: %d, want 404", got)
	}
	if got := ask("", "a-0_ua"); got != http.StatusBadRequest {
		t.Errorf("a wait that names no lease: %d, want 400", got)
	}
	hub.lead("shop/orders", "a-0_ua")
	if got := ask("shop/orders", "a-0_ua"); got != 0 {
		t.Errorf("a wait on a holder that leads was answered %d at once, want it held", got)
	}
	done := make(chan error, 1)
	go func() {
		done <- waitOnHolder(context.Background(), client, peerTarget{url: url, lease: "shop/orders", holder: "a-0_ua"})
	}()
	time.Sleep(50 * time.Millisecond)
	hub.release("shop/orders", "a-0_ua")
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the wait ended with %v once the holder let go, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the wait was not answered when the holder let go")
	}
}

func TestWakeHubBoundsTheWaitsOnOneLease(t *testing.T) {
	hub, url := wakeServer(t)
	hub.lead("shop/orders", "a-0_ua")
	client := NewPeerClient()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range maxWaitersPerLease {
		go func() { _ = waitOnHolder(ctx, client, peerTarget{url: url, lease: "shop/orders", holder: "a-0_ua"}) }()
	}
	eventually(t, "the waits are open", func() bool {
		hub.mu.Lock()
		defer hub.mu.Unlock()
		return hub.terms[termKey{"shop/orders", "a-0_ua"}].waiters == maxWaitersPerLease
	})
	err := waitOnHolder(ctx, client, peerTarget{url: url, lease: "shop/orders", holder: "a-0_ua"})
	if err == nil {
		t.Fatal("one wait past the bound was held, want it refused (its follower watches instead)")
	}
}

func TestHolderURLOf(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		ok          bool
	}{
		{"an IPv4 address and port", "http://10.1.2.3:9440", true},
		{"an IPv6 address and port", "http://[fd00::1]:9440", true},
		{"none", "", false},
		{"a host name, which the follower would resolve", "http://leader.shop.svc:9440", false},
		{"https", "https://10.1.2.3:9440", false},
		{"a path", "http://10.1.2.3:9440/admin", false},
		{"a query", "http://10.1.2.3:9440?x=1", false},
		{"user info", "http://u:p@10.1.2.3:9440", false},
		{"no port", "http://10.1.2.3", false},
		{"port 0", "http://10.1.2.3:0", false},
		{"the unspecified address", "http://0.0.0.0:9440", false},
		{"an IPv6 zone", "http://[fe80::1%25eth0]:9440", false},
		{"a link-local address (a cloud's metadata server)", "http://169.254.169.254:80", false},
		{"a multicast group", "http://224.0.0.1:9440", false},
		{"loopback, the follower's own pod, for a follower on a pod address", "http://127.0.0.1:9440", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &Lease{Annotations: map[string]string{contract.HolderURL: tc.value}}
			if _, ok := holderURLOf(l, false); ok != tc.ok {
				t.Errorf("holderURLOf(%q) ok = %v, want %v", tc.value, ok, tc.ok)
			}
		})
	}
	loopback := &Lease{Annotations: map[string]string{contract.HolderURL: "http://127.0.0.1:9440"}}
	if _, ok := holderURLOf(loopback, true); !ok {
		t.Error("a loopback URL refused to a follower that answers on loopback itself (agents sharing a host)")
	}
}

func TestHolderURL(t *testing.T) {
	for _, tc := range []struct {
		host string
		port int
		want string
	}{
		{"10.1.2.3", 9440, "http://10.1.2.3:9440"},
		{"fd00::1", 9440, "http://[fd00::1]:9440"},
		{"", 9440, ""},
		{"0.0.0.0", 9440, ""},
		{"::", 9440, ""},
		{"leader.example", 9440, ""},
		{"10.1.2.3", 0, ""},
		{"169.254.1.1", 9440, ""},
	} {
		if got := HolderURL(tc.host, tc.port); got != tc.want {
			t.Errorf("HolderURL(%q, %d) = %q, want %q", tc.host, tc.port, got, tc.want)
		}
	}
}

// TestFollowerTakesOnTheCopyItReadNotTheWatchsOld: while a follower waits on the holder its watch is off
// and sees none of the holder's renewals; once the wait ends (the holder crashed) it watches from the
// copy it read, and takes the lease at its expiry on that copy, with one write and no lost race on a
// stale one.
func TestFollowerTakesOnTheCopyItReadNotTheWatchsOld(t *testing.T) {
	hub, url := wakeServer(t)
	hub.lead("shop/orders", "b-0_ub")
	held := heldLease("b-0_ub", start)
	held.Annotations = map[string]string{contract.HolderURL: url}
	store, clock := storeWith(t, held), clocktesting.NewFakeClock(start)
	a, _ := runFollower(t, store, clock, "a-0_ua")
	eventually(t, "it waits on the holder", func() bool { return a.Synced() && a.waitingOnHolder() && openWatches(store) == 0 })
	// b renews three times, unseen: a's watch is off.
	for range 3 {
		clock.Step(testTiming.RetryPeriod)
		store.write(t, func(l *Lease) { l.Spec.RenewTime.Time = clock.Now() })
		settle()
	}
	lastRenewal := clock.Now()
	hub.Close() // b is gone without a release
	eventually(t, "it watches the lease once the wait ended", func() bool { return openWatches(store) == 1 })
	_, writes := store.counts()
	clock.SetTime(lastRenewal.Add(4*time.Second + time.Millisecond))
	stepUntilLeading(t, clock, a, "it takes the lease once b's last term has ended")
	if _, after := store.counts(); after-writes != 1 {
		t.Errorf("%d writes to take the lease: want 1, on the copy it read (a write on the watch's older copy conflicts)", after-writes)
	}
}

// BenchmarkWakeUp is the wake-up a release sends: a follower's wait held on the leader's hub over loopback
// HTTP/2, answered as the leader lets go. Its time is what the wait adds to a graceful handover before
// the follower's read and take.
func BenchmarkWakeUp(b *testing.B) {
	hub, url := wakeServer(b)
	target := peerTarget{url: url, lease: "shop/orders", holder: "a-0_ua"}
	client := NewPeerClient()
	for b.Loop() {
		hub.lead(target.lease, target.holder)
		done := make(chan error, 1)
		go func() { done <- waitOnHolder(context.Background(), client, target) }()
		for {
			hub.mu.Lock()
			waiting := hub.terms[termKey{target.lease, target.holder}].waiters > 0
			hub.mu.Unlock()
			if waiting {
				break
			}
			time.Sleep(10 * time.Microsecond)
		}
		hub.release(target.lease, target.holder)
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}

// TestWaitGivesUpOnAURLThatAnswersStillLeadingAtOnce: a holder URL may name any server (a holder chose
// it). One that answers "still leading" without holding the wait, as no holder's agent does, ends the
// wait (the follower then watches) instead of being asked again in a tight loop.
func TestWaitGivesUpOnAURLThatAnswersStillLeadingAtOnce(t *testing.T) {
	var asked atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		asked.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	client := &http.Client{Timeout: 5 * time.Second} // srv speaks HTTP/1.1 only
	err := waitOnHolder(context.Background(), client, peerTarget{url: srv.URL, lease: "shop/orders", holder: "b-0_ub"})
	if !errors.Is(err, errPeerAnsweredAtOnce) || asked.Load() != 1 {
		t.Errorf("after %d asks: %v; want one ask, ended with errPeerAnsweredAtOnce", asked.Load(), err)
	}
}
