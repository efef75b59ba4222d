package leaseelection

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/leasegate/leasegate/internal/lease"
)

// mcTiming's renew deadline is no multiple of its retry period, so a term that runs out does so between
// two renewals, when only the elector's own timer can notice.
var mcTiming = lease.Timing{LeaseDuration: 3 * time.Second, RenewDeadline: 2200 * time.Millisecond, RetryPeriod: 500 * time.Millisecond}

// mcElector is a multi-cluster elector under test: what it logged and every status it published.
type mcElector struct {
	*Elector
	store *memStore
	clock *clocktesting.FakeClock

	mu      sync.Mutex
	logs    []string
	changes []bool
}

func runMultiClusterElector(t *testing.T, identity string) (*mcElector, context.CancelFunc) {
	t.Helper()
	m := &mcElector{store: &memStore{generations: true}, clock: clocktesting.NewFakeClock(start)}
	log := funcr.New(func(_, args string) {
		m.mu.Lock()
		m.logs = append(m.logs, args)
		m.mu.Unlock()
	}, funcr.Options{})
	var err error
	m.Elector, err = NewElector(Config{
		Lock: &MultiClusterLeaseLock{Store: m.store}, Namespace: "shop", Name: "orders", Identity: identity, Timing: mcTiming,
		ClockSkewMargin: time.Second, Clock: m.clock, Log: log, OnChange: func(s lease.Status) {
			m.mu.Lock()
			m.changes = append(m.changes, s.IsLeader)
			m.mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return m, stop
}

// logged counts the lines logged with message msg.
func (m *mcElector) logged(msg string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, line := range m.logs {
		if strings.Contains(line, `"msg"="`+msg+`"`) {
			n++
		}
	}
	return n
}

func (m *mcElector) lastChange() (leader, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.changes) == 0 {
		return false, false
	}
	return m.changes[len(m.changes)-1], true
}

// heartbeat moves the clock on by d and waits for the elector's renewal at the new instant.
func (m *mcElector) heartbeat(t *testing.T, d time.Duration) {
	t.Helper()
	m.clock.Step(d)
	eventually(t, "the renewal at "+m.clock.Now().String(), func() bool {
		return m.store.current().Spec.RenewTime.Time.Equal(m.clock.Now())
	})
	settle() // the loop arms its next timers before the clock moves again
}

// answer writes the election controller's answer to the latest heartbeat: holder leads globally.
func (m *mcElector) answer(t *testing.T, holder string) {
	t.Helper()
	m.store.writeObject(t, func(object map[string]any) {
		generation := object["metadata"].(map[string]any)["generation"]
		object["status"] = map[string]any{"globalHolder": holder, "observedGeneration": generation}
	})
	settle()
}

func TestMultiClusterElectorStandbyNeverSaysItLeads(t *testing.T) {
	m, stop := runMultiClusterElector(t, "a-0_ua")
	eventually(t, "it stands for its cluster", func() bool { return m.Status().Holder == "a-0_ua" })
	for _, leader := range []string{"b-0_ub", "", "b-0_ub", "c-0_uc", "b-0_ub"} {
		m.answer(t, leader)
		if m.Status().IsLeader {
			t.Fatalf("a standby says it leads while the controller names %q", leader)
		}
		m.heartbeat(t, mcTiming.RetryPeriod)
	}
	stop()
	if n := m.logged("Started leading"); n != 0 {
		t.Errorf("a standby that never led logged Started leading %d times", n)
	}
	if n := m.logged("Stopped leading"); n != 0 {
		t.Errorf("a standby that never led logged Stopped leading %d times", n)
	}
	for i, leader := range m.changes {
		if leader {
			t.Errorf("status change %d published isLeader=true for a standby", i)
		}
	}
}

func TestMultiClusterElectorSaysOnceWhenItStartsAndWhenItsTermRunsOut(t *testing.T) {
	m, stop := runMultiClusterElector(t, "a-0_ua")
	eventually(t, "it stands for its cluster", func() bool { return m.Status().Holder == "a-0_ua" })
	m.answer(t, "")
	m.heartbeat(t, mcTiming.RetryPeriod)
	for range 4 {
		m.answer(t, "a-0_ua")
		if !m.Status().IsLeader {
			t.Fatal("a confirmed candidate does not lead")
		}
		m.heartbeat(t, mcTiming.RetryPeriod)
	}
	m.answer(t, "a-0_ua")
	confirmed := m.clock.Now() // the start of the last heartbeat the controller confirmed

	// Cut off from the global backend: the spec is still renewed, but nothing confirms it any more.
	for m.clock.Now().Add(mcTiming.RetryPeriod).Before(confirmed.Add(mcTiming.RenewDeadline)) {
		m.heartbeat(t, mcTiming.RetryPeriod)
	}
	if !m.Status().IsLeader {
		t.Fatal("it stopped leading before the renew deadline after its last confirmed heartbeat")
	}
	m.clock.SetTime(confirmed.Add(mcTiming.RenewDeadline))
	if m.Status().IsLeader {
		t.Fatal("Status reports leadership the renew deadline after the last confirmed heartbeat")
	}
	eventually(t, "the step-down reaches OnChange at that instant, between two renewals", func() bool {
		leader, ok := m.lastChange()
		return ok && !leader
	})
	if n := m.logged("Stopped leading"); n != 1 {
		t.Errorf("Stopped leading logged %d times when the term ran out, want 1", n)
	}

	// Healed: the other cluster won meanwhile.
	m.heartbeat(t, mcTiming.RetryPeriod)
	m.answer(t, "b-0_ub")
	m.heartbeat(t, mcTiming.RetryPeriod)
	m.answer(t, "b-0_ub")
	stop()
	if n := m.logged("Started leading"); n != 1 {
		t.Errorf("Started leading logged %d times over one term, want 1", n)
	}
	if n := m.logged("Stopped leading"); n != 1 {
		t.Errorf("Stopped leading logged %d times over one term, want 1", n)
	}
}
