// Command fence measures the fence where the API server meets it, and how its cost grows with the
// leases it caches and the guards it enforces: it runs leasegate-webhook against a real API server and,
// for each number of leases and of guards asked for, creates the leases (labelled as leasegate
// provisions them, held; G leases per namespace, lease i named worker-<i mod G>) and G guards (guard g
// fences the ConfigMap writes of service account sa-<g> with its namespace's lease worker-<g>), then
// drives /validate-guarded over HTTPS on loopback with AdmissionReviews at a fixed rate, half from the
// holder (admitted) and half from a follower (denied), and reports latency percentiles, throughput, the
// webhook's resident memory, the Lease watches the API server serves it and the requests it makes to the
// API server meanwhile. `make bench` runs it.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/manager"
	"github.com/leasegate/leasegate/test/framework/load"
	"github.com/leasegate/leasegate/test/framework/process"
)

func main() {
	rate := flag.Int("rate", 1000, "requests per second")
	duration := flag.Duration("duration", 10*time.Second, "how long to drive the webhook, per row")
	leases := flag.String("leases", "1000", "comma-separated numbers of guarded leases to cache, a row each")
	guards := flag.String("guards", "1", "comma-separated numbers of guards, a row each with every number of leases")
	flag.Parse()
	process.QuietControllerRuntime()
	leaseCounts, err := load.Counts(*leases)
	if err == nil {
		var guardCounts []int
		if guardCounts, err = load.Counts(*guards); err == nil {
			err = run(context.Background(), *rate, *duration, leaseCounts, guardCounts)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fence:", err)
		os.Exit(1)
	}
}

// row is one measurement.
type row struct {
	leases, guards int
	requests       int
	failures       int
	throughput     float64
	p50, p99, max  time.Duration
	rssBytes       int64
	watches        float64
	apiPerSecond   float64 // the webhook's own requests to the API server while it was driven
}

func run(ctx context.Context, rate int, duration time.Duration, leaseCounts, guardCounts []int) error {
	bench, err := process.StartWebhookBench(ctx)
	if err != nil {
		return err
	}
	defer bench.Stop()
	webhook := bench.Webhook
	client, err := tlsClient(webhook.CA)
	if err != nil {
		return err
	}

	var rows []row
	for _, n := range leaseCounts {
		for _, g := range guardCounts {
			if g > n {
				continue
			}
			r, err := measure(ctx, bench, client, rate, duration, n, g)
			if err != nil {
				return fmt.Errorf("%d leases, %d guards: %w", n, g, err)
			}
			if r.rssBytes, err = webhook.RSSBytes(); err != nil {
				return err
			}
			rows = append(rows, r)
		}
	}
	fmt.Printf("\nFence over HTTPS on loopback, %d requests/s offered for %s per row, half admitted, half denied.\n\n", rate, duration)
	fmt.Println("| leases cached | guards | throughput | p50 | p99 | max | failed | webhook RSS | Lease watches served | webhook's API requests/s |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Printf("| %d | %d | %.0f/s | %s | %s | %s | %d of %d | %.1f MiB | %.0f | %.1f |\n", r.leases, r.guards, r.throughput,
			r.p50, r.p99, r.max, r.failures, r.requests, float64(r.rssBytes)/(1<<20), r.watches, r.apiPerSecond)
	}
	return nil
}

// measure sets up n leases and g guards, drives the fence, and removes the leases again.
func measure(ctx context.Context, bench *process.WebhookBench, client *http.Client, rate int, duration time.Duration, n, g int) (row, error) {
	api, webhook := bench.Client, bench.Webhook
	url := webhook.URL
	fmt.Fprintf(os.Stderr, "creating %d held leases in %d namespaces, and %d guards\n", n, (n+g-1)/g, g)
	if err := createLeases(ctx, api, n, g); err != nil {
		return row{}, err
	}
	defer deleteLeases(ctx, api, n, g)
	var config strings.Builder
	config.WriteString("apiVersion: config.leasegate.io/v1alpha1\nkind: LeasegateConfiguration\nguards:\n")
	for i := range g {
		fmt.Fprintf(&config, "- {name: g%d, lease: worker-%d, serviceAccounts: [sa-%d], resources: [{group: \"\", resources: [configmaps]}]}\n", i, i, i)
	}
	if err := applyConfig(ctx, api, config.String()); err != nil {
		return row{}, err
	}
	holder, follower := review("worker-0", "uid-0"), review("worker-1", "uid-1")
	// Until the guards are in force and the leases cached, and then as a check of both answers.
	deadline := time.Now().Add(time.Minute)
	for {
		h, errH := post(client, url, holder)
		f, errF := post(client, url, follower)
		if errH == nil && errF == nil && h && !f {
			break
		}
		if time.Now().After(deadline) {
			return row{}, fmt.Errorf("warm-up: the holder admitted = %t (%v), a follower admitted = %t (%v)", h, errH, f, errF)
		}
		time.Sleep(100 * time.Millisecond)
	}

	fmt.Fprintf(os.Stderr, "driving %s/validate-guarded at %d requests/s for %s\n", url, rate, duration)
	requestsBefore, err := apiRequests(webhook)
	if err != nil {
		return row{}, err
	}
	var mu sync.Mutex
	var latencies []time.Duration
	var failures int
	var wg sync.WaitGroup
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for i := 0; time.Since(start) < duration; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
		body := holder
		if i%2 == 1 {
			body = follower
		}
		wg.Go(func() {
			t := time.Now()
			_, err := post(client, url, body)
			d := time.Since(t)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failures++
				return
			}
			latencies = append(latencies, d)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	requestsAfter, err := apiRequests(webhook)
	if err != nil {
		return row{}, err
	}
	if len(latencies) == 0 {
		return row{}, fmt.Errorf("all %d requests failed", failures)
	}
	slices.Sort(latencies)
	pct := func(p float64) time.Duration {
		return latencies[int(float64(len(latencies)-1)*p)].Round(time.Microsecond)
	}
	apiServer, err := bench.ControlPlane.Metrics(ctx)
	if err != nil {
		return row{}, err
	}
	// The webhook's alone, here.
	watches := apiServer.Sum("apiserver_longrunning_requests", map[string]string{"resource": "leases", "verb": "WATCH"})
	return row{leases: n, guards: g, requests: len(latencies) + failures, failures: failures,
		throughput: float64(len(latencies)) / elapsed.Seconds(), p50: pct(0.5), p99: pct(0.99), max: pct(1), watches: watches,
		apiPerSecond: (requestsAfter - requestsBefore) / elapsed.Seconds()}, nil
}

// createLeases makes n held leases labelled as leasegate provisions them, g per namespace: lease i is
// worker-<i mod g> in namespace load-<i / g>.
func createLeases(ctx context.Context, api kubernetes.Interface, n, g int) error {
	renewed := metav1.NewMicroTime(time.Now())
	return load.InParallel(n, func(i int) error {
		ns := "load-" + strconv.Itoa(i/g)
		if i%g == 0 {
			_, err := api.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
		}
		for {
			_, err := api.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: "worker-" + strconv.Itoa(i%g), Labels: map[string]string{contract.Managed: "true"}},
				Spec: coordinationv1.LeaseSpec{
					HolderIdentity: ptr.To("worker-0_uid-0"), LeaseDurationSeconds: ptr.To[int32](3600), RenewTime: &renewed,
				},
			}, metav1.CreateOptions{})
			if apierrors.IsNotFound(err) { // the namespace, created by another worker a moment from now
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
	})
}

func deleteLeases(ctx context.Context, api kubernetes.Interface, n, g int) {
	_ = load.InParallel((n+g-1)/g, func(j int) error {
		return api.CoordinationV1().Leases("load-"+strconv.Itoa(j)).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	})
}

func applyConfig(ctx context.Context, api kubernetes.Interface, data string) error {
	cms := api.CoreV1().ConfigMaps("leasegate-system")
	cm, err := cms.Get(ctx, "leasegate-config", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "leasegate-config"}, Data: map[string]string{"config.yaml": data}}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	cm.Data = map[string]string{"config.yaml": data}
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	return err
}

// apiRequests is how many requests the webhook has made to the API server (client-go's count, which
// controller-runtime serves on /metrics): list, watch, get and update, its leader election's included.
func apiRequests(webhook *process.Webhook) (float64, error) {
	m, err := webhook.Metrics()
	if err != nil {
		return 0, err
	}
	return m.Sum("rest_client_requests_total", nil), nil
}

// review is an AdmissionReview of a ConfigMap update in namespace load-0 from a pod of service account
// sa-0, which guard g0 fences with lease load-0/worker-0.
func review(podName, podUID string) []byte {
	data, _ := json.Marshal(&admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       "load",
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"},
			Name:      "state",
			Namespace: "load-0",
			Operation: admissionv1.Update,
			UserInfo: authenticationv1.UserInfo{
				Username: "system:serviceaccount:load-0:sa-0",
				Groups:   []string{"system:serviceaccounts", "system:authenticated"},
				Extra: map[string]authenticationv1.ExtraValue{
					"authentication.kubernetes.io/pod-name": {podName},
					"authentication.kubernetes.io/pod-uid":  {podUID},
				},
			},
			Object:    runtime.RawExtension{Raw: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"state","namespace":"load-0"}}`)},
			OldObject: runtime.RawExtension{Raw: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"state","namespace":"load-0"}}`)},
			DryRun:    ptr.To(true), // no Events: this measures the decision path
		},
	})
	return data
}

func tlsClient(ca []byte) (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("no CA certificate")
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost: 256,
	}}, nil
}

func post(client *http.Client, base string, body []byte) (bool, error) {
	resp, err := client.Post(base+manager.ValidateGuardedPath, "application/json", bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return false, err
	}
	var answer admissionv1.AdmissionReview
	if err := json.Unmarshal(data, &answer); err != nil || answer.Response == nil {
		return false, fmt.Errorf("bad answer %d: %s", resp.StatusCode, data)
	}
	return answer.Response.Allowed, nil
}
