package process

import (
	"context"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasegate/leasegate/test/framework/checkout"
)

// A kube-apiserver killed and started again, and an etcd killed and started again, come back on the same
// data and the same credentials: what was written before is there, and the admin client goes on working.
func TestControlPlaneRestarts(t *testing.T) {
	if _, err := checkout.ControlPlaneAssets(); err != nil {
		t.Skip(err)
	}
	cp, err := StartControlPlane()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	ctx := context.Background()
	if _, err := cp.Client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const down = 3 * time.Second
	for _, tc := range []struct {
		name     string
		replaced string // the process that must have a new pid
		restart  func(context.Context) (time.Time, error)
		// down: no process of that name runs for that long after the kill.
		down time.Duration
	}{
		{"kube-apiserver killed and restarted", apiServerCommand, cp.RestartAPIServer, 0},
		{"etcd killed and restarted", etcdCommand, cp.RestartEtcd, 0},
		{"kube-apiserver restarted a second time", apiServerCommand, cp.RestartAPIServer, 0},
		{"kube-apiserver left down before it starts again", apiServerCommand,
			func(ctx context.Context) (time.Time, error) { return cp.RestartAPIServerAfter(ctx, down) }, down},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := children()
			killed := time.Now()
			restarted := make(chan struct{})
			var answered time.Time
			var err error
			go func() {
				defer close(restarted)
				answered, err = tc.restart(ctx)
			}()
			if tc.down > 0 {
				time.Sleep(tc.down * 2 / 3)
				if pid := children()[tc.replaced]; pid != 0 {
					t.Errorf("%s runs (pid %d) %s after the kill: want it down for %s", tc.replaced, pid, time.Since(killed).Round(time.Millisecond), tc.down)
				}
			}
			<-restarted
			if err != nil {
				t.Fatal(err)
			}
			if took := answered.Sub(killed); took < tc.down {
				t.Errorf("answered %s after the kill: want at least %s", took, tc.down)
			}
			if !answered.After(killed) {
				t.Errorf("answered at %s, before the kill at %s", answered, killed)
			}
			start := cp.LastStart()
			if !start.Ready.Equal(answered) || start.Started.Before(killed) || start.FirstAnswer.Before(start.Started) || start.Ready.Before(start.FirstAnswer) {
				t.Errorf("LastStart started %s, first answer %s, ready %s, killed at %s, answered at %s: want killed <= started <= first answer <= ready = answered",
					start.Started, start.FirstAnswer, start.Ready, killed, answered)
			}
			// A restarted kube-apiserver's counters start with it: at least the readiness poll that found
			// it ready is in them. After an etcd restart the API server's counters go back to its start.
			if served := start.Served.Sum("apiserver_request_total", nil); (tc.replaced == apiServerCommand) != (served > 0) {
				t.Errorf("LastStart's Served counts %v requests after a %s restart: want some after a kube-apiserver restart, none (no scrape) after etcd's", served, tc.replaced)
			}
			t.Logf("first answer %s and ready %s after the start, CPU %s, failing before ready: %q", start.FirstAnswer.Sub(start.Started), start.Ready.Sub(start.Started), start.CPU, start.Failing)
			// etcd may start within one tick of the kernel's CPU clock (10 ms); a kube-apiserver never does.
			if tc.replaced == apiServerCommand && start.CPU <= 0 {
				t.Errorf("LastStart's CPU %s: want what the restarted kube-apiserver spent to start", start.CPU)
			}
			after := children()
			if after[apiServerCommand] == 0 || after[etcdCommand] == 0 {
				t.Fatalf("after the restart, children %v: want kube-apiserver and etcd", after)
			}
			if after[tc.replaced] == before[tc.replaced] {
				t.Errorf("%s still has pid %d: want it replaced", tc.replaced, before[tc.replaced])
			}
			if _, err := cp.Client.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{}); err != nil {
				t.Fatalf("what was written before the restart: %v", err)
			}
			if apiServer, etcd := cp.RSSBytes(); apiServer == 0 || etcd == 0 {
				t.Errorf("RSS of kube-apiserver %d, etcd %d: want both found", apiServer, etcd)
			}
		})
	}
}

func TestFailingChecks(t *testing.T) {
	for _, tc := range []struct {
		name, body  string
		want        []string
		wantVerbose bool
	}{
		{"a start still waiting on two checks", "[+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld\n[+]informer-sync ok\n[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\nreadyz check failed\n",
			[]string{"etcd", "poststarthook/rbac/bootstrap-roles"}, true},
		{"ready", "[+]ping ok\n[+]etcd ok\nreadyz check passed\n", nil, true},
		{"a failed check with no name is not one", "[-]\n[-]   \n[+]ping ok\n", nil, true},
		{"not a verbose answer: says nothing of the checks", "Too many requests, please try again later.\n", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, verbose := failingChecks([]byte(tc.body))
			if !slices.Equal(got, tc.want) || verbose != tc.wantVerbose {
				t.Errorf("failingChecks(%q) = %q, %t; want %q, %t", tc.body, got, verbose, tc.want, tc.wantVerbose)
			}
		})
	}
}

// CPUTime reads what the kernel counts for a process: this one's, after it spent some, is close to what
// getrusage says.
func TestCPUTime(t *testing.T) {
	rusage := func() time.Duration {
		var u syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
			t.Fatal(err)
		}
		return time.Duration(u.Utime.Nano() + u.Stime.Nano())
	}
	for rusage() < 200*time.Millisecond { // spent, however busy the machine
	}
	got, err := CPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	want := rusage()
	if got < 150*time.Millisecond || got > want+50*time.Millisecond || got < want-50*time.Millisecond {
		t.Errorf("CPUTime = %s, getrusage says %s: want within a tick or so (and at least the 150ms spent)", got, want)
	}
	if _, err := CPUTime(-1); err == nil {
		t.Error("CPUTime(-1): want an error")
	}
}
