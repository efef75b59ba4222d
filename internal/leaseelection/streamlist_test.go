package leaseelection

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/leasegate/leasegate/internal/kubeclient"
	"github.com/leasegate/leasegate/internal/lease"
)

// streamingStore is a memStore that streams lists as an API server with the WatchList feature does: the
// lease's version, the bookmark that ends it, then the watch. refuse plays one without the feature;
// cutFirst cuts the first streamed list before its end, as a connection that drops; ignore answers as a
// server or proxy that dropped sendInitialEvents would: the lease's version, then the watch, never the end.
type streamingStore struct {
	*memStore
	refuse, cutFirst, ignore bool
	streams                  atomic.Int32
}

func (s *streamingStore) StreamList(ctx context.Context, namespace, name string) (<-chan Event, error) {
	n := s.streams.Add(1)
	if s.refuse {
		return nil, errStreamingListRefused
	}
	s.mu.Lock()
	object, rv := s.object, s.rv
	s.mu.Unlock()
	changes, err := s.Watch(ctx, namespace, name, strconv.Itoa(rv))
	if err != nil {
		return nil, err
	}
	events := make(chan Event, 64)
	if object != nil {
		events <- Event{Type: Added, Lease: decodeLease(panicker{}, object)}
	}
	if s.cutFirst && n == 1 {
		close(events)
		return events, nil
	}
	if !s.ignore {
		events <- Event{Type: Bookmark, Lease: &Lease{ResourceVersion: strconv.Itoa(rv)}, InitialEventsEnd: true}
	}
	go func() {
		defer close(events)
		for e := range changes {
			events <- e
		}
	}()
	return events, nil
}

func (s *streamingStore) listCounts() (lists, gets int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lists, s.gets
}

func TestElectorListsInItsWatchWhereTheServerStreamsLists(t *testing.T) {
	tests := []struct {
		name   string
		lease  *Lease
		leader bool
	}{
		{name: "a held lease: it follows on the streamed version", lease: heldLease("b-0_ub", start)},
		{name: "no lease: it creates it on the streamed list's word", leader: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := &streamingStore{memStore: storeWith(t, tt.lease)}
			e, _ := runElector(t, store, clocktesting.NewFakeClock(start), "a-0_ua")
			eventually(t, "it has the lease's version", func() bool {
				s := e.Status()
				return e.Synced() && s.IsLeader == tt.leader && s.Holder != ""
			})
			lists, gets := store.listCounts()
			if lists != 0 || gets != 0 || store.streams.Load() != 1 {
				t.Errorf("%d lists, %d reads and %d streamed lists: want the one streamed list alone", lists, gets, store.streams.Load())
			}
		})
	}
}

func TestElectorListsAndWatchesWhereTheServerRefusesStreamedLists(t *testing.T) {
	store := &streamingStore{memStore: storeWith(t, heldLease("b-0_ub", start)), refuse: true}
	clock := clocktesting.NewFakeClock(start)
	e, _ := runElector(t, store, clock, "a-0_ua")
	eventually(t, "it has listed the lease", func() bool { return e.Synced() && e.Status().Holder == "b-0_ub" })
	// An API server restart with a compaction expires the watch: the elector lists again, without asking
	// the server that refused for a streamed list again.
	restartUntilListed(t, store.memStore, clock, e)
	if lists, _ := store.listCounts(); lists != 2 || store.streams.Load() != 1 {
		t.Errorf("%d lists and %d streamed lists asked: want 2 lists and the one refused streamed list", lists, store.streams.Load())
	}
}

func TestElectorStreamsTheListAgainWhenItIsCutBeforeItsEnd(t *testing.T) {
	store := &streamingStore{memStore: storeWith(t, heldLease("b-0_ub", start)), cutFirst: true}
	clock := clocktesting.NewFakeClock(start)
	e, _ := runElector(t, store, clock, "a-0_ua")
	eventually(t, "its first streamed list was cut", func() bool { return store.streams.Load() == 1 })
	settle()
	if e.Synced() {
		t.Fatal("synced on a streamed list cut before its end")
	}
	clock.Step(2 * watchBackoffMin)
	eventually(t, "it has the lease's version from a second streamed list", func() bool { return e.Synced() && e.Status().Holder == "b-0_ub" })
	if lists, _ := store.listCounts(); lists != 0 || store.streams.Load() != 2 {
		t.Errorf("%d lists and %d streamed lists: want the list streamed again, not listed", lists, store.streams.Load())
	}
}

func TestElectorListsWhereTheServerAnswersAStreamedListWithAPlainWatch(t *testing.T) {
	store := &streamingStore{memStore: storeWith(t, heldLease("b-0_ub", start)), ignore: true}
	e, _ := runElector(t, store, clocktesting.NewFakeClock(start), "a-0_ua")
	eventually(t, "its streamed list is open", func() bool { return store.streams.Load() == 1 })
	settle()
	if e.Synced() {
		t.Fatal("synced on a streamed list that never ended")
	}
	// b renews: a change before the end of the list says the server is serving a plain watch.
	store.write(t, func(l *Lease) { l.Spec.RenewTime = lease.MicroTime{Time: start.Add(testTiming.RetryPeriod)} })
	eventually(t, "it has listed the lease instead", func() bool { return e.Synced() && e.Status().Holder == "b-0_ub" })
	if lists, _ := store.listCounts(); lists != 1 || store.streams.Load() != 1 {
		t.Errorf("%d lists and %d streamed lists: want one of each, and no streamed list after the plain watch", lists, store.streams.Load())
	}
	eventually(t, "the plain watch is closed, and only the watch from the list is open", func() bool {
		store.mu.Lock()
		defer store.mu.Unlock()
		return len(store.watchers) == 1
	})
}

func TestClientStreamsAListAsOneWatch(t *testing.T) {
	client := NewClient(testAPI(t, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if r.URL.Path != "/apis/coordination.k8s.io/v1/namespaces/shop/leases" || q.Get("watch") != "true" ||
			q.Get("fieldSelector") != "metadata.name=orders" || q.Get("sendInitialEvents") != "true" ||
			q.Get("resourceVersionMatch") != "NotOlderThan" || q.Get("resourceVersion") != "0" || q.Get("allowWatchBookmarks") != "true" {
			http.Error(w, "unexpected "+r.URL.String(), http.StatusTeapot)
			return
		}
		_, _ = w.Write([]byte(`{"type":"ADDED","object":{"metadata":{"name":"orders","namespace":"shop","resourceVersion":"42"},"spec":{"holderIdentity":"a-0_ua"}}}
{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"42","annotations":{"k8s.io/initial-events-end":"true"}}}}
{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"50"}}}
`))
	}))
	events, err := client.StreamList(context.Background(), "shop", "orders")
	if err != nil {
		t.Fatal(err)
	}
	var got []Event
	for e := range events {
		got = append(got, e)
	}
	if len(got) != 3 || got[0].Type != Added || got[0].Lease.Spec.HolderIdentity != "a-0_ua" || got[0].InitialEventsEnd {
		t.Fatalf("events %+v: want the lease, then two bookmarks", got)
	}
	if !got[1].InitialEventsEnd || got[1].Lease.ResourceVersion != "42" || got[2].InitialEventsEnd {
		t.Errorf("bookmarks %+v, %+v: want only the annotated one to end the initial events", got[1], got[2])
	}
}

func TestClientAsksNoMoreStreamedListsOnceRefused(t *testing.T) {
	var asked atomic.Int32
	client := NewClient(testAPI(t, func(w http.ResponseWriter, _ *http.Request) {
		asked.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		_ = json.NewEncoder(w).Encode(kubeclient.Status{Code: http.StatusUnprocessableEntity, Reason: "Invalid",
			Message: `ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled`})
	}))
	for i := range 2 {
		if _, err := client.StreamList(context.Background(), "shop", "orders"); !errors.Is(err, errStreamingListRefused) {
			t.Fatalf("streamed list %d: error %v, want errStreamingListRefused", i+1, err)
		}
	}
	if asked.Load() != 1 {
		t.Errorf("the server was asked %d times: want once, and no more after it refused", asked.Load())
	}
}
