// Command fenceload measures the fence where the API server meets it: it runs leasegate-webhook against a
// real API server with a guard whose lease exists in 1,000 namespaces (so 1,000 leases are cached), then
// drives /validate-guarded over HTTPS on loopback with AdmissionReviews at a fixed rate, half from the
// holder (admitted) and half from a follower (denied, with an Event), and reports latency percentiles,
// throughput and the webhook's resident memory. `make bench` runs it.
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
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/test/framework"
)

func main() {
	rate := flag.Int("rate", 1000, "requests per second")
	duration := flag.Duration("duration", 10*time.Second, "how long to drive the webhook")
	leases := flag.Int("leases", 1000, "guarded leases to cache, one per namespace")
	flag.Parse()
	framework.QuietControllerRuntime()
	if err := run(context.Background(), *rate, *duration, *leases); err != nil {
		fmt.Fprintln(os.Stderr, "fenceload:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, rate int, duration time.Duration, leaseCount int) error {
	cp, err := framework.StartControlPlane()
	if err != nil {
		return err
	}
	defer cp.Stop()
	dir, err := os.MkdirTemp("", "leasegate-fenceload-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	binary, err := framework.BuildWebhook(dir)
	if err != nil {
		return err
	}
	webhook, err := cp.StartWebhook(ctx, binary, dir, "leasegate-system")
	if err != nil {
		return err
	}
	defer webhook.Stop()

	fmt.Fprintf(os.Stderr, "creating %d namespaces with a held lease each\n", leaseCount)
	renewed := metav1.NewMicroTime(time.Now())
	for i := range leaseCount {
		ns := "load-" + strconv.Itoa(i)
		if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		if _, err := cp.Client.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "worker"},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To("worker-0_uid-0"), LeaseDurationSeconds: ptr.To[int32](3600), RenewTime: &renewed,
			},
		}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if _, err := cp.Client.CoreV1().ConfigMaps("leasegate-system").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "leasegate-config"},
		Data: map[string]string{"config.yaml": `apiVersion: config.leasegate.io/v1alpha1
kind: LeasegateConfiguration
guards:
- name: worker
  lease: worker
  resources: [{group: "", resources: [configmaps]}]
`},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	time.Sleep(3 * time.Second) // the guard's informer lists the 1,000 leases

	client, err := tlsClient(webhook.CA)
	if err != nil {
		return err
	}
	holder, follower := review("worker-0", "uid-0"), review("worker-1", "uid-1")
	// Warm up, and check both answers are what they should be.
	for body, want := range map[string]bool{string(holder): true, string(follower): false} {
		allowed, err := post(client, webhook.URL, []byte(body))
		if err != nil {
			return err
		}
		if allowed != want {
			return fmt.Errorf("warm-up: allowed = %t, want %t", allowed, want)
		}
	}

	fmt.Fprintf(os.Stderr, "driving %s/validate-guarded at %d requests/s for %s\n", webhook.URL, rate, duration)
	var mu sync.Mutex
	var latencies []time.Duration
	var failures int
	var wg sync.WaitGroup
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for i := 0; time.Since(start) < duration; i++ {
		next := start.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(next))
		body := holder
		if i%2 == 1 {
			body = follower
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.Now()
			_, err := post(client, webhook.URL, body)
			d := time.Since(t)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failures++
				return
			}
			latencies = append(latencies, d)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	rss, err := webhook.RSSBytes()
	if err != nil {
		return err
	}
	slices.Sort(latencies)
	pct := func(p float64) time.Duration {
		return latencies[int(float64(len(latencies)-1)*p)].Round(time.Microsecond)
	}
	fmt.Printf("\nFence over HTTPS on loopback: %d leases cached, %d requests at %d/s offered, half admitted, half denied.\n\n", leaseCount, len(latencies)+failures, rate)
	fmt.Println("| measure | value | target |")
	fmt.Println("|---|---|---|")
	fmt.Printf("| throughput | %.0f requests/s | 1,000 |\n", float64(len(latencies))/elapsed.Seconds())
	fmt.Printf("| latency p50 | %s | |\n", pct(0.50))
	fmt.Printf("| latency p99 | %s | 5 ms |\n", pct(0.99))
	fmt.Printf("| latency max | %s | |\n", pct(1))
	fmt.Printf("| failed requests | %d | 0 |\n", failures)
	fmt.Printf("| webhook RSS | %.1f MiB | |\n", float64(rss)/(1<<20))
	return nil
}

// review is an AdmissionReview of a ConfigMap update in namespace load-7 from a pod of service account
// worker.
func review(podName, podUID string) []byte {
	data, _ := json.Marshal(&admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       "load",
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"},
			Name:      "state",
			Namespace: "load-7",
			Operation: admissionv1.Update,
			UserInfo: authenticationv1.UserInfo{
				Username: "system:serviceaccount:load-7:worker",
				Groups:   []string{"system:serviceaccounts", "system:authenticated"},
				Extra: map[string]authenticationv1.ExtraValue{
					"authentication.kubernetes.io/pod-name": {podName},
					"authentication.kubernetes.io/pod-uid":  {podUID},
				},
			},
			Object:    runtime.RawExtension{Raw: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"state","namespace":"load-7"}}`)},
			OldObject: runtime.RawExtension{Raw: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"state","namespace":"load-7"}}`)},
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
	resp, err := client.Post(base+"/validate-guarded", "application/json", bytes.NewReader(body))
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
