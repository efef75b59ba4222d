package agent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/internal/leaseelection"
)

// liveElection is an election whose status the test changes.
type liveElection struct {
	mu     sync.Mutex
	status lease.Status
}

func (l *liveElection) Status() lease.Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.status
}
func (l *liveElection) Synced() bool { return true }

func (l *liveElection) set(s lease.Status) {
	l.mu.Lock()
	l.status = s
	l.mu.Unlock()
}

func TestEventName(t *testing.T) {
	following := lease.Status{Lease: "shop/orders", Holder: "b_2", FencingToken: 4}
	leading := lease.Status{Lease: "shop/orders", Holder: "a_1", IsLeader: true, FencingToken: 5}
	with := func(s lease.Status, change func(*lease.Status)) lease.Status { change(&s); return s }
	tests := []struct {
		name       string
		prev, next lease.Status
		want       string
	}{
		{"this pod takes the lease", following, leading, eventStarted},
		{"this pod loses it", leading, with(leading, func(s *lease.Status) { s.IsLeader = false }), eventStopped},
		{"another pod takes it", following, with(following, func(s *lease.Status) { s.Holder, s.FencingToken = "c_3", 5 }), eventLeader},
		{"its holder releases it", following, with(following, func(s *lease.Status) { s.Holder = "" }), eventLeader},
		{"the same candidate starts a new global term", following, with(following, func(s *lease.Status) { s.FencingToken = 9 }), eventLeader},
		{"another cluster leads", following, with(following, func(s *lease.Status) { s.GlobalHolder = "x_9" }), eventLeader},
		{"a handover is asked", leading, with(leading, func(s *lease.Status) { s.Handover = &lease.Handover{From: "a_1", To: "b"} }), eventHandover},
		{"a handover is withdrawn", with(following, func(s *lease.Status) { s.Handover = &lease.Handover{From: "b_2"} }), following, eventHandover},
		{"starting to lead wins over the handover it clears", with(following, func(s *lease.Status) { s.Handover = &lease.Handover{From: "b_2"} }), leading, eventStarted},
		{"a renewal changes nothing an app acts on", leading, with(leading, func(s *lease.Status) { s.Transitions = 5 }), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := eventName(tt.prev, tt.next); got != tt.want {
				t.Errorf("eventName() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestAcceptsEvents(t *testing.T) {
	for accept, want := range map[string]bool{
		"text/event-stream":                         true,
		"Text/Event-Stream; charset=utf-8":          true,
		"application/json, text/event-stream;q=0.9": true,
		"application/json":                          false,
		"*/*":                                       false,
		"":                                          false,
	} {
		r := httptest.NewRequest(http.MethodGet, "/leader", nil)
		if accept != "" {
			r.Header.Set("Accept", accept)
		}
		if got := acceptsEvents(r); got != want {
			t.Errorf("acceptsEvents(Accept: %q) = %v, want %v", accept, got, want)
		}
	}
}

// stream is a client of an event stream that reads one event (or comment) at a time.
type stream struct {
	resp *http.Response
	r    *bufio.Reader
}

func openStream(t *testing.T, url string) *stream {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return &stream{resp: resp, r: bufio.NewReader(resp.Body)}
}

// next reads up to the blank line that ends an event; io.EOF when the stream ended.
func (s *stream) next() (string, error) {
	var b strings.Builder
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return b.String(), err
		}
		if line == "\n" {
			return b.String(), nil
		}
		b.WriteString(line)
	}
}

func (s *stream) expect(t *testing.T, want string) {
	t.Helper()
	got, err := s.next()
	if err != nil || got != want {
		t.Fatalf("next event = %q (%v), want %q", got, err, want)
	}
}

// streamServer serves the agent's endpoints for elections over an event hub, tuned by tune (nil: as the
// agent runs it); the hub and the server close when the test ends.
func streamServer(tb testing.TB, elections []namedElection, tune func(*eventHub)) (*eventHub, *httptest.Server) {
	tb.Helper()
	hub := newEventHub(elections)
	if tune != nil {
		tune(hub)
	}
	server := httptest.NewServer(newMux(elections, hub, leaseelection.NewWakeHub(), newRegistry()))
	tb.Cleanup(server.Close)
	tb.Cleanup(hub.close)
	return hub, server
}

func TestEventStream(t *testing.T) {
	orders := &liveElection{status: lease.Status{Lease: "shop/orders", Holder: "b_2", FencingToken: 4}}
	elections := []namedElection{{name: "orders", election: orders}}
	hub, server := streamServer(t, elections, nil)

	all := openStream(t, server.URL+"/leader")
	if ct := all.resp.Header.Get("Content-Type"); all.resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("GET /leader with Accept: text/event-stream = %d %s", all.resp.StatusCode, ct)
	}
	named := openStream(t, server.URL+"/leader/orders")
	all.expect(t, "retry: 1000\nevent: state\ndata: {\"lease\":\"shop/orders\",\"holder\":\"b_2\",\"isLeader\":false,\"transitions\":0,\"fencingToken\":4}\n")
	named.expect(t, "retry: 1000\nevent: state\ndata: {\"election\":\"orders\",\"lease\":\"shop/orders\",\"holder\":\"b_2\",\"isLeader\":false,\"transitions\":0,\"fencingToken\":4}\n")

	took := lease.Status{Lease: "shop/orders", Holder: "a_1", IsLeader: true, Transitions: 5, FencingToken: 5}
	orders.set(took)
	hub.publish(0, took)
	hub.publish(0, took) // a renewal: no event
	asked := took
	asked.Handover = &lease.Handover{From: "a_1", To: "c"}
	hub.publish(0, asked)
	all.expect(t, "event: started\ndata: {\"lease\":\"shop/orders\",\"holder\":\"a_1\",\"isLeader\":true,\"transitions\":5,\"fencingToken\":5}\n")
	all.expect(t, "event: handover\ndata: {\"lease\":\"shop/orders\",\"holder\":\"a_1\",\"isLeader\":true,\"transitions\":5,\"fencingToken\":5,\"handover\":{\"from\":\"a_1\",\"to\":\"c\"}}\n")
	named.expect(t, "event: started\ndata: {\"election\":\"orders\",\"lease\":\"shop/orders\",\"holder\":\"a_1\",\"isLeader\":true,\"transitions\":5,\"fencingToken\":5}\n")

	hub.close()
	if _, err := all.next(); err != io.EOF {
		t.Errorf("after close, the stream = %v, want its end (EOF): the agent stopping ends it cleanly", err)
	}
	named.expect(t, "event: handover\ndata: {\"election\":\"orders\",\"lease\":\"shop/orders\",\"holder\":\"a_1\",\"isLeader\":true,\"transitions\":5,\"fencingToken\":5,\"handover\":{\"from\":\"a_1\",\"to\":\"c\"}}\n")
	if _, err := named.next(); err != io.EOF {
		t.Errorf("after close, the stream = %v, want its end (EOF), once the events published before were sent", err)
	}
	late := openStream(t, server.URL+"/leader")
	if body, _ := io.ReadAll(late.resp.Body); late.resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "stopping") {
		t.Errorf("a stream asked for while the agent stops = %d %q, want 503 saying it stops", late.resp.StatusCode, body)
	}
}

func TestEventStreamOfSeveralElectionsAndKeepAlive(t *testing.T) {
	reconciler := &liveElection{status: lease.Status{Lease: "shop/orders-reconciler"}}
	poller := &liveElection{status: lease.Status{Lease: "shop/orders-poller"}}
	elections := []namedElection{{name: "reconciler", election: reconciler}, {name: "poller", election: poller}}
	hub, server := streamServer(t, elections, func(hub *eventHub) { hub.keepAlive = 20 * time.Millisecond })

	all := openStream(t, server.URL+"/leader")
	onlyPoller := openStream(t, server.URL+"/leader/poller")
	all.expect(t, "retry: 1000\nevent: state\ndata: {\"elections\":[{\"election\":\"reconciler\",\"lease\":\"shop/orders-reconciler\",\"holder\":\"\",\"isLeader\":false,\"transitions\":0,\"fencingToken\":0},{\"election\":\"poller\",\"lease\":\"shop/orders-poller\",\"holder\":\"\",\"isLeader\":false,\"transitions\":0,\"fencingToken\":0}]}\n")
	onlyPoller.expect(t, "retry: 1000\nevent: state\ndata: {\"election\":\"poller\",\"lease\":\"shop/orders-poller\",\"holder\":\"\",\"isLeader\":false,\"transitions\":0,\"fencingToken\":0}\n")

	hub.publish(0, lease.Status{Lease: "shop/orders-reconciler", Holder: "b_2", FencingToken: 1})
	hub.publish(1, lease.Status{Lease: "shop/orders-poller", Holder: "a_1", IsLeader: true, FencingToken: 7})
	all.expect(t, "event: leader\ndata: {\"election\":\"reconciler\",\"lease\":\"shop/orders-reconciler\",\"holder\":\"b_2\",\"isLeader\":false,\"transitions\":0,\"fencingToken\":1}\n")
	all.expect(t, "event: started\ndata: {\"election\":\"poller\",\"lease\":\"shop/orders-poller\",\"holder\":\"a_1\",\"isLeader\":true,\"transitions\":0,\"fencingToken\":7}\n")
	onlyPoller.expect(t, "event: started\ndata: {\"election\":\"poller\",\"lease\":\"shop/orders-poller\",\"holder\":\"a_1\",\"isLeader\":true,\"transitions\":0,\"fencingToken\":7}\n")
	onlyPoller.expect(t, ": keep-alive\n")
}

// TestEventStreamsAreLimited: other pods' clients that open streams and never read them hold at most
// maxStreamsPerAddress each and maxRemoteStreams together; the pod's own app can always subscribe (its
// streams have a bound of their own) and gets every event; /leader without streaming stays served.
func TestEventStreamsAreLimited(t *testing.T) {
	orders := &liveElection{status: lease.Status{Lease: "shop/orders"}}
	elections := []namedElection{{name: "orders", election: orders}}
	hub, server := streamServer(t, elections, func(hub *eventHub) { hub.local = onlyPodItself })
	const state = "retry: 1000\nevent: state\ndata: {\"lease\":\"shop/orders\",\"holder\":\"\",\"isLeader\":false,\"transitions\":0,\"fencingToken\":0}\n"
	refused := func(from, want string) {
		t.Helper()
		over := openStreamFrom(t, from, server.URL+"/leader")
		body, _ := io.ReadAll(over.resp.Body)
		if over.resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), want) {
			t.Errorf("a stream from %s = %d %q, want 503 containing %q", from, over.resp.StatusCode, body, want)
		}
	}
	// Another pod: its clients open streams and never read past the first event.
	for range maxStreamsPerAddress {
		openStreamFrom(t, "127.0.0.2", server.URL+"/leader").expect(t, state)
	}
	refused("127.0.0.2", fmt.Sprintf("already serves %d event streams to 127.0.0.2, the limit for one address", maxStreamsPerAddress))
	// Many pods take every remote stream.
	for i := 0; hub.remoteStreams < maxRemoteStreams; i++ {
		openStreamFrom(t, fmt.Sprintf("127.0.0.%d", 3+i/maxStreamsPerAddress), server.URL+"/leader").expect(t, state)
	}
	refused("127.0.1.1", fmt.Sprintf("already serves %d event streams outside its pod", maxRemoteStreams))
	// The app, on loopback, still subscribes and follows the election.
	app := openStreamFrom(t, "127.0.0.1", server.URL+"/leader")
	app.expect(t, state)
	hub.publish(0, lease.Status{Lease: "shop/orders", Holder: "a_1", IsLeader: true, FencingToken: 1})
	app.expect(t, "event: started\ndata: {\"lease\":\"shop/orders\",\"holder\":\"a_1\",\"isLeader\":true,\"transitions\":0,\"fencingToken\":1}\n")
	for range maxLocalStreams - 1 {
		openStreamFrom(t, "127.0.0.1", server.URL+"/leader").next()
	}
	refused("127.0.0.1", fmt.Sprintf("already serves %d event streams to its own pod", maxLocalStreams))
	if code, _ := get(t, server, "/leader"); code != http.StatusOK {
		t.Errorf("/leader without Accept: text/event-stream = %d while the streams are full, want 200", code)
	}
}

// openStreamFrom is openStream from the loopback address from.
func openStreamFrom(t *testing.T, from, url string) *stream {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", "text/event-stream")
	client := clientFrom(from)
	client.Timeout = 0
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return &stream{resp: resp, r: bufio.NewReader(resp.Body)}
}

// BenchmarkEventFanOut is the time from an election's change (publish, on its loop) until each of 8
// streams' clients has read the event, on loopback.
func BenchmarkEventFanOut(b *testing.B) {
	orders := &liveElection{status: lease.Status{Lease: "shop/orders"}}
	elections := []namedElection{{name: "orders", election: orders}}
	hub, server := streamServer(b, elections, nil)
	var streams []*stream
	for range 8 {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, server.URL+"/leader", nil)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		s := &stream{resp: resp, r: bufio.NewReader(resp.Body)}
		if _, err := s.next(); err != nil {
			b.Fatal(err)
		}
		streams = append(streams, s)
	}
	statuses := []lease.Status{
		{Lease: "shop/orders", Holder: "a_1", IsLeader: true, FencingToken: 1},
		{Lease: "shop/orders", Holder: "a_1", FencingToken: 1},
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		hub.publish(0, statuses[i%2])
		for _, s := range streams {
			if _, err := s.next(); err != nil {
				b.Fatal(err)
			}
		}
	}
}
