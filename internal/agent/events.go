package agent

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/leasegate/leasegate/internal/lease"
)

// The events of the stream GET /leader (and /leader/<election>) serves to a client that accepts
// text/event-stream. Each carries, as its data, the election's whole status as /leader reports it, so an
// app acts on the data and may take the name as a hint.
const (
	// eventState opens every stream: what /leader says at that moment.
	eventState = "state"
	// eventStarted: this pod started leading; eventStopped: it stopped.
	eventStarted = "started"
	eventStopped = "stopped"
	// eventLeader: another pod leads, nobody does, or the term (the fencing token) changed.
	eventLeader = "leader"
	// eventHandover: a handover was asked on the lease (or withdrawn); the holder steps down next.
	eventHandover = "handover"
)

const (
	// The event streams open at once on an agent, whose port every pod in the cluster can reach, are
	// bounded: each holds a goroutine and its buffers (about 10 KiB) in a process that runs on a 10 MiB
	// soft memory limit. The pod's own containers (the app subscribes through LEASEGATE_AGENT_URL, on
	// loopback) have streams of their own, which no other pod can take: remote clients share
	// maxRemoteStreams, at most maxStreamsPerAddress from one address. A client that never reads is not
	// told from a slow one while socket buffers absorb what is sent (a keep-alive every 15 s would take
	// hours to fill them), so the bounds, not the write timeout, are what keep the app's streams.
	maxLocalStreams      = 32
	maxRemoteStreams     = 32
	maxStreamsPerAddress = 4
	// keepAliveEvery is how often an idle stream gets a comment line, so proxies and load balancers
	// (which often cut a connection silent for 30-60 s) keep it, and the client notices a dead agent.
	keepAliveEvery = 15 * time.Second
	// streamWriteTimeout ends a stream whose client has not taken what was written for this long, so a
	// client that stopped reading cannot hold a stream and its buffers forever.
	streamWriteTimeout = 10 * time.Second
	// eventBacklog is how many events a stream may fall behind before it is ended (the client reconnects
	// and starts from the state); a failover makes two to four per election.
	eventBacklog = 256
)

// eventHub keeps the latest events of every election, encoded once, and wakes the streams that follow
// them. publish runs on an election's loop and never waits on a stream.
type eventHub struct {
	elections []namedElection
	// keepAlive and writeTimeout are keepAliveEvery and streamWriteTimeout, shorter in unit tests.
	keepAlive, writeTimeout time.Duration

	mu sync.Mutex
	// backlog holds the event numbered n at n % eventBacklog; next is the number of the next event.
	backlog [eventBacklog]event
	next    uint64
	// last is the status each election's latest event was derived from.
	last []lease.Status
	// wake is closed, and replaced, on every event and on close.
	wake   chan struct{}
	closed bool
	// local tells the pod's own addresses (loopback); localStreams and remoteStreams count the open
	// streams of each kind, byAddr the remote ones by address.
	local         func(netip.Addr) bool
	localStreams  int
	remoteStreams int
	byAddr        map[netip.Addr]int
}

// event is one change, framed for both kinds of stream: all (every election's, on /leader) and named
// (one election's, on /leader/<election>, its data naming the election as /leader/<election> does).
type event struct {
	election   int
	all, named []byte
}

func newEventHub(elections []namedElection) *eventHub {
	h := &eventHub{elections: elections, keepAlive: keepAliveEvery, writeTimeout: streamWriteTimeout,
		last: make([]lease.Status, len(elections)), wake: make(chan struct{}), local: netip.Addr.IsLoopback, byAddr: map[netip.Addr]int{}}
	for i, e := range elections {
		h.last[i] = e.Status()
	}
	return h
}

// eventName is the event a change of one election's status from prev to next is, "" for none a
// client would act on.
func eventName(prev, next lease.Status) string {
	switch {
	case next.IsLeader && !prev.IsLeader:
		return eventStarted
	case prev.IsLeader && !next.IsLeader:
		return eventStopped
	case next.Holder != prev.Holder || next.GlobalHolder != prev.GlobalHolder || next.FencingToken != prev.FencingToken:
		return eventLeader
	case !next.Handover.Equal(prev.Handover):
		return eventHandover
	}
	return ""
}

// publish records election i's new status and wakes the streams when it is an event.
func (h *eventHub) publish(i int, s lease.Status) {
	h.mu.Lock()
	defer h.mu.Unlock()
	name := eventName(h.last[i], s)
	h.last[i] = s
	if name == "" || h.closed {
		return
	}
	named := frame(name, electionStatus{Election: h.elections[i].name, Status: s})
	all := named
	if len(h.elections) == 1 {
		all = frame(name, s)
	}
	h.backlog[h.next%eventBacklog] = event{election: i, all: all, named: named}
	h.next++
	close(h.wake)
	h.wake = make(chan struct{})
}

// close ends every stream once it has sent the events published before: the agent is stopping, and its
// last events (stopped, after the release) are on their way.
func (h *eventHub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		close(h.wake)
	}
}

// frame is one server-sent event: its name and its data, JSON on one line.
func frame(name string, data any) []byte {
	body, err := json.Marshal(data)
	if err != nil {
		// Statuses are plain strings, numbers and times: they always encode.
		panic(err)
	}
	return []byte("event: " + name + "\ndata: " + string(body) + "\n\n")
}

var (
	keepAliveFrames    = [][]byte{[]byte(": keep-alive\n\n")}
	tooFarBehindFrames = [][]byte{[]byte(": too far behind; reconnect for the current state\n\n")}
)

// acceptsEvents reports whether r asks for a stream: text/event-stream among the media types it accepts
// (as EventSource and `curl -H 'Accept: text/event-stream'` ask).
func acceptsEvents(r *http.Request) bool {
	for _, value := range r.Header["Accept"] {
		for media := range strings.SplitSeq(value, ",") {
			media, _, _ = strings.Cut(media, ";")
			if strings.EqualFold(strings.TrimSpace(media), "text/event-stream") {
				return true
			}
		}
	}
	return false
}

// serve streams election only's events (every election's when only is -1): first the state, then each
// event as it is published, with a keep-alive comment when nothing was sent for a while, until the
// client goes, falls too far behind or stops reading, or the agent stops.
func (h *eventHub) serve(w http.ResponseWriter, r *http.Request, only int) {
	addr := clientAddr(r)
	local := addr.IsValid() && h.local(addr)
	h.mu.Lock()
	if refusal := h.refusal(addr, local); refusal != "" {
		h.mu.Unlock()
		w.Header().Set("Retry-After", "1")
		http.Error(w, refusal, http.StatusServiceUnavailable)
		return
	}
	h.count(addr, local, 1)
	next, wake := h.next, h.wake
	state := h.state(only)
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.count(addr, local, -1)
		h.mu.Unlock()
	}()

	header := w.Header()
	header.Set("Content-Type", "text/event-stream")
	header.Set("Cache-Control", "no-cache")
	// nginx, as an ingress, would otherwise buffer the stream.
	header.Set("X-Accel-Buffering", "no")
	rc := http.NewResponseController(w)
	send := func(frames [][]byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(h.writeTimeout))
		for _, f := range frames {
			if _, err := w.Write(f); err != nil {
				return false
			}
		}
		return rc.Flush() == nil
	}
	// retry: an EventSource reconnects a second after the stream ends (an agent restarting).
	pending := append(make([][]byte, 0, 8), []byte("retry: 1000\n"), state)
	if !send(pending) {
		return
	}
	keepAlive := time.NewTimer(h.keepAlive)
	defer keepAlive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keepAlive.C:
			if !send(keepAliveFrames) {
				return
			}
			keepAlive.Reset(h.keepAlive)
			continue
		case <-wake:
		}
		pending = pending[:0]
		h.mu.Lock()
		behind := h.next-next > eventBacklog
		for ; !behind && next < h.next; next++ {
			if e := &h.backlog[next%eventBacklog]; only < 0 {
				pending = append(pending, e.all)
			} else if e.election == only {
				pending = append(pending, e.named)
			}
		}
		wake = h.wake
		closed := h.closed
		h.mu.Unlock()
		if behind {
			// Its client missed events: it reconnects (EventSource does, after the retry above) and
			// starts again from the state.
			send(tooFarBehindFrames)
			return
		}
		if len(pending) > 0 {
			if !send(pending) {
				return
			}
			keepAlive.Reset(h.keepAlive)
		}
		if closed {
			return
		}
	}
}

// refusal says why a new stream for a client at addr (local: one of the pod's own) cannot be served,
// "" when it can. Called with h.mu held.
func (h *eventHub) refusal(addr netip.Addr, local bool) string {
	const instead = "close one, or read /leader without Accept: text/event-stream"
	switch {
	case h.closed:
		return "this agent is stopping; its successor serves the stream"
	case local && h.localStreams >= maxLocalStreams:
		return fmt.Sprintf("this agent already serves %d event streams to its own pod, their limit: %s", maxLocalStreams, instead)
	case local:
	case h.byAddr[addr] >= maxStreamsPerAddress:
		return fmt.Sprintf("this agent already serves %d event streams to %s, the limit for one address: %s", maxStreamsPerAddress, addr, instead)
	case h.remoteStreams >= maxRemoteStreams:
		return fmt.Sprintf("this agent already serves %d event streams outside its pod, their limit: %s", maxRemoteStreams, instead)
	}
	return ""
}

// count adds delta to the streams of a client at addr. Called with h.mu held.
func (h *eventHub) count(addr netip.Addr, local bool, delta int) {
	if local {
		h.localStreams += delta
		return
	}
	h.remoteStreams += delta
	if n := h.byAddr[addr] + delta; n > 0 {
		h.byAddr[addr] = n
	} else {
		delete(h.byAddr, addr)
	}
}

// clientAddr is the address of r's client, IPv4 in IPv6 unmapped; invalid when it has none.
func clientAddr(r *http.Request) netip.Addr {
	addrPort, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return addrPort.Addr().Unmap()
}

// state is the stream's first event: what /leader (or /leader/<election>) says now. Called with h.mu
// held, so that no event is both in it and missed after it.
func (h *eventHub) state(only int) []byte {
	if only < 0 {
		return frame(eventState, report(h.elections))
	}
	e := h.elections[only]
	return frame(eventState, electionStatus{Election: e.name, Status: e.Status()})
}
