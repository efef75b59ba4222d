package cluster

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// CertManager is what InstallCertManager runs: cert-manager's controller and cainjector binaries (built by
// `make tools`) and the directory of its CRDs.
type CertManager struct {
	Controller, CAInjector, CRDs string
	// Version tags the images, e.g. "v1.11.5".
	Version string
}

// CertManagerNamespace is where cert-manager runs, as its own chart installs it.
const CertManagerNamespace = "cert-manager"

// InstallCertManager installs cert-manager's CRDs and runs its controller and cainjector as pods from
// locally built images, and waits until both are ready. Its webhook is left out: it only validates
// cert-manager's own resources, which the CRDs' schemas already check, and leasegate's chart does not
// depend on it. cert-manager's own RBAC is not what this suite tests, so its service account is bound to
// cluster-admin.
func (n *Node) InstallCertManager(ctx context.Context, cm CertManager) error {
	if _, err := envtest.InstallCRDs(n.Config, envtest.CRDInstallOptions{Paths: []string{cm.CRDs}, ErrorIfPathMissing: true}); err != nil {
		return fmt.Errorf("cert-manager CRDs: %w", err)
	}
	controller := Image{Ref: "quay.io/jetstack/cert-manager-controller:" + cm.Version, Binary: cm.Controller}
	cainjector := Image{Ref: "quay.io/jetstack/cert-manager-cainjector:" + cm.Version, Binary: cm.CAInjector}
	if err := n.Import(controller, cainjector); err != nil {
		return err
	}
	const sa = "cert-manager"
	if _, err := n.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: CertManagerNamespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := n.Client.CoreV1().ServiceAccounts(CertManagerNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := n.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "cert-manager"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: CertManagerNamespace}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	election := "--leader-election-namespace=" + CertManagerNamespace
	for _, component := range []struct {
		name  string
		image Image
		args  []string
	}{
		{"cert-manager", controller, []string{election, "--cluster-resource-namespace=" + CertManagerNamespace}},
		{"cert-manager-cainjector", cainjector, []string{election}},
	} {
		labels := map[string]string{"app.kubernetes.io/name": component.name}
		if _, err := n.Client.AppsV1().Deployments(CertManagerNamespace).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: component.name},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						ServiceAccountName: sa,
						Containers: []corev1.Container{{
							Name: component.name, Image: component.image.Ref, ImagePullPolicy: corev1.PullNever, Args: component.args,
							SecurityContext: &corev1.SecurityContext{
								RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
								Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
							},
						}},
					},
				},
			},
		}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return Poll(ctx, 90*time.Second, func() error {
		for _, name := range []string{"cert-manager", "cert-manager-cainjector"} {
			d, err := n.Client.AppsV1().Deployments(CertManagerNamespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if d.Status.ReadyReplicas < 1 {
				return fmt.Errorf("%s not ready", name)
			}
		}
		return nil
	})
}
