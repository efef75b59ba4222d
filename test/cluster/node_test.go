package cluster

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
			Containers: []corev1.Container{{Name: "sleeper", Image: "leasegate.local/sleeper:test", ImagePullPolicy: corev1.PullNever}},
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
