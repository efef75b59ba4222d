package observe

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// LeaseVersion is one version of a Lease as a LeaseWatch saw it: its holder identity ("" when released),
// its spec, and when it arrived.
type LeaseVersion struct {
	Holder string
	Spec   coordinationv1.LeaseSpec
	At     time.Time
}

// LeaseChange is what Next found: the version that matched, and whether the lease was released (holder
// "") on the way to it.
type LeaseChange struct {
	LeaseVersion
	Released bool
}

// LeaseWatch records every version of one Lease from the moment it starts: the version it read first,
// then each one its watch delivers. Tests read the record (Versions, Holders, Holder) or wait on it
// (Next, NextHolder, NextRenewal).
type LeaseWatch struct {
	name  string
	watch watch.Interface

	mu       sync.Mutex
	versions []LeaseVersion
	arrived  chan struct{} // closed at the next version, or when the watch ends
	ended    bool
	next     int // the first version Next has not looked at
}

// WatchLease reads the Lease and follows it from that version on. Stop ends the watch.
func WatchLease(ctx context.Context, client kubernetes.Interface, namespace, name string) (*LeaseWatch, error) {
	l, err := client.CoordinationV1().Leases(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	w, err := client.CoordinationV1().Leases(namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: l.ResourceVersion,
	})
	if err != nil {
		return nil, err
	}
	lw := &LeaseWatch{name: namespace + "/" + name, watch: w, arrived: make(chan struct{}), next: 1}
	lw.versions = []LeaseVersion{versionOf(l)}
	go lw.record()
	return lw, nil
}

func versionOf(l *coordinationv1.Lease) LeaseVersion {
	return LeaseVersion{Holder: ptr.Deref(l.Spec.HolderIdentity, ""), Spec: *l.Spec.DeepCopy(), At: time.Now()}
}

func (w *LeaseWatch) record() {
	for event := range w.watch.ResultChan() {
		if l, ok := event.Object.(*coordinationv1.Lease); ok {
			w.mu.Lock()
			w.versions = append(w.versions, versionOf(l))
			close(w.arrived)
			w.arrived = make(chan struct{})
			w.mu.Unlock()
		}
	}
	w.mu.Lock()
	w.ended = true
	close(w.arrived)
	w.mu.Unlock()
}

// Stop ends the watch; the record stays readable.
func (w *LeaseWatch) Stop() { w.watch.Stop() }

// Versions is every version seen so far, the one read first included.
func (w *LeaseWatch) Versions() []LeaseVersion {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]LeaseVersion(nil), w.versions...)
}

// Holders is the succession of holders seen so far ("" for released), each change once.
func (w *LeaseWatch) Holders() []string {
	var holders []string
	for _, v := range w.Versions() {
		if len(holders) == 0 || holders[len(holders)-1] != v.Holder {
			holders = append(holders, v.Holder)
		}
	}
	return holders
}

// Holder is the holder of the latest version seen.
func (w *LeaseWatch) Holder() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.versions[len(w.versions)-1].Holder
}

// Next waits up to timeout for the first version the watch delivers, after those Next already returned
// or passed over, whose spec satisfies done.
func (w *LeaseWatch) Next(timeout time.Duration, done func(coordinationv1.LeaseSpec) bool) (LeaseChange, error) {
	deadline := time.After(timeout)
	var change LeaseChange
	for {
		w.mu.Lock()
		for ; w.next < len(w.versions); w.next++ {
			v := w.versions[w.next]
			change.Released = change.Released || v.Holder == ""
			if done(v.Spec) {
				w.next++
				w.mu.Unlock()
				change.LeaseVersion = v
				return change, nil
			}
		}
		arrived, ended := w.arrived, w.ended
		w.mu.Unlock()
		if ended {
			return change, fmt.Errorf("the watch of lease %s ended", w.name)
		}
		select {
		case <-arrived:
		case <-deadline:
			return change, fmt.Errorf("lease %s did not change as awaited in %s", w.name, timeout)
		}
	}
}

// NextHolder waits until someone other than old holds the lease.
func (w *LeaseWatch) NextHolder(old string, timeout time.Duration) (LeaseChange, error) {
	return w.Next(timeout, func(spec coordinationv1.LeaseSpec) bool {
		h := ptr.Deref(spec.HolderIdentity, "")
		return h != "" && h != old
	})
}

// NextRenewal waits until a live agent acquires or renews the lease after since.
func (w *LeaseWatch) NextRenewal(since time.Time, timeout time.Duration) (LeaseChange, error) {
	return w.Next(timeout, func(spec coordinationv1.LeaseSpec) bool {
		return ptr.Deref(spec.HolderIdentity, "") != "" && spec.RenewTime != nil && spec.RenewTime.After(since)
	})
}
