package leaseelection

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/kubeclient"
)

// The API versions of the resources a Client reads and writes.
const (
	leaseAPIVersion             = "coordination.k8s.io/v1"
	multiClusterLeaseAPIVersion = contract.MultiClusterLeaseGroup + "/" + contract.MultiClusterLeaseVersion
)

// minWatchTimeout is the shortest watch a Client asks for; each asks for between one and two times it,
// so the server ends watches at staggered times (client-go's reflector does the same) and a stream that
// silently stalled is replaced even when the connection's health checks pass.
const minWatchTimeout = 5 * time.Minute

// Client reads, writes and watches Leases (or MultiClusterLeases) over the API, and evicts its own pod
// (EvictPod), nothing else.
type Client struct {
	api        *kubeclient.Client
	apiVersion string
	kind       string
	resource   string // the path under /apis/<apiVersion>/namespaces/<namespace>/
	// complete, when set, completes each decoded object with what its kind always carries.
	complete func(*Lease)
	// streamingRefused is set once the API server refused a StreamList.
	streamingRefused atomic.Bool
}

var (
	_ Store           = (*Client)(nil)
	_ streamingLister = (*Client)(nil)
)

// NewClient is a client of coordination.k8s.io/v1 Leases.
func NewClient(api *kubeclient.Client) *Client {
	return &Client{api: api, apiVersion: leaseAPIVersion, kind: contract.LeaseKindLease, resource: "leases"}
}

// NewMultiClusterClient is a client of MultiClusterLeases (leasegate.io/v1alpha1): the elector runs the
// local election on their spec exactly as on a Lease, and reads the election controller's answers
// (status) as Lease.Global to know whether it leads across clusters (MultiClusterLeaseLock).
func NewMultiClusterClient(api *kubeclient.Client) *Client {
	return &Client{api: api, apiVersion: multiClusterLeaseAPIVersion, kind: contract.LeaseKindMultiClusterLease, resource: contract.MultiClusterLeaseResource,
		complete: withAnswer}
}

// withAnswer completes a MultiClusterLease, which always carries an answer: an empty one before the
// controller's first.
func withAnswer(l *Lease) {
	if l.Global == nil {
		l.Global = &GlobalAnswer{}
	}
}

func (c *Client) path(namespace, name string) string {
	p := "/apis/" + c.apiVersion + "/namespaces/" + url.PathEscape(namespace) + "/" + c.resource
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	return p
}

// read completes a decoded object as its kind asks (complete).
func (c *Client) read(l *Lease) *Lease {
	if l != nil && c.complete != nil {
		c.complete(l)
	}
	return l
}

// Get reads one lease.
func (c *Client) Get(ctx context.Context, namespace, name string) (*Lease, error) {
	l := &Lease{}
	if err := c.api.Do(ctx, kubeclient.Request{Method: http.MethodGet, Path: c.path(namespace, name)}, l); err != nil {
		return nil, err
	}
	return c.read(l), nil
}

// Create creates a lease.
func (c *Client) Create(ctx context.Context, l *Lease) (*Lease, error) {
	created := &Lease{}
	req := kubeclient.Request{Method: http.MethodPost, Path: c.path(l.Namespace, ""), Body: l.typed(c.apiVersion, c.kind)}
	if err := c.api.Do(ctx, req, created); err != nil {
		return nil, err
	}
	return c.read(created), nil
}

// Update writes a lease if its resourceVersion is still current: the compare-and-swap every election
// step relies on. A stale resourceVersion fails with a Conflict.
func (c *Client) Update(ctx context.Context, l *Lease) (*Lease, error) {
	updated := &Lease{}
	req := kubeclient.Request{Method: http.MethodPut, Path: c.path(l.Namespace, l.Name), Body: l.typed(c.apiVersion, c.kind)}
	if err := c.api.Do(ctx, req, updated); err != nil {
		return nil, err
	}
	return c.read(updated), nil
}

// List reads the lease of this name through a list, whose resourceVersion a watch can start from. It is
// asked only of an API server that does not stream lists (StreamList), and is consistent: there, cache
// lists started the electors no sooner and, before Retry-After was honoured, twice tipped the server into
// an overload it did not leave (docs/api-server.md, docs/scale.md runs 20 and 21).
func (c *Client) List(ctx context.Context, namespace, name string) (*Lease, string, error) {
	var list struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Items []*Lease `json:"items"`
	}
	query := url.Values{"fieldSelector": {"metadata.name=" + name}}
	if err := c.api.Do(ctx, kubeclient.Request{Method: http.MethodGet, Path: c.path(namespace, ""), Query: query}, &list); err != nil {
		return nil, "", err
	}
	for _, l := range list.Items {
		if l.Name == name {
			return c.read(l), list.Metadata.ResourceVersion, nil
		}
	}
	return nil, list.Metadata.ResourceVersion, nil
}

// Watch streams the changes to the lease of this name after resourceVersion, with bookmarks, so a
// resumed watch rarely has to list again.
func (c *Client) Watch(ctx context.Context, namespace, name, resourceVersion string) (<-chan Event, error) {
	query := watchQuery(name)
	query.Set("resourceVersion", resourceVersion)
	return c.watch(ctx, namespace, query)
}

// initialEventsEndAnnotation marks the bookmark that ends a streamed list's initial events
// (metav1.InitialEventsAnnotationKey).
const initialEventsEndAnnotation = "k8s.io/initial-events-end"

// errStreamingListRefused is an API server that does not stream lists: its WatchList feature gate is off,
// as it is by default before Kubernetes 1.32 and in 1.33.
var errStreamingListRefused = errors.New("the API server does not stream lists (its WatchList feature gate is off)")

// StreamList is a list of the lease of this name and a watch from it, in one request where List and
// Watch take two: a watch with sendInitialEvents, the request client-go's reflector makes with its
// WatchListClient feature, though the reflector's first one is consistent. Thousands of agents list at
// once when they start together or an API server restart expires their watches; each of them then asks
// one request of the server instead of two.
//
// The list is the server's watch cache as it stands (resourceVersion 0), not a consistent one: a
// consistent streamed list waits until the cache has caught up with etcd, up to 3 s and then 504, and
// holds its seat in the server's queues (API Priority and Fairness) all that time. At 5,000 starting
// leases those held seats made workload-low shed thousands of the agents' first lists, each of which
// then waited up to a retry period (docs/scale.md, runs 83-87; run 88 with this list). A version older
// than etcd's costs no safety: every write is a compare-and-swap on the version it was made from, so one
// made from an older copy conflicts, and the elector reads the lease, or waits for its watch to bring
// another copy, before it tries again.
//
// An API server that refuses it (422: the WatchList feature gate is off) is not asked again by this
// Client, which returns errStreamingListRefused from then on, and the caller lists and watches.
func (c *Client) StreamList(ctx context.Context, namespace, name string) (<-chan Event, error) {
	if c.streamingRefused.Load() {
		return nil, errStreamingListRefused
	}
	query := watchQuery(name)
	query.Set("sendInitialEvents", "true")
	query.Set("resourceVersion", "0")
	query.Set("resourceVersionMatch", "NotOlderThan")
	events, err := c.watch(ctx, namespace, query)
	if kubeclient.IsInvalid(err) {
		c.streamingRefused.Store(true)
		return nil, fmt.Errorf("%w: %w", errStreamingListRefused, err)
	}
	return events, err
}

// watchQuery is a watch of the lease of this name, with bookmarks, for a random time from minWatchTimeout.
func watchQuery(name string) url.Values {
	timeout := minWatchTimeout + rand.N(minWatchTimeout)
	return url.Values{
		"watch":               {"true"},
		"fieldSelector":       {"metadata.name=" + name},
		"allowWatchBookmarks": {"true"},
		"timeoutSeconds":      {strconv.Itoa(int(timeout / time.Second))},
	}
}

func (c *Client) watch(ctx context.Context, namespace string, query url.Values) (<-chan Event, error) {
	body, err := c.api.Stream(ctx, kubeclient.Request{Method: http.MethodGet, Path: c.path(namespace, ""), Query: query})
	if err != nil {
		return nil, err
	}
	events := make(chan Event)
	go c.decodeEvents(ctx, body, events)
	return events, nil
}

// decodeEvents sends each event of a watch stream on events, until the stream or ctx ends.
func (c *Client) decodeEvents(ctx context.Context, body io.ReadCloser, events chan<- Event) {
	defer close(events)
	defer body.Close()
	decoder := json.NewDecoder(body)
	for {
		var raw struct {
			Type   EventType       `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		err := decoder.Decode(&raw)
		if err != nil {
			// A stream cut by its connection (an end of file mid-event, a reset, the HTTP/2 GOAWAY and
			// close of an API server restarting) or timed out ends the watch as the server's own end does,
			// to be resumed at once from the last version seen: client-go's stream watcher ends it the
			// same way, logging nothing. Anything else (a stream that is not JSON) is the watch's error.
			if !errors.Is(err, io.EOF) && !kubeclient.IsProbableEOF(err) && !kubeclient.IsTimeout(err) && ctx.Err() == nil {
				c.send(ctx, events, Event{Type: Error, Err: fmt.Errorf("reading the watch: %w", err)})
			}
			return
		}
		event := Event{Type: raw.Type}
		switch raw.Type {
		case Added, Modified, Deleted, Bookmark:
			l := &Lease{}
			if err := json.Unmarshal(raw.Object, l); err != nil {
				c.send(ctx, events, Event{Type: Error, Err: fmt.Errorf("decoding a watch event: %w", err)})
				return
			}
			event.Lease = c.read(l)
			event.InitialEventsEnd = raw.Type == Bookmark && l.Annotations[initialEventsEndAnnotation] == "true"
		case Error:
			var status kubeclient.Status
			_ = json.Unmarshal(raw.Object, &status)
			event.Err = c.api.WatchError(status)
		default:
			event = Event{Type: Error, Err: fmt.Errorf("a watch event of unknown type %q", raw.Type)}
		}
		if !c.send(ctx, events, event) || event.Type == Error {
			return
		}
	}
}

func (c *Client) send(ctx context.Context, events chan<- Event, event Event) bool {
	select {
	case events <- event:
		return true
	case <-ctx.Done():
		return false
	}
}

// EvictPod asks the API server to evict a pod through the Eviction API, so PodDisruptionBudgets hold: the
// agent's own pod, when it lost its lease and is set to restart (leasegate.io/on-loss: restart). It is
// the one call this client makes outside its lease resource.
func (c *Client) EvictPod(ctx context.Context, namespace, pod string) error {
	eviction := map[string]any{
		"apiVersion": "policy/v1", "kind": "Eviction",
		"metadata": map[string]string{"name": pod, "namespace": namespace},
	}
	path := "/api/v1/namespaces/" + url.PathEscape(namespace) + "/pods/" + url.PathEscape(pod) + "/eviction"
	return c.api.Do(ctx, kubeclient.Request{Method: http.MethodPost, Path: path, Body: eviction}, nil)
}
