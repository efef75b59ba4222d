package realcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/test/framework/cluster"
	"github.com/leasegate/leasegate/test/framework/observe"
)

// holder is the identity the workload's lease names, "" if none.
func holder(ctx context.Context, node *cluster.Node, workload string) string {
	l, err := node.Client.CoordinationV1().Leases(app).Get(ctx, workload, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

// holderPod is the name of the pod whose agent holds the workload's lease.
func holderPod(ctx context.Context, node *cluster.Node, workload string) string {
	name, _, _ := lease.ParseIdentity(holder(ctx, node, workload))
	return name
}

// watchLease follows the workload's lease until the spec ends.
func watchLease(ctx context.Context, node *cluster.Node, workload string) *observe.LeaseWatch {
	w, err := observe.WatchLease(ctx, node.Client, app, workload)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(w.Stop)
	return w
}

// leaseChangeTimeout bounds each wait for a lease to change hands: a takeover takes the lease duration and
// the clock skew margin (4 s) at most.
const leaseChangeTimeout = 60 * time.Second

// nextHolder waits until someone other than old holds the workload's lease.
func nextHolder(w *observe.LeaseWatch, old string) observe.LeaseChange {
	change, err := w.NextHolder(old, leaseChangeTimeout)
	Expect(err).NotTo(HaveOccurred())
	return change
}

// agentStatus asks a pod's agent who leads, on the pod's IP, as the app beside it would.
func agentStatus(pod *corev1.Pod) (lease.Status, error) {
	var status lease.Status
	client := http.Client{Timeout: 500 * time.Millisecond}
	resp, err := client.Get(fmt.Sprintf("http://%s:%d/leader", pod.Status.PodIP, agentPort))
	if err != nil {
		return status, err
	}
	defer resp.Body.Close()
	return status, json.NewDecoder(resp.Body).Decode(&status)
}

// claimsOf asks each pod's agent, on its IP, whether it leads: no API server needed.
func claimsOf(pods []corev1.Pod) []observe.Claim {
	var claims []observe.Claim
	for i := range pods {
		if pods[i].Status.PodIP == "" {
			continue
		}
		asked := time.Now()
		if status, err := agentStatus(&pods[i]); err == nil && status.IsLeader && status.Since != nil {
			claims = append(claims, observe.Claim{Pod: pods[i].Name, Since: *status.Since, Asked: asked})
		}
	}
	return claims
}

// sampleClaimsOf asks the pods' agents in rounds until stopped, keeping each proof of two leaders.
func sampleClaimsOf(pods []corev1.Pod) *observe.ClaimsSampler {
	return observe.SampleClaims(func() []observe.Claim { return claimsOf(pods) })
}

// watchRoutes records the workload's lease and the Service's EndpointSlices until the spec ends.
func watchRoutes(ctx context.Context, node *cluster.Node, workload, service string) *observe.RouteLog {
	routes, err := observe.WatchRoutes(ctx, node.Client, app, workload, service)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(routes.Stop)
	return routes
}
