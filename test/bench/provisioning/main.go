// Command provisioning measures the injector and provisioning at scale: it runs leasegate-webhook against
// a real API server and, for each number of leases asked for, creates that many elections' pods in a
// labelled namespace (-candidates pods per lease, 16 creations at a time), each injected by the webhook
// on its way in, then waits until every lease has its Lease, Role and RoleBinding. It reports the pod
// creations' latency as the API server's clients see it (injection included), the injector's own
// duration, how many pods per second end up with their rights in place, and the webhook's resident
// memory. `make bench` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/test/framework/load"
	"github.com/leasegate/leasegate/test/framework/process"
)

func main() {
	leases := flag.String("leases", "1000", "comma-separated numbers of leases, a row each")
	candidates := flag.Int("candidates", 3, "pods per lease")
	flag.Parse()
	process.QuietControllerRuntime()
	counts, err := load.Counts(*leases)
	if err != nil || *candidates < 1 {
		fmt.Fprintf(os.Stderr, "provisioning: -leases %q -candidates %d: want positive counts\n", *leases, *candidates)
		os.Exit(2)
	}
	if err := run(context.Background(), counts, *candidates); err != nil {
		fmt.Fprintln(os.Stderr, "provisioning:", err)
		os.Exit(1)
	}
}

// row is one measurement.
type row struct {
	leases, pods  int
	p50, p99, max time.Duration
	injectP99     float64 // seconds, the webhook's own histogram
	throughput    float64 // pods with their rights in place, per second from the first creation
	afterLast     time.Duration
	rssBytes      int64
}

func run(ctx context.Context, counts []int, candidates int) error {
	bench, err := process.StartWebhookBench(ctx)
	if err != nil {
		return err
	}
	defer bench.Stop()
	webhook, api := bench.Webhook, bench.Client

	var rows []row
	for _, n := range counts {
		r, err := measure(ctx, api, webhook, n, candidates)
		if err != nil {
			return fmt.Errorf("%d leases: %w", n, err)
		}
		rows = append(rows, r)
	}
	fmt.Printf("\nInjection and provisioning, %d pods per lease created 16 at a time into one labelled namespace per row.\n\n", candidates)
	fmt.Println("| leases | pods | pod create p50 | p99 | max | injector p99 (its histogram, so far) | pods with rights in place | last rights after the last pod | webhook RSS |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Printf("| %d | %d | %s | %s | %s | %.2f ms | %.0f/s | %s | %.1f MiB |\n", r.leases, r.pods, r.p50, r.p99, r.max,
			r.injectP99*1000, r.throughput, r.afterLast.Round(time.Millisecond), float64(r.rssBytes)/(1<<20))
	}
	return nil
}

func measure(ctx context.Context, api kubernetes.Interface, webhook *process.Webhook, n, candidates int) (row, error) {
	ns := "provision-" + strconv.Itoa(n)
	if _, err := api.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: ns, Labels: map[string]string{contract.Inject: "enabled"},
	}}, metav1.CreateOptions{}); err != nil {
		return row{}, err
	}
	if _, err := api.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "worker"}}, metav1.CreateOptions{}); err != nil {
		return row{}, err
	}
	pods := n * candidates
	fmt.Fprintf(os.Stderr, "creating %d pods for %d leases in %s\n", pods, n, ns)
	var (
		mu        sync.Mutex
		latencies []time.Duration
		failed    atomic.Int64
		firstErr  atomic.Pointer[error]
		next      atomic.Int64
		wg        sync.WaitGroup
	)
	start := time.Now()
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < pods; i = int(next.Add(1)) - 1 {
				t := time.Now()
				_, err := api.CoreV1().Pods(ns).Create(ctx, pod(i/candidates), metav1.CreateOptions{})
				d := time.Since(t)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, &err)
					continue
				}
				mu.Lock()
				latencies = append(latencies, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	lastCreated := time.Now()
	if err := firstErr.Load(); err != nil {
		return row{}, fmt.Errorf("%d of %d pod creations failed, the first: %w", failed.Load(), pods, *err)
	}

	// Rights are in place when each lease has its Lease, Role and RoleBinding: nothing else makes them in
	// this namespace, so counting them all is enough.
	deadline := lastCreated.Add(5 * time.Minute)
	for {
		done, err := provisioned(ctx, api, ns, n)
		if err != nil {
			return row{}, err
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			return row{}, fmt.Errorf("the %d leases' rights were not in place 5 minutes after the last pod", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	inPlace := time.Now()
	slices.Sort(latencies)
	pct := func(p float64) time.Duration {
		return latencies[int(float64(len(latencies)-1)*p)].Round(100 * time.Microsecond)
	}
	injectP99, err := injectionP99(webhook)
	if err != nil {
		return row{}, err
	}
	rss, err := webhook.RSSBytes()
	if err != nil {
		return row{}, err
	}
	return row{leases: n, pods: pods, p50: pct(0.5), p99: pct(0.99), max: pct(1), injectP99: injectP99,
		throughput: float64(pods) / inPlace.Sub(start).Seconds(), afterLast: inPlace.Sub(lastCreated), rssBytes: rss}, nil
}

// pod is a replica of election i: opted in by its namespace, electing on lease l-<i>, never scheduled
// (envtest runs no scheduler), restricted-compliant as the injector requires of what it adds.
func pod(i int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "worker-", Annotations: map[string]string{contract.Lease: "l-" + strconv.Itoa(i)}},
		Spec: corev1.PodSpec{
			ServiceAccountName: "worker",
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "app", Image: "registry.example/worker:1",
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}

// provisioned reports whether the namespace holds n Leases, Roles and RoleBindings, counted from a
// one-item page each (the API server says how many remain).
func provisioned(ctx context.Context, api kubernetes.Interface, ns string, n int) (bool, error) {
	count := func(items int, meta metav1.ListMeta) int { return items + int(ptr.Deref(meta.RemainingItemCount, 0)) }
	one := metav1.ListOptions{Limit: 1}
	leases, err := api.CoordinationV1().Leases(ns).List(ctx, one)
	if err != nil {
		return false, err
	}
	roles, err := api.RbacV1().Roles(ns).List(ctx, one)
	if err != nil {
		return false, err
	}
	bindings, err := api.RbacV1().RoleBindings(ns).List(ctx, one)
	if err != nil {
		return false, err
	}
	return count(len(leases.Items), leases.ListMeta) >= n && count(len(roles.Items), roles.ListMeta) >= n &&
		count(len(bindings.Items), bindings.ListMeta) >= n, nil
}

// injectionP99 is the 99th percentile of the webhook's own injection histogram, over every row so far.
func injectionP99(webhook *process.Webhook) (float64, error) {
	m, err := webhook.Metrics()
	if err != nil {
		return 0, err
	}
	p99, _ := m.Quantile("leasegate_injection_duration_seconds", nil, 0.99)
	return p99, nil
}
