package inject

import (
	"context"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/lease/leaseapi"
	"github.com/leasegate/leasegate/pkg/multicluster/v1alpha1"
)

// lockCache stands in for the fence's lease cache.
type lockCache struct {
	leases       map[string]*coordinationv1.Lease
	multiCluster map[string]*v1alpha1.MultiClusterLease
}

func (c lockCache) Get(namespace, name string) (*leaseapi.Kept, bool) {
	l, ok := c.leases[namespace+"/"+name]
	if !ok {
		return nil, false
	}
	return leaseapi.Keep(l), true
}

func (c lockCache) MultiClusterLease(namespace, name string) (*v1alpha1.MultiClusterLease, bool) {
	m, ok := c.multiCluster[namespace+"/"+name]
	return m, ok
}

func cachedLease(name, holder string, managed bool) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)},
	}
	if managed {
		l.Labels = map[string]string{contract.Managed: "true"}
	}
	return l
}

var locks = lockCache{
	leases: map[string]*coordinationv1.Lease{
		"shop/orders":                  cachedLease("orders", "orders-0_u0", true),
		"shop/cert-manager-controller": cachedLease("cert-manager-controller", "cm-0_8f1e2c", false),
		"shop/released-by-another":     cachedLease("released-by-another", "", false),
	},
	multiCluster: map[string]*v1alpha1.MultiClusterLease{
		"shop/global": {ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "global"}, Spec: v1alpha1.MultiClusterLeaseSpec{HolderIdentity: ptr.To("lib-0_x")}},
	},
}

func TestCheckLocks(t *testing.T) {
	adopting, err := config.Load([]byte("adoptLeases: [shop/cert-manager-controller]"))
	if err != nil {
		t.Fatal(err)
	}
	defaults := config.DefaultConfig()
	tests := []struct {
		name  string
		given Given
		cfg   *config.Config
		want  string // "" for admitted
	}{
		{"a lease nobody made yet is provisioned", Given{Lease: "new"}, defaults, ""},
		{"a lease leasegate manages is shared", Given{Lease: "orders"}, defaults, ""},
		{"another controller's lease is refused, naming it and its holder", Given{Lease: "cert-manager-controller"}, defaults,
			`leasegate cannot inject this pod: metadata.annotations[leasegate.io/lease]: Invalid value: "cert-manager-controller": ` +
				`Lease shop/cert-manager-controller is not leasegate's (held by cm-0_8f1e2c): another controller elects on it, and this pod's agent would get the right to take it; ` +
				`name a lease of its own, or add "shop/cert-manager-controller" to adoptLeases in leasegate-config to let leasegate take it over`},
		{"also while that controller has released it", Given{Lease: "released-by-another"}, defaults, `Lease shop/released-by-another is not leasegate's (held by nobody)`},
		{"an election among several that names one is refused at the elections annotation", Given{Leases: []string{"orders", "cert-manager-controller"}}, defaults,
			`metadata.annotations[leasegate.io/elections]: Invalid value: "cert-manager-controller"`},
		{"adoptLeases lets leasegate take it over", Given{Lease: "cert-manager-controller"}, adopting, ""},
		{"a MultiClusterLease another client elects on is refused too", Given{Lease: "global", LeaseKind: contract.LeaseKindMultiClusterLease}, defaults,
			`MultiClusterLease shop/global is not leasegate's (held by lib-0_x)`},
		{"a Lease of the name does not count for a MultiClusterLease", Given{Lease: "cert-manager-controller", LeaseKind: contract.LeaseKindMultiClusterLease}, defaults, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "p"}}
			err := checkLocks(pod, tt.given, tt.cfg, locks)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("checkLocks() = %v, want it admitted", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("checkLocks() = %v, want an error containing\n%s", err, tt.want)
			}
		})
	}
}

func TestHandlerRefusesAnotherControllersLease(t *testing.T) {
	h := newTestHandler(t)
	pod := readPod(t, "testdata/deployment-pod.yaml")
	metav1.SetMetaDataAnnotation(&pod.ObjectMeta, contract.Lease, "cert-manager-controller")
	resp := h.Handle(context.Background(), admissionRequest(t, pod))
	if resp.Allowed || resp.Result.Code != 403 || !strings.Contains(resp.Result.Message, "Lease shop/cert-manager-controller is not leasegate's (held by cm-0_8f1e2c)") {
		t.Errorf("Handle() = allowed %t, %d %q; want a 403 naming the lease and its holder", resp.Allowed, resp.Result.Code, resp.Result.Message)
	}
}
