package lease

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// Store is what an Elector elects through: one lease-shaped object, read, written with a compare-and-swap
// on resourceVersion, and watched. Client (a coordination.k8s.io/v1 Lease) and MultiClusterStore (the spec
// of a MultiClusterLease) implement it.
type Store interface {
	Get(ctx context.Context, namespace, name string) (*coordinationv1.Lease, error)
	Create(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error)
	Update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error)
	List(ctx context.Context, namespace string, opts metav1.ListOptions) (*coordinationv1.LeaseList, error)
	Watch(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error)
}

var _ Store = (*Client)(nil)
