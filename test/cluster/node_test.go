package cluster

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/test/framework"
)

var realCluster = flag.Bool("cluster", false, "start a real single-node cluster (root, `make cluster-binaries`, containerd); `make e2e-cluster`")

// TestNodeRunsAPod starts the whole node, runs a pod from a locally built image and tears everything down.
func TestNodeRunsAPod(t *testing.T) {
	if !*realCluster {
		t.Skip("needs -cluster: root, containerd and the cluster binaries (make e2e-cluster)")
	}
	versions, err := framework.PinnedVersions()
	if err != nil {
		t.Fatal(err)
	}
	binaries := filepath.Join(framework.RepoRoot(), "bin", "controlplane", versions["KUBERNETES_VERSION"]+"-"+versions["ETCD_VERSION"])
	ctx := context.Background()
	start := time.Now()
	node, err := StartNode(ctx, binaries)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Stop()
	t.Logf("node Ready %s after start", time.Since(start).Round(time.Millisecond))

	sleeper := filepath.Join(node.Dir, "sleeper")
	if err := os.Link(filepath.Join(node.Dir, "pause"), sleeper); err != nil {
		t.Fatal(err)
	}
	if err := node.Import(Image{Ref: "leasegate.local/sleeper:test", Binary: sleeper}); err != nil {
		t.Fatal(err)
	}
	pod, err := node.Client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sleeper"},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []corev1.Container{{Name: "sleeper", Image: "leasegate.local/sleeper:test", ImagePullPolicy: corev1.PullNever}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	if err := poll(ctx, 60*time.Second, func() error {
		p, err := node.Client.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return &podNotRunning{p.Status}
		}
		return nil
	}); err != nil {
		t.Fatalf("pod not Running: %v\n%s", err, node.Logs())
	}
	t.Logf("pod Running %s after creation", time.Since(created).Round(time.Millisecond))
}

type podNotRunning struct{ status corev1.PodStatus }

func (e *podNotRunning) Error() string {
	msg := string(e.status.Phase)
	for _, c := range e.status.ContainerStatuses {
		if c.State.Waiting != nil {
			msg += ": " + c.State.Waiting.Reason + " " + c.State.Waiting.Message
		}
	}
	for _, c := range e.status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			msg += "; " + c.Message
		}
	}
	return msg
}

// TestLeasegateOnTheNode installs leasegate with Helm, as the README says, into the real node, with a
// certificate of its own (the chart's bring-your-own path), and checks a labelled namespace's Deployment
// gets native-sidecar agents that elect exactly one leader named <pod>_<uid>.
func TestLeasegateOnTheNode(t *testing.T) {
	if !*realCluster {
		t.Skip("needs -cluster: root, containerd and the cluster binaries (make e2e-cluster)")
	}
	tools, err := framework.FindTools()
	if err != nil {
		t.Fatal(err)
	}
	versions, err := framework.PinnedVersions()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	node, err := StartNode(ctx, filepath.Join(framework.RepoRoot(), "bin", "controlplane", versions["KUBERNETES_VERSION"]+"-"+versions["ETCD_VERSION"]))
	if err != nil {
		t.Fatal(err)
	}
	defer node.Stop()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\n%s", append(args, node.Logs())...)
	}

	dir := t.TempDir()
	agent, err := framework.BuildAgent(dir)
	if err != nil {
		t.Fatal(err)
	}
	webhook, err := framework.BuildWebhook(dir)
	if err != nil {
		t.Fatal(err)
	}
	workload := filepath.Join(dir, "workload")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", workload, "./test/workload")
	build.Dir, build.Env = framework.RepoRoot(), append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if err := node.Import(
		Image{Ref: "ghcr.io/leasegate/leasegate-agent:v0.1.0", Binary: agent},
		Image{Ref: "ghcr.io/leasegate/leasegate-webhook:v0.1.0", Binary: webhook},
		Image{Ref: "leasegate.local/workload:test", Binary: workload},
	); err != nil {
		t.Fatal(err)
	}

	const ns = "leasegate-system"
	cert, err := ServingCertificate("leasegate-webhook", nil, []string{"leasegate-webhook." + ns + ".svc"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := node.Client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "leasegate-webhook-tls"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": cert.Cert, "tls.key": cert.Key},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	values := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(values, []byte(`image:
  webhook: {pullPolicy: Never}
  agent: {pullPolicy: Never}
certificates:
  certManager: {enabled: false}
  existingSecret: leasegate-webhook-tls
  caBundle: |
`+indent(string(cert.CA), "    ")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := tools.InstallChart(filepath.Join(node.Dir, "admin.kubeconfig"), ns, values); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	if err := poll(ctx, 90*time.Second, func() error {
		d, err := node.Client.AppsV1().Deployments(ns).Get(ctx, "leasegate-webhook", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.ReadyReplicas < 2 {
			return fmt.Errorf("%d of 2 webhook replicas ready", d.Status.ReadyReplicas)
		}
		return nil
	}); err != nil {
		fail("leasegate-webhook: %v", err)
	}

	const app = "shop"
	if _, err := node.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: app, Labels: map[string]string{"leasegate.io/inject": "enabled"},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deployWorkload(t, node, app, "orders", 3, nil)
	var pods []corev1.Pod
	if err := poll(ctx, 90*time.Second, func() error {
		list, err := node.Client.CoreV1().Pods(app).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		pods = list.Items
		running := 0
		for _, p := range pods {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if running < 3 {
			msg := fmt.Sprintf("%d of 3 pods running", running)
			for _, p := range pods {
				msg += "; " + p.Name + ": " + (&podNotRunning{p.Status}).Error()
			}
			return errors.New(msg)
		}
		return nil
	}); err != nil {
		fail("orders: %v", err)
	}
	identities := map[string]bool{}
	for _, p := range pods {
		if len(p.Spec.InitContainers) == 0 || p.Spec.InitContainers[0].Name != "leasegate-agent" ||
			p.Spec.InitContainers[0].RestartPolicy == nil || *p.Spec.InitContainers[0].RestartPolicy != corev1.ContainerRestartPolicyAlways {
			t.Errorf("pod %s has no native-sidecar agent: %+v", p.Name, p.Spec.InitContainers)
		}
		identities[p.Name+"_"+string(p.UID)] = true
	}
	var holder string
	if err := poll(ctx, 30*time.Second, func() error {
		l, err := node.Client.CoordinationV1().Leases(app).Get(ctx, "orders", metav1.GetOptions{})
		if err != nil {
			return err
		}
		holder = ptr.Deref(l.Spec.HolderIdentity, "")
		if !identities[holder] {
			return fmt.Errorf("lease holder %q is none of the pods", holder)
		}
		return nil
	}); err != nil {
		fail("election: %v", err)
	}
	t.Logf("lease shop/orders held by %s", holder)

	// The fence: every replica writes; only the leader's writes land.
	if err := framework.GrantConfigMapWrites(ctx, node.Client, app, "default"); err != nil {
		t.Fatal(err)
	}
	cm, err := node.Client.CoreV1().ConfigMaps(ns).Get(ctx, "leasegate-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["config.yaml"] += "guards:\n- name: orders\n  lease: orders\n  resources: [{group: \"\", resources: [configmaps]}]\n"
	cm.Data["config.yaml"] = strings.Replace(cm.Data["config.yaml"], "guards: []\n", "", 1)
	cm, err = node.Client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("the guard edit, admitted by leasegate's own config webhook through its Service: %v", err)
	}
	bad := cm.DeepCopy()
	bad.Data["config.yaml"] += "missingPodIdentity: sometimes\n"
	if _, err := node.Client.CoreV1().ConfigMaps(ns).Update(ctx, bad, metav1.UpdateOptions{}); err == nil ||
		!strings.Contains(err.Error(), `admission webhook "config.leasegate.io" denied the request: leasegate-config is invalid and was not saved: missingPodIdentity: Unsupported value: "sometimes"`) {
		t.Errorf("a bad edit of leasegate-config must be refused with its field path, got %v", err)
	}
	leader := strings.SplitN(holder, "_", 2)[0]
	if err := poll(ctx, 30*time.Second, func() error {
		for _, p := range pods {
			logs, err := node.Client.CoreV1().Pods(app).GetLogs(p.Name, &corev1.PodLogOptions{Container: "orders", TailLines: ptr.To[int64](1)}).DoRaw(ctx)
			if err != nil {
				return err
			}
			last := strings.TrimSpace(string(logs))
			if p.Name == leader && !strings.HasSuffix(last, "allowed") {
				return fmt.Errorf("leader %s: %s", p.Name, last)
			}
			if p.Name != leader && !strings.Contains(last, "denied: admission webhook \"guarded.leasegate.io\" denied the request: leasegate: pod "+app+"/"+p.Name) {
				return fmt.Errorf("follower %s: %s", p.Name, last)
			}
		}
		return nil
	}); err != nil {
		fail("the fence in the cluster: %v", err)
	}
	events, err := node.Client.EventsV1().Events(app).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	denied := 0
	for _, e := range events.Items {
		if e.Reason == "LeaderGateDenied" {
			denied++
		}
	}
	if denied == 0 {
		t.Errorf("no LeaderGateDenied Event in %s", app)
	}
	t.Logf("followers fenced, %d LeaderGateDenied Events", denied)

	// kubectl delete pod of the leader: kubelet stops the app, then the agent, which releases the lease.
	deleted := time.Now()
	if err := node.Client.CoreV1().Pods(app).Delete(ctx, leader, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var next string
	if err := poll(ctx, 30*time.Second, func() error {
		l, err := node.Client.CoordinationV1().Leases(app).Get(ctx, "orders", metav1.GetOptions{})
		if err != nil {
			return err
		}
		next = ptr.Deref(l.Spec.HolderIdentity, "")
		if next == "" || next == holder {
			return fmt.Errorf("holder still %q", next)
		}
		return nil
	}); err != nil {
		fail("handover after kubectl delete pod: %v", err)
	}
	handover := time.Since(deleted)
	t.Logf("kubectl delete pod %s: %s leads %s later", leader, next, handover.Round(time.Millisecond))
	if budget := 15 * time.Second; handover >= budget {
		t.Errorf("handover took %s: the agent did not release the lease (the lease would have expired at about %s)", handover, budget)
	}

	// readiness: leader: only the leader is Ready, so the Service's endpoints are the leader alone.
	deployWorkload(t, node, app, "gateway", 2, map[string]string{"leasegate.io/readiness": "leader"})
	if _, err := node.Client.CoreV1().Services(app).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "gateway"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app.kubernetes.io/name": "gateway"}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(9440)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, 60*time.Second, func() error {
		leaderPod, err := holderPod(ctx, node, app, "gateway")
		if err != nil {
			return err
		}
		slices, err := node.Client.DiscoveryV1().EndpointSlices(app).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=gateway"})
		if err != nil {
			return err
		}
		var ready []string
		total := 0
		for _, slice := range slices.Items {
			for _, e := range slice.Endpoints {
				total++
				if ptr.Deref(e.Conditions.Ready, false) && e.TargetRef != nil {
					ready = append(ready, e.TargetRef.Name)
				}
			}
		}
		if total != 2 || len(ready) != 1 || ready[0] != leaderPod {
			return fmt.Errorf("%d endpoints, ready %v, leader %q", total, ready, leaderPod)
		}
		return nil
	}); err != nil {
		fail("readiness: leader: %v", err)
	}
	t.Log("readiness: leader: the Service's only ready endpoint is the leader")

	// start: leader: a follower's app container does not start until its pod leads.
	deployWorkload(t, node, app, "scheduler", 2, map[string]string{"leasegate.io/start": "leader"})
	if err := poll(ctx, 60*time.Second, func() error {
		leaderPod, err := holderPod(ctx, node, app, "scheduler")
		if err != nil {
			return err
		}
		list, err := node.Client.CoreV1().Pods(app).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=scheduler"})
		if err != nil {
			return err
		}
		var started, waiting []string
		for _, p := range list.Items {
			for _, c := range p.Status.ContainerStatuses {
				if c.Name == "scheduler" && c.State.Running != nil {
					started = append(started, p.Name)
				} else if c.Name == "scheduler" {
					waiting = append(waiting, p.Name)
				}
			}
		}
		if len(started) != 1 || started[0] != leaderPod || len(waiting) != 1 {
			return fmt.Errorf("app started in %v, waiting in %v, leader %q", started, waiting, leaderPod)
		}
		return nil
	}); err != nil {
		fail("start: leader: %v", err)
	}
	t.Log("start: leader: only the leader's app container started")
}

// holderPod is the name of the pod whose agent holds the lease.
func holderPod(ctx context.Context, node *Node, namespace, lease string) (string, error) {
	l, err := node.Client.CoordinationV1().Leases(namespace).Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	name, _, _ := strings.Cut(ptr.Deref(l.Spec.HolderIdentity, ""), "_")
	return name, nil
}

// deployWorkload creates a Deployment of the test workload named name, writing ConfigMap <name>-output,
// with the pod annotations given.
func deployWorkload(t *testing.T, node *Node, namespace, name string, replicas int32, annotations map[string]string) {
	t.Helper()
	labels := map[string]string{"app.kubernetes.io/name": name}
	if _, err := node.Client.AppsV1().Deployments(namespace).Create(context.Background(), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: name, Image: "leasegate.local/workload:test", ImagePullPolicy: corev1.PullNever,
					Args: []string{"--configmap", name + "-output"},
				}}},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = prefix + lines[i]
	}
	return strings.Join(lines, "\n") + "\n"
}
