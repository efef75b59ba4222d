package framework

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A kube-apiserver killed and started again, and an etcd killed and started again, come back on the same
// data and the same credentials: what was written before is there, and the admin client goes on working.
func TestControlPlaneRestarts(t *testing.T) {
	if _, err := controlPlaneAssets(); err != nil {
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
	for _, tc := range []struct {
		name    string
		restart func(context.Context) error
	}{
		{"kube-apiserver killed and restarted", func(ctx context.Context) error { _, err := cp.RestartAPIServer(ctx); return err }},
		{"etcd killed and restarted", func(ctx context.Context) error { _, err := cp.RestartEtcd(ctx); return err }},
		{"kube-apiserver restarted a second time", func(ctx context.Context) error { _, err := cp.RestartAPIServer(ctx); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := cp.RSSBytes()
			pidBefore := children()
			if err := tc.restart(ctx); err != nil {
				t.Fatal(err)
			}
			if now := children(); now[apiServerCommand] == 0 || now[etcdCommand] == 0 || now == nil {
				t.Fatalf("after the restart, children %v, want kube-apiserver and etcd", now)
			} else if now[apiServerCommand] == pidBefore[apiServerCommand] && now[etcdCommand] == pidBefore[etcdCommand] {
				t.Fatalf("neither process was replaced: %v", now)
			}
			if _, err := cp.Client.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{}); err != nil {
				t.Fatalf("what was written before the restart: %v", err)
			}
			if after, _ := cp.RSSBytes(); before == 0 || after == 0 {
				t.Fatalf("kube-apiserver RSS %d before, %d after: want both found", before, after)
			}
		})
	}
}
