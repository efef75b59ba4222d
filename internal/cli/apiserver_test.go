package cli

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/test/framework/checkout"
	"github.com/leasegate/leasegate/test/framework/process"
)

// These tests need a real API server: one that ends watches, serves (or not) cert-manager's group, and
// reports its version.

func startControlPlane(t *testing.T) *process.ControlPlane {
	t.Helper()
	if testing.Short() {
		t.Skip("starts kube-apiserver and etcd")
	}
	ctrllog.SetLogger(logr.Discard()) // envtest's client logs through it
	cp, err := process.StartControlPlane()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	return cp
}

// waitFor polls cond until it holds; the deadline only bounds a broken run.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
	}
}

// countWatches counts the Lease watches a clientset starts.
type countWatches struct {
	next    http.RoundTripper
	watches *atomic.Int32
}

func (c countWatches) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Query().Get("watch") == "true" && strings.HasSuffix(req.URL.Path, "/leases") {
		c.watches.Add(1)
	}
	return c.next.RoundTrip(req)
}

func TestWatchResumesWhenTheServerEndsTheWatch(t *testing.T) {
	cp := startControlPlane(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	leases := cp.Client.CoordinationV1().Leases("shop")
	now := metav1.NowMicro()
	if _, err := leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Labels: map[string]string{contract.Managed: "true"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("orders-0_a"), LeaseDurationSeconds: ptr.To[int32](15),
			LeaseTransitions: ptr.To[int32](1), AcquireTime: &now, RenewTime: &now},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var watches atomic.Int32
	config := rest.CopyConfig(cp.Config)
	config.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countWatches{rt, &watches} })
	cs := kubernetes.NewForConfigOrDie(config)
	out, errOut := &process.SyncBuffer{}, &process.SyncBuffer{}
	done := make(chan error, 1)
	go func() {
		// The server ends each watch after a second, as it ends every watch after --min-request-timeout.
		done <- watchStatus(ctx, cs, StatusOptions{Namespace: "shop", LeasegateNamespace: "leasegate-system", ConfigName: "leasegate-config"},
			OutputTable, genericiooptions.IOStreams{Out: out, ErrOut: errOut}, ptr.To[int64](1))
	}()
	waitFor(t, "the report", func() bool { return strings.Contains(out.String(), "orders-0") })
	waitFor(t, "the server to end the first watch and the plugin to watch again", func() bool { return watches.Load() >= 2 })

	l, err := leases.Get(ctx, "orders", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.HolderIdentity, l.Spec.LeaseTransitions = ptr.To("orders-1_b"), ptr.To[int32](2)
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new holder's row after the watch was resumed", func() bool { return strings.Contains(out.String(), "orders-1") })
	select {
	case err := <-done:
		t.Fatalf("--watch ended (%v) while the context lived", err)
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("--watch, stopped: %v", err)
	}
	if strings.Count(out.String(), "NAMESPACE") != 1 {
		t.Errorf("the header printed more than once:\n%s", out.String())
	}
}

func TestPreCheckAndWait(t *testing.T) {
	cp := startControlPlane(t)
	tools, err := checkout.FindTools()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{contract.Inject: contract.InjectEnabled}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"}},
	} {
		if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod := func(namespace, name, duration string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Annotations: map[string]string{contract.LeaseDuration: duration}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
		}
	}
	for _, p := range []*corev1.Pod{
		pod("shop", "refused", "banana"),   // opted in by its namespace, with a lease duration the webhook refuses
		pod("shop", "fine", "20s"),         // opted in, fine
		pod("elsewhere", "ignored", "bad"), // not opted in: the webhook never sees it
	} {
		if _, err := cp.Client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	opts := CheckOptions{LeasegateNamespace: "leasegate-system", ConfigName: "leasegate-config", WebhookConfiguration: "leasegate", Now: time.Now()}

	report, err := PreCheck(ctx, cp.Client, "", opts)
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]string{}
	for _, f := range report.Findings {
		found[f.Code+" "+f.Object] = f.Message
		if f.Docs != DocsFor(f.Code) {
			t.Errorf("%s links to %q", f.Code, f.Docs)
		}
	}
	if _, ok := found[CodeCertManagerMissing+" APIGroup/cert-manager.io"]; !ok {
		t.Errorf("no %s without cert-manager: %v", CodeCertManagerMissing, found)
	}
	if message := found[CodeWouldBeRefused+" Pod/shop/refused"]; !strings.Contains(message, contract.LeaseDuration) {
		t.Errorf("%s for shop/refused = %q, want the webhook's refusal naming %s: %v", CodeWouldBeRefused, message, contract.LeaseDuration, found)
	}
	if len(report.Findings) != 2 || report.Errors != 2 {
		t.Errorf("findings %v, want only cert-manager and shop/refused (the envtest server is new enough, has native sidecars)", found)
	}

	t.Run("--wait: until cert-manager is installed and the pod fixed", func(t *testing.T) {
		progress := &process.SyncBuffer{}
		type result struct {
			report *CheckReport
			err    error
		}
		done := make(chan result, 1)
		go func() {
			r, err := WaitForCheck(ctx, func(ctx context.Context) (*CheckReport, error) { return PreCheck(ctx, cp.Client, "", opts) },
				5*time.Minute, 100*time.Millisecond, progress)
			done <- result{r, err}
		}()
		waitFor(t, "a round that finds errors", func() bool {
			return strings.Contains(progress.String(), "2 error(s) left ("+CodeCertManagerMissing+", "+CodeWouldBeRefused+")")
		})
		if _, err := envtest.InstallCRDs(cp.Config, envtest.CRDInstallOptions{Paths: []string{tools.CertManagerCRDs}, ErrorIfPathMissing: true}); err != nil {
			t.Fatal(err)
		}
		if err := cp.Client.CoreV1().Pods("shop").Delete(ctx, "refused", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil || r.report.Errors != 0 {
			t.Fatalf("WaitForCheck = %+v, %v; want a report without errors", r.report, r.err)
		}
	})

	t.Run("--wait: the last report when the timeout passes", func(t *testing.T) {
		if err := cp.Client.CoreV1().Pods("shop").Delete(ctx, "fine", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cp.Client.CoreV1().Pods("shop").Create(ctx, pod("shop", "refused-again", "-1s"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		progress := &process.SyncBuffer{}
		r, err := WaitForCheck(ctx, func(ctx context.Context) (*CheckReport, error) { return PreCheck(ctx, cp.Client, "", opts) },
			300*time.Millisecond, 100*time.Millisecond, progress)
		if err != nil || r.Errors != 1 || r.Findings[0].Code != CodeWouldBeRefused {
			t.Fatalf("WaitForCheck = %+v, %v; want the last report, with the refused pod", r, err)
		}
		if !strings.Contains(progress.String(), "errors left after --timeout") {
			t.Errorf("progress does not say it gave up: %q", progress.String())
		}
	})
}
