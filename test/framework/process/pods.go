package process

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/lease"
)

// ServiceAccountName is the service account every test pod runs as. Replicas of one workload share a
// service account, which is exactly why leasegate never trusts the service account alone.
const ServiceAccountName = "worker"

// Pod is a pod object in the API server with a pod-bound token, standing in for what kubelet gives a
// real pod: the agent that uses Kubeconfig authenticates as this pod, with the pod-name and pod-uid extras.
type Pod struct {
	Namespace, Name, UID string
	// Kubeconfig authenticates as the pod's service account with a token bound to the pod.
	Kubeconfig string
}

// CreateNamespace creates a namespace with the service account, the Lease RBAC an agent needs, and
// rights to write ConfigMaps, the workload's own writes.
func (c *ControlPlane) CreateNamespace(ctx context.Context, name string) error {
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := c.Client.CoreV1().ServiceAccounts(name).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: ServiceAccountName}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := c.Client.RbacV1().Roles(name).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "lease-election"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"coordination.k8s.io"},
			Resources: []string{"leases"},
			Verbs:     []string{"get", "list", "watch", "create", "update"},
		}, {
			// What the workload does: the fence specs guard these writes.
			APIGroups: []string{""},
			Resources: []string{"configmaps"},
			Verbs:     []string{"get", "create", "update", "delete"},
		}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := c.Client.RbacV1().RoleBindings(name).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "lease-election"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "lease-election"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: name, Name: ServiceAccountName}},
	}, metav1.CreateOptions{})
	return err
}

// GrantConfigMapWrites lets a service account create and update ConfigMaps in its namespace: what the
// test workloads do, and what the fence then decides on per replica.
func GrantConfigMapWrites(ctx context.Context, client kubernetes.Interface, namespace, serviceAccount string) error {
	name := serviceAccount + "-writes-configmaps"
	if _, err := client.RbacV1().Roles(namespace).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "update"}}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := client.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: serviceAccount}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	user, groups := ServiceAccountUser(namespace, serviceAccount)
	return WaitUntilAllowed(ctx, client, user, groups, authorizationv1.ResourceAttributes{Namespace: namespace, Verb: "update", Resource: "configmaps"})
}

// ServiceAccountUser is the user name and groups the API server authenticates a service account's token
// as.
func ServiceAccountUser(namespace, serviceAccount string) (user string, groups []string) {
	return "system:serviceaccount:" + namespace + ":" + serviceAccount,
		[]string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
}

// WaitUntilAllowed waits, up to 10 s, until the API server's authorizer lets user, in groups, do what
// attributes name, asking as admin with a SubjectAccessReview. A RoleBinding just created reaches the
// RBAC authorizer through its informer, so a request its subject sends at once can still be refused
// (seen on v1.30: 403 2 ms after the binding).
func WaitUntilAllowed(ctx context.Context, admin kubernetes.Interface, user string, groups []string, attributes authorizationv1.ResourceAttributes) error {
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &attributes}}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		answer, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		last := fmt.Sprint(err)
		if err == nil {
			if answer.Status.Allowed {
				return nil
			}
			last = fmt.Sprintf("denied: %q", answer.Status.Reason)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s may still not %s %+v after 10 s (last answer: %s)", user, attributes.Verb, attributes, last)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// CreatePod creates a pod object (no kubelet runs it) and a token bound to it, written as a kubeconfig
// under dir. server overrides the API server address in the kubeconfig ("" keeps the real one), so a test
// can route an agent through a proxy it controls.
func (c *ControlPlane) CreatePod(ctx context.Context, namespace, name, dir, server string) (*Pod, error) {
	pod, err := c.Client.CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			ServiceAccountName: ServiceAccountName,
			Containers:         []corev1.Container{{Name: "app", Image: "example.invalid/app"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	return c.PodIdentity(ctx, pod, dir, server)
}

// PodIdentity gives an existing pod object the credentials kubelet would give it: a token for its
// service account, bound to the pod, written as a kubeconfig under dir.
func (c *ControlPlane) PodIdentity(ctx context.Context, pod *corev1.Pod, dir, server string) (*Pod, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	path := filepath.Join(dir, pod.Namespace+"-"+pod.Name+".kubeconfig")
	bound := &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	if err := c.tokenKubeconfig(ctx, pod.Namespace, sa, bound, path, server); err != nil {
		return nil, fmt.Errorf("requesting a token bound to pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return &Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID), Kubeconfig: path}, nil
}

// UnboundToken writes a kubeconfig under dir for a service account token bound to no pod, as a legacy
// token or one made with `kubectl create token` is: it carries no pod identity.
func (c *ControlPlane) UnboundToken(ctx context.Context, namespace, serviceAccount, dir string) (string, error) {
	path := filepath.Join(dir, namespace+"-"+serviceAccount+"-unbound.kubeconfig")
	return path, c.tokenKubeconfig(ctx, namespace, serviceAccount, nil, path, "")
}

func (c *ControlPlane) tokenKubeconfig(ctx context.Context, namespace, sa string, bound *authenticationv1.BoundObjectReference, path, server string) error {
	token, err := c.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600), BoundObjectRef: bound},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	if server == "" {
		server = c.Config.Host
	}
	return writeKubeconfig(path, server, c.Config, &clientcmdapi.AuthInfo{Token: token.Status.Token})
}

// AdminKubeconfig writes a kubeconfig with the control plane's admin (system:masters) credentials.
func (c *ControlPlane) AdminKubeconfig(path string) error {
	return writeKubeconfig(path, c.Config.Host, c.Config, &clientcmdapi.AuthInfo{
		ClientCertificateData: c.Config.CertData, ClientKeyData: c.Config.KeyData,
	})
}

// Identity is the holder identity the pod's agent writes.
func (p *Pod) Identity() string { return lease.Identity(p.Name, p.UID) }

// RESTConfig authenticates as the pod, for tests that act with its credentials directly.
func (p *Pod) RESTConfig() (*rest.Config, error) {
	return clientcmd.BuildConfigFromFlags("", p.Kubeconfig)
}

func writeKubeconfig(path, server string, admin *rest.Config, user *clientcmdapi.AuthInfo) error {
	config := clientcmdapi.NewConfig()
	config.Clusters["test"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: admin.CAData}
	config.AuthInfos["pod"] = user
	config.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "pod"}
	config.CurrentContext = "test"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return clientcmd.WriteToFile(*config, path)
}
