package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
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

// routeLog records every version of a lease and of the EndpointSlices of a Service that should route to
// its holder (a "<service>-leader" companion, or a readiness: leader Service). One API server and one
// etcd number both kinds of object from one revision counter, so the two histories interleave exactly
// from the lease's first delivered version on (each watch starts with the object as it is then).
// The Service is expected to have one slice, as a few replicas make.
type routeLog struct {
	mu             sync.Mutex
	leases, slices []routeVersion
}

func watchRoutes(ctx context.Context, client kubernetes.Interface, namespace, leaseName, service string) *routeLog {
	log := &routeLog{}
	follow := func(w watch.Interface, record func(watch.Event)) {
		DeferCleanup(w.Stop)
		go func() {
			for event := range w.ResultChan() {
				record(event)
			}
		}()
	}
	leases, err := client.CoordinationV1().Leases(namespace).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", leaseName).String()})
	Expect(err).NotTo(HaveOccurred())
	follow(leases, func(e watch.Event) {
		l, ok := e.Object.(*coordinationv1.Lease)
		if !ok {
			return
		}
		pod, _, _ := lease.ParseIdentity(ptr.Deref(l.Spec.HolderIdentity, ""))
		log.add(&log.leases, l.ResourceVersion, pod, 0)
	})
	slices, err := client.DiscoveryV1().EndpointSlices(namespace).Watch(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	Expect(err).NotTo(HaveOccurred())
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
	return log
}

func (r *routeLog) add(to *[]routeVersion, rv, pod string, ready int) {
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	*to = append(*to, routeVersion{rv: n, pod: pod, seen: time.Now(), ready: ready})
}

// routeReport is what a routeLog shows: every slice version written to route to a pod that was not the
// lease's holder at that revision (a leader Service has none), and per change of holder the lag until the slice named
// the new one and the time the slice still named the old one after it lost the lease.
type routeReport struct {
	violations  []string
	lags, stale []time.Duration
}

func (r *routeLog) report() routeReport {
	r.mu.Lock()
	leases, slicesSeen := slices.Clone(r.leases), slices.Clone(r.slices)
	r.mu.Unlock()
	var rep routeReport
	holderAt := func(rv int64) (routeVersion, bool) {
		i, _ := slices.BinarySearchFunc(leases, rv, func(v routeVersion, rv int64) int { return int(v.rv - rv) })
		if i == 0 {
			return routeVersion{}, false
		}
		return leases[i-1], true
	}
	for _, s := range slicesSeen {
		if s.ready > 1 {
			rep.violations = append(rep.violations, fmt.Sprintf("slice version %d has %d ready endpoints", s.rv, s.ready))
		}
		if s.pod == "" || len(leases) == 0 || s.rv < leases[0].rv {
			continue // no endpoint, or written before the first version the lease watch delivered
		}
		if l, ok := holderAt(s.rv); !ok || l.pod != s.pod {
			rep.violations = append(rep.violations, fmt.Sprintf("slice version %d routes to %s while lease version %d names %q", s.rv, s.pod, l.rv, l.pod))
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
				rep.stale = append(rep.stale, s.seen.Sub(next.seen))
			}
		}
		if next.pod != "" {
			if s, ok := firstSlice(next.rv, func(s routeVersion) bool { return s.pod == next.pod }); ok {
				rep.lags = append(rep.lags, s.seen.Sub(next.seen))
			}
		}
	}
	return rep
}

// medianMax formats durations as "median m, max x".
func medianMax(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	return fmt.Sprintf("median %s, max %s (%d)", sorted[len(sorted)/2].Round(100*time.Microsecond), sorted[len(sorted)-1].Round(100*time.Microsecond), len(sorted))
}
