package realcluster

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/test/framework/cluster"
)

func createLabelledNamespace(ctx context.Context, node *cluster.Node, name string) error {
	_, err := node.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: name, Labels: map[string]string{"leasegate.io/inject": "enabled"},
	}}, metav1.CreateOptions{})
	return err
}

// ensureOrders deploys the orders workload unless it is there, and returns its three pods once one of
// them leads: the replicas most specs elect, fence and fail over.
func ensureOrders(ctx context.Context, node *cluster.Node) []corev1.Pod {
	_, err := node.Client.AppsV1().Deployments(app).Get(ctx, "orders", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		deployWorkload(ctx, node, "orders", 3, nil)
	} else {
		Expect(err).NotTo(HaveOccurred())
	}
	pods := awaitRunning(ctx, node, "orders", 3)
	Eventually(func() string { return holder(ctx, node, "orders") }).WithTimeout(30*time.Second).ShouldNot(BeEmpty(), "orders has a leader")
	return pods
}

// deployWorkload creates a Deployment of the test workload named name, running as service account name
// and writing ConfigMap <name>-output, with fast election timing and the pod annotations given.
func deployWorkload(ctx context.Context, node *cluster.Node, name string, replicas int32, annotations map[string]string, args ...string) {
	_, err := node.Client.CoreV1().ServiceAccounts(app).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	labels := map[string]string{"app.kubernetes.io/name": name}
	podAnnotations := maps.Clone(fastElection)
	maps.Copy(podAnnotations, annotations)
	_, err = node.Client.AppsV1().Deployments(app).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: podAnnotations},
				Spec: corev1.PodSpec{
					ServiceAccountName: name,
					Containers: []corev1.Container{{
						Name: name, Image: "leasegate.local/workload:test", ImagePullPolicy: corev1.PullNever,
						Args: append([]string{"--configmap", name + "-output"}, args...),
						// What --serve listens on; a gated workload's Service targets it by name.
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					}},
				},
			},
		},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
}

// removeWorkload deletes what deployWorkload made (and a Service of the same name), so later specs run
// with the load they were written for.
func removeWorkload(ctx context.Context, node *cluster.Node, name string) {
	background := metav1.DeletePropagationBackground
	err := node.Client.AppsV1().Deployments(app).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &background})
	Expect(err == nil || apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)
	err = node.Client.CoreV1().Services(app).Delete(ctx, name, metav1.DeleteOptions{})
	Expect(err == nil || apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)
}

// listPodsIn lists the pods matching selector, failing through g: inside Eventually, pass its Gomega, so
// that an error the API server gives for a moment is retried rather than failing the spec; elsewhere,
// Default.
func listPodsIn(g Gomega, ctx context.Context, node *cluster.Node, namespace, selector string) []corev1.Pod {
	pods, err := podList(ctx, node, namespace, selector)
	g.Expect(err).NotTo(HaveOccurred(), "listing the pods %s in %s", selector, namespace)
	return pods
}

// listPods lists the workload's pods, failing through g as listPodsIn does.
func listPods(g Gomega, ctx context.Context, node *cluster.Node, workload string) []corev1.Pod {
	return listPodsIn(g, ctx, node, app, workloadSelector(workload))
}

// podsOf lists the workload's pods, none on an error, for a goroutine that samples them, where an assertion
// cannot fail the spec: a failed list is asked again at its next sample.
func podsOf(ctx context.Context, node *cluster.Node, workload string) []corev1.Pod {
	pods, _ := podList(ctx, node, app, workloadSelector(workload))
	return pods
}

func podList(ctx context.Context, node *cluster.Node, namespace, selector string) ([]corev1.Pod, error) {
	list, err := node.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

func workloadSelector(workload string) string { return "app.kubernetes.io/name=" + workload }

func getPod(ctx context.Context, node *cluster.Node, name string) *corev1.Pod {
	p, err := node.Client.CoreV1().Pods(app).Get(ctx, name, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	return p
}

// awaitRunning waits until the workload has exactly n pods, all running and none terminating, and
// returns them.
func awaitRunning(ctx context.Context, node *cluster.Node, workload string, n int) []corev1.Pod {
	var pods []corev1.Pod
	Eventually(func(g Gomega) {
		pods = listPods(g, ctx, node, workload)
		g.Expect(pods).To(HaveLen(n))
		for _, p := range pods {
			g.Expect(p.DeletionTimestamp).To(BeNil(), "%s is terminating", p.Name)
			g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "%s: %s", p.Name, describeWaiting(p.Status))
			g.Expect(p.Status.PodIP).NotTo(BeEmpty())
		}
	}).WithTimeout(90 * time.Second).Should(Succeed())
	return pods
}

// awaitReadyFollower waits for a pod of the workload other than the leader that is Ready, and names it:
// a pod that has just started runs before its readiness probe passes, and a handover goes only to a
// Ready candidate.
func awaitReadyFollower(ctx context.Context, node *cluster.Node, workload, leader string) string {
	var follower string
	Eventually(func(g Gomega) {
		for _, p := range listPods(g, ctx, node, workload) {
			ready := slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
				return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
			})
			if p.Name != leader && p.DeletionTimestamp == nil && ready {
				follower = p.Name
				return
			}
		}
		g.Expect(follower).NotTo(BeEmpty(), "no Ready follower of %s besides its leader %s", workload, leader)
	}).WithTimeout(90 * time.Second).Should(Succeed())
	return follower
}

func describeWaiting(status corev1.PodStatus) string {
	var reasons []string
	for _, c := range append(status.InitContainerStatuses, status.ContainerStatuses...) {
		if c.State.Waiting != nil {
			reasons = append(reasons, c.Name+": "+c.State.Waiting.Reason+" "+c.State.Waiting.Message)
		}
	}
	return strings.Join(reasons, "; ")
}

func containerID(pod *corev1.Pod, name string) string {
	id, err := cluster.ContainerID(pod, name)
	Expect(err).NotTo(HaveOccurred())
	return id
}

// podLog is the container's log, a line per element.
func podLog(g Gomega, ctx context.Context, node *cluster.Node, pod, container string) []string {
	return podLogSince(g, ctx, node, pod, container, time.Time{})
}

func lastOf(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return lines[len(lines)-1]
}

// podLogSince is the container's log from since on (all of it for a zero time).
func podLogSince(g Gomega, ctx context.Context, node *cluster.Node, pod, container string, since time.Time) []string {
	opts := &corev1.PodLogOptions{Container: container}
	if !since.IsZero() {
		opts.SinceTime = &metav1.Time{Time: since}
	}
	raw, err := node.Client.CoreV1().Pods(app).GetLogs(pod, opts).DoRaw(ctx)
	g.Expect(err).NotTo(HaveOccurred(), "reading the log of %s's container %s", pod, container)
	text := strings.TrimSpace(string(raw))
	if text == "" {
		return nil
	}
	return strings.Split(text, "\n")
}

// readyEndpoints are the pods the workload's Service sends traffic to.
func readyEndpoints(g Gomega, ctx context.Context, node *cluster.Node, service string) []string {
	list, err := node.Client.DiscoveryV1().EndpointSlices(app).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + service})
	g.Expect(err).NotTo(HaveOccurred(), "listing the endpoints of Service %s", service)
	var ready []string
	for _, slice := range list.Items {
		for _, e := range slice.Endpoints {
			if ptr.Deref(e.Conditions.Ready, false) && e.TargetRef != nil {
				ready = append(ready, e.TargetRef.Name)
			}
		}
	}
	slices.Sort(ready)
	return ready
}
