package observe

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/lease"
)

// routeVersion is one version of the lease (pod: the holder's pod) or of an EndpointSlice of the
// Service that should follow it (pod: its ready endpoint's pod), "" for none, with its resourceVersion
// and when the watch delivered it.
type routeVersion struct {
	rv    int64
	pod   string
	seen  time.Time
	ready int // slices only: how many ready endpoints
}

// RouteLog records every version of a lease and of the EndpointSlices of a Service that should route to
// its holder (a "<service>-leader" companion, or a readiness: leader Service). One API server and one
// etcd number both kinds of object from one revision counter, so the two histories interleave exactly
// from the lease's first delivered version on (each watch starts with the object as it is then).
// The Service is expected to have one slice, as a few replicas make.
type RouteLog struct {
	mu             sync.Mutex
	leases, slices []routeVersion
	watches        []watch.Interface
}

// WatchRoutes starts recording; Stop ends it.
func WatchRoutes(ctx context.Context, client kubernetes.Interface, namespace, leaseName, service string) (*RouteLog, error) {
	log := &RouteLog{}
	follow := func(w watch.Interface, record func(watch.Event)) {
		log.watches = append(log.watches, w)
		go func() {
			for event := range w.ResultChan() {
				record(event)
			}
		}()
	}
	leases, err := client.CoordinationV1().Leases(namespace).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", leaseName).String()})
	if err != nil {
		return nil, err
	}
	follow(leases, func(e watch.Event) {
		l, ok := e.Object.(*coordinationv1.Lease)
		if !ok {
			return
		}
		pod, _, _ := lease.ParseIdentity(ptr.Deref(l.Spec.HolderIdentity, ""))
		log.add(&log.leases, l.ResourceVersion, pod, 0)
	})
	slices, err := client.DiscoveryV1().EndpointSlices(namespace).Watch(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	if err != nil {
		log.Stop()
		return nil, err
	}
	follow(slices, func(e watch.Event) {
		s, ok := e.Object.(*discoveryv1.EndpointSlice)
		if !ok {
			return
		}
		pod, ready := "", 0
		for _, ep := range s.Endpoints {
			if e.Type != watch.Deleted && ptr.Deref(ep.Conditions.Ready, false) && ep.TargetRef != nil {
				pod, ready = ep.TargetRef.Name, ready+1
			}
		}
		log.add(&log.slices, s.ResourceVersion, pod, ready)
	})
	return log, nil
}

// Stop ends the watches; the record stays readable.
func (r *RouteLog) Stop() {
	for _, w := range r.watches {
		w.Stop()
	}
}

func (r *RouteLog) add(to *[]routeVersion, rv, pod string, ready int) {
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	*to = append(*to, routeVersion{rv: n, pod: pod, seen: time.Now(), ready: ready})
}

// RouteReport is what a RouteLog shows: every slice version written to route to a pod that was not the
// lease's holder at that revision (a leader Service has none), and per change of holder the lag until the slice named
// the new one and the time the slice still named the old one after it lost the lease.
type RouteReport struct {
	Violations  []string
	Lags, Stale []time.Duration
}

// Report reads the record so far.
func (r *RouteLog) Report() RouteReport {
	r.mu.Lock()
	leases, slicesSeen := slices.Clone(r.leases), slices.Clone(r.slices)
	r.mu.Unlock()
	var rep RouteReport
	holderAt := func(rv int64) (routeVersion, bool) {
		i, _ := slices.BinarySearchFunc(leases, rv, func(v routeVersion, rv int64) int { return int(v.rv - rv) })
		if i == 0 {
			return routeVersion{}, false
		}
		return leases[i-1], true
	}
	for _, s := range slicesSeen {
		if s.ready > 1 {
			rep.Violations = append(rep.Violations, fmt.Sprintf("slice version %d has %d ready endpoints", s.rv, s.ready))
		}
		if s.pod == "" || len(leases) == 0 || s.rv < leases[0].rv {
			continue // no endpoint, or written before the first version the lease watch delivered
		}
		if l, ok := holderAt(s.rv); !ok || l.pod != s.pod {
			rep.Violations = append(rep.Violations, fmt.Sprintf("slice version %d routes to %s while lease version %d names %q", s.rv, s.pod, l.rv, l.pod))
		}
	}
	firstSlice := func(after int64, match func(routeVersion) bool) (routeVersion, bool) {
		for _, s := range slicesSeen {
			if s.rv > after && match(s) {
				return s, true
			}
		}
		return routeVersion{}, false
	}
	sliceAt := func(rv int64) routeVersion {
		current := routeVersion{}
		for _, s := range slicesSeen {
			if s.rv < rv {
				current = s
			}
		}
		return current
	}
	for i := 1; i < len(leases); i++ {
		prev, next := leases[i-1], leases[i]
		if prev.pod == next.pod {
			continue
		}
		if prev.pod != "" && sliceAt(next.rv).pod == prev.pod {
			if s, ok := firstSlice(next.rv, func(s routeVersion) bool { return s.pod != prev.pod }); ok {
				rep.Stale = append(rep.Stale, s.seen.Sub(next.seen))
			}
		}
		if next.pod != "" {
			if s, ok := firstSlice(next.rv, func(s routeVersion) bool { return s.pod == next.pod }); ok {
				rep.Lags = append(rep.Lags, s.seen.Sub(next.seen))
			}
		}
	}
	return rep
}
