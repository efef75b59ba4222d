package lease

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// Client reads and writes Leases, and evicts its own pod (EvictPod), nothing else.
//
// It is client-go's REST client with a scheme that knows only coordination.k8s.io/v1. The typed
// clientset (and resourcelock, which imports it) registers every built-in API type at start-up: about
// 250 more packages, which made the agent's binary 2.5 times larger and its resident memory about 8 MiB
// larger, in a process that runs beside every replica of every opted-in workload.
type Client struct {
	rest   rest.Interface
	params runtime.ParameterCodec
}

// NewClient builds a Lease client from config.
func NewClient(config *rest.Config) (*Client, error) {
	client, params, err := restClientFor(config, coordinationv1.SchemeGroupVersion, coordinationv1.AddToScheme)
	if err != nil {
		return nil, err
	}
	return &Client{rest: client, params: params}, nil
}

// restClientFor is a REST client for one API group version, with a scheme that knows only its types.
func restClientFor(config *rest.Config, gv schema.GroupVersion, addToScheme func(*runtime.Scheme) error) (rest.Interface, runtime.ParameterCodec, error) {
	scheme := runtime.NewScheme()
	if err := addToScheme(scheme); err != nil {
		return nil, nil, err
	}
	config = rest.CopyConfig(config)
	config.APIPath = "/apis"
	config.GroupVersion = &gv
	config.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if config.UserAgent == "" {
		config.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	client, err := rest.RESTClientFor(config)
	if err != nil {
		return nil, nil, err
	}
	return client, runtime.NewParameterCodec(scheme), nil
}

// Get reads one lease.
func (c *Client) Get(ctx context.Context, namespace, name string) (*coordinationv1.Lease, error) {
	lease := &coordinationv1.Lease{}
	err := c.rest.Get().Namespace(namespace).Resource("leases").Name(name).Do(ctx).Into(lease)
	return lease, err
}

// Create creates a lease.
func (c *Client) Create(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	created := &coordinationv1.Lease{}
	err := c.rest.Post().Namespace(lease.Namespace).Resource("leases").Body(lease).Do(ctx).Into(created)
	return created, err
}

// Update writes a lease if its resourceVersion is still current: the compare-and-swap every election
// step relies on. A stale resourceVersion fails with a Conflict.
func (c *Client) Update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	updated := &coordinationv1.Lease{}
	err := c.rest.Put().Namespace(lease.Namespace).Resource("leases").Name(lease.Name).Body(lease).Do(ctx).Into(updated)
	return updated, err
}

// List lists leases.
func (c *Client) List(ctx context.Context, namespace string, opts metav1.ListOptions) (*coordinationv1.LeaseList, error) {
	list := &coordinationv1.LeaseList{}
	err := c.rest.Get().Namespace(namespace).Resource("leases").VersionedParams(&opts, c.params).Do(ctx).Into(list)
	return list, err
}

// Watch watches leases.
func (c *Client) Watch(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.rest.Get().Namespace(namespace).Resource("leases").VersionedParams(&opts, c.params).Watch(ctx)
}

// EvictPod asks the API server to evict a pod through the Eviction API, so PodDisruptionBudgets hold: the
// agent's own pod, when it lost its lease and is set to restart (leasegate.io/on-loss: restart). It is
// the one call this client makes outside Leases.
func (c *Client) EvictPod(ctx context.Context, namespace, pod string) error {
	body := fmt.Sprintf(`{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":%q,"namespace":%q}}`, pod, namespace)
	return c.rest.Post().AbsPath("/api/v1/namespaces", namespace, "pods", pod, "eviction").
		SetHeader("Content-Type", "application/json").Body([]byte(body)).Do(ctx).Error()
}
