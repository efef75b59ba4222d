package leaseelection

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/kubeclient"
)

// testAPI is an API client of a server that answers every request with handler.
func testAPI(t *testing.T, handler http.HandlerFunc) *kubeclient.Client {
	t.Helper()
	server := httptest.NewServer(handler)
	t.Cleanup(server.Close)
	api, err := kubeclient.New(&kubeclient.Config{Host: server.URL})
	if err != nil {
		t.Fatal(err)
	}
	return api
}

// watchToEnd is every event of one watch of shop/orders from resourceVersion, until the stream ends.
func watchToEnd(t *testing.T, client *Client, resourceVersion string) []Event {
	t.Helper()
	events, err := client.Watch(context.Background(), "shop", "orders", resourceVersion)
	if err != nil {
		t.Fatal(err)
	}
	var got []Event
	for e := range events {
		got = append(got, e)
	}
	return got
}

func TestClientWatchesOneLeaseByName(t *testing.T) {
	client := NewClient(testAPI(t, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		timeout, _ := strconv.Atoi(q.Get("timeoutSeconds"))
		if r.URL.Path != "/apis/coordination.k8s.io/v1/namespaces/shop/leases" || q.Get("watch") != "true" ||
			q.Get("fieldSelector") != "metadata.name=orders" || q.Get("resourceVersion") != "41" ||
			q.Get("allowWatchBookmarks") != "true" || timeout < 300 || timeout >= 600 {
			http.Error(w, "unexpected "+r.URL.String(), http.StatusTeapot)
			return
		}
		_, _ = w.Write([]byte(`{"type":"MODIFIED","object":{"metadata":{"name":"orders","namespace":"shop","resourceVersion":"42"},"spec":{"holderIdentity":"a-0_ua"}}}
{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"50"}}}
{"type":"DELETED","object":{"metadata":{"name":"orders","namespace":"shop","resourceVersion":"51"},"spec":{}}}
{"type":"ERROR","object":{"kind":"Status","reason":"Expired","code":410,"message":"too old resource version: 41 (60)"}}
`))
	}))
	got := watchToEnd(t, client, "41")
	if len(got) != 4 {
		t.Fatalf("%d events, want 4 and the channel closed after the error: %+v", len(got), got)
	}
	if got[0].Type != Modified || got[0].Lease.Spec.HolderIdentity != "a-0_ua" || got[0].Lease.ResourceVersion != "42" {
		t.Errorf("first event %+v", got[0])
	}
	if got[1].Type != Bookmark || got[1].Lease.ResourceVersion != "50" || got[2].Type != Deleted {
		t.Errorf("bookmark and delete: %+v, %+v", got[1], got[2])
	}
	if got[3].Type != Error || !kubeclient.IsResourceExpired(got[3].Err) {
		t.Errorf("last event %+v: want the 410 as an Error event, so the watcher lists again", got[3])
	}
}

func TestClientWatchEndsOnWhatItCannotRead(t *testing.T) {
	client := NewClient(testAPI(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"type":"ADDED","object":{"metadata":{"name":"orders","resourceVersion":"1"}}}
{"type":"ADDED","object":{"spec":{"renewTime":"not a time"}}}
{"type":"ADDED","object":{"metadata":{"name":"never-read"}}}
`))
	}))
	got := watchToEnd(t, client, "0")
	if len(got) != 2 || got[0].Type != Added || got[1].Type != Error || got[1].Err == nil {
		t.Fatalf("events %+v: want the good one, then an Error, and nothing after", got)
	}
}

func TestClientStopsDeliveringWhenTheWatcherLeaves(t *testing.T) {
	client := NewClient(testAPI(t, func(w http.ResponseWriter, r *http.Request) {
		for i := 0; r.Context().Err() == nil; i++ {
			_, _ = w.Write([]byte(`{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"` + strconv.Itoa(i) + `"}}}` + "\n"))
			w.(http.Flusher).Flush()
			time.Sleep(time.Millisecond)
		}
	}))
	ctx, cancel := context.WithCancel(context.Background())
	events, err := client.Watch(ctx, "shop", "orders", "0")
	if err != nil {
		t.Fatal(err)
	}
	<-events
	cancel()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case _, open := <-events:
			if !open {
				return
			}
		case <-deadline:
			t.Fatal("the watch went on after its context ended")
		}
	}
}

func TestMultiClusterClientAlwaysCarriesAnAnswer(t *testing.T) {
	api := testAPI(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/apis/leasegate.io/v1alpha1/namespaces/shop/multiclusterleases/orders" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(`{"kind":"MultiClusterLease","metadata":{"name":"orders","namespace":"shop"},"spec":{"holderIdentity":"a-0_ua"}}`))
	})
	l, err := NewMultiClusterClient(api).Get(context.Background(), "shop", "orders")
	if err != nil {
		t.Fatal(err)
	}
	// Before the controller's first answer the status is empty: an answer naming nobody, not "no answer".
	if holder, _, ok := globalAnswer(l); !ok || holder != "" {
		t.Errorf("globalAnswer() = %q, %v; want an empty answer", holder, ok)
	}
}
