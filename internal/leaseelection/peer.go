package leaseelection

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/leasegate/leasegate/internal/contract"
)

// A follower learns that the leader let go of the lease from the leader itself, not from a watch of the
// lease: it holds a request open to the holder's agent (the URL the holder writes on the lease,
// contract.HolderURL), which the holder answers once it has released the lease, handed it over or
// stepped down. An open watch costs the API server about 110 KiB and two goroutines; at 10,000 leases ×
// 3 candidates the watches were three quarters of its memory (docs/scale.md). The wait costs the leader's
// agent a goroutine, and the API server nothing.
//
// The answer is only a wake-up: it carries nothing the follower trusts. A woken follower reads the lease
// and judges it as it would a watch event, and every write is still a compare-and-swap, so a wake-up
// that is wrong, forged or lost costs time, never safety. Lost ones are bounded: a follower also reads
// the lease when its copy could have expired (the crash path, whose budget is the same), and watches the
// lease, as before, wherever the wait is not answered (a holder that writes no URL, such as client-go's
// elector or an older agent; a NetworkPolicy that keeps pods apart; a holder that went away).

// maxHold is how long the holder keeps a wait open before it answers that it still leads, so that a
// connection whose other end went away unannounced (a node lost) is found within it.
const maxHold = 30 * time.Second

// maxWaitersPerLease bounds the waits one holder keeps open for one lease: its candidates' followers,
// with room for restarts. One past it is refused, and that follower watches the lease instead.
const maxWaitersPerLease = 16

// WakeHub answers the waits of the followers of the electors registered on it while they lead: one per
// agent, on the agent's endpoints (contract.AgentWakePath), shared by its elections.
type WakeHub struct {
	mu    sync.Mutex
	terms map[termKey]*heldTerm
}

type termKey struct{ lease, holder string }

// heldTerm is a lease an elector of the hub leads: released is closed when it lets go.
type heldTerm struct {
	released chan struct{}
	waiters  int
}

// NewWakeHub returns a hub with no term held.
func NewWakeHub() *WakeHub { return &WakeHub{terms: map[termKey]*heldTerm{}} }

// lead records that holder leads lease ("<namespace>/<name>"); a term already recorded stays.
func (h *WakeHub) lead(lease, holder string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.terms[termKey{lease, holder}]; !ok {
		h.terms[termKey{lease, holder}] = &heldTerm{released: make(chan struct{})}
	}
}

// release answers every wait on holder's term of lease: it no longer leads.
func (h *WakeHub) release(lease, holder string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, ok := h.terms[termKey{lease, holder}]; ok {
		close(t.released)
		delete(h.terms, termKey{lease, holder})
	}
}

// Close answers every wait, as the agent does before its endpoints shut down.
func (h *WakeHub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, t := range h.terms {
		close(t.released)
		delete(h.terms, k)
	}
}

// ServeHTTP answers GET ?lease=<namespace>/<name>&holder=<identity>: 200 once that holder has let go of
// the lease, 204 after maxHold while it still leads, 404 at once when it does not lead the lease here,
// 503 when the term has maxWaitersPerLease waits open.
func (h *WakeHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	key := termKey{q.Get("lease"), q.Get("holder")}
	if key.lease == "" || key.holder == "" {
		http.Error(w, "a wait names the lease (lease=<namespace>/<name>) and its holder (holder=<identity>)", http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	t, ok := h.terms[key]
	if ok && t.waiters >= maxWaitersPerLease {
		h.mu.Unlock()
		http.Error(w, fmt.Sprintf("%d waits are open on this lease already; watch it instead", maxWaitersPerLease), http.StatusServiceUnavailable)
		return
	}
	if ok {
		t.waiters++
	}
	h.mu.Unlock()
	if !ok {
		http.Error(w, "this agent does not lead that lease as that holder", http.StatusNotFound)
		return
	}
	defer func() {
		h.mu.Lock()
		t.waiters--
		h.mu.Unlock()
	}()
	// The agent's endpoints bound how long an answer may take; a wait is answered later by design.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(maxHold + 5*time.Second))
	hold := time.NewTimer(maxHold)
	defer hold.Stop()
	select {
	case <-t.released:
		w.WriteHeader(http.StatusOK)
	case <-hold.C:
		w.WriteHeader(http.StatusNoContent)
	case <-r.Context().Done():
	}
}

// HolderURL is the URL an agent reachable at host (an IP address) and port writes on the leases it
// holds, contract.HolderURL; "" when host is not an IP address that other pods can reach, where it
// writes none and its followers watch.
func HolderURL(host string, port int) string {
	ip, err := netip.ParseAddr(host)
	if err != nil || !podAddress(ip) || port <= 0 || port > 65535 {
		return ""
	}
	return "http://" + netip.AddrPortFrom(ip, uint16(port)).String()
}

// holderURLOf is the holder URL l carries, if it is one: http://<IP>:<port> and nothing else, so that a
// follower never resolves a name nor follows a path someone else chose, at an address a pod can have.
// A holder (any pod that took the lease) chooses it, so it may not send the followers to their own
// pods' loopback services, nor to link-local addresses (a cloud's metadata server), nor to a multicast
// group; loopback passes only for a follower that itself answers on loopback (agents sharing a host,
// in tests), where its peers do too.
func holderURLOf(l *Lease, loopback bool) (string, bool) {
	raw := l.Annotations[contract.HolderURL]
	u, err := url.Parse(raw)
	if raw == "" || err != nil || u.Scheme != "http" || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" {
		return "", false
	}
	ap, err := netip.ParseAddrPort(u.Host)
	if err != nil || ap.Port() == 0 || !podAddress(ap.Addr()) || ap.Addr().IsLoopback() && !loopback {
		return "", false
	}
	return raw, true
}

// podAddress reports whether ip is one a pod's agent may answer on: a unicast address, neither
// unspecified nor link-local, with no zone.
func podAddress(ip netip.Addr) bool {
	return ip.IsValid() && !ip.IsUnspecified() && !ip.IsMulticast() && !ip.IsLinkLocalUnicast() && ip.Zone() == ""
}

// onLoopback reports whether holderURL, this elector's own, is on a loopback address.
func onLoopback(holderURL string) bool {
	u, err := url.Parse(holderURL)
	if err != nil {
		return false
	}
	ap, err := netip.ParseAddrPort(u.Host)
	return err == nil && ap.Addr().IsLoopback()
}

// peerTarget is a holder a follower waits on: its URL, the lease and the holder's identity.
type peerTarget struct{ url, lease, holder string }

// peerResult is how a wait on target ended: the holder answered that it let go (err nil), or err.
type peerResult struct {
	target peerTarget
	err    error
}

// NewPeerClient is the followers' client of holders' agents: cleartext HTTP/2, so the waits of one agent's
// elections on one holder share a connection, never through a proxy, and quick to give up on a holder
// it cannot reach (the follower then watches). The dial timeout is the longest a follower is blind to
// the lease while it switches to a holder it cannot reach (a URL an older agent or client-go kept from
// a holder since gone): pods connect to each other in milliseconds, and a spurious timeout costs only
// a watch.
func NewPeerClient() *http.Client {
	t := &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 250 * time.Millisecond, KeepAlive: 15 * time.Second}).DialContext,
		Protocols:             new(http.Protocols),
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       maxHold + 15*time.Second,
		ResponseHeaderTimeout: maxHold + 5*time.Second,
		DisableCompression:    true,
	}
	t.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: t, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

var errPeerRefused = errors.New("the holder's agent refused the wait")

// minHold is the shortest hold a "still leading" answer may follow: a holder's agent holds each wait for
// maxHold, so one answered sooner is not a holder's agent, and is not asked again in a tight loop.
const minHold = time.Second

var errPeerAnsweredAtOnce = errors.New("the holder's URL answered at once that it still leads, as no holder's agent does")

// waitOnHolder waits until target's holder answers that it let go of the lease, asking again each time
// it answers, after holding the wait, that it still leads; it returns an error when the holder cannot be
// asked or refuses.
func waitOnHolder(ctx context.Context, client *http.Client, target peerTarget) error {
	u := target.url + contract.AgentWakePath + "?" + url.Values{"lease": {target.lease}, "holder": {target.holder}}.Encode()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		asked := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			return nil
		case http.StatusNoContent:
			if time.Since(asked) < minHold {
				return errPeerAnsweredAtOnce
			}
			// still leading: ask again
		default:
			return fmt.Errorf("%w: %s", errPeerRefused, strings.ToLower(http.StatusText(resp.StatusCode)))
		}
	}
}

// waitOnHolders runs the waits of one elector: each target it is given (the zero target: none), until ctx
// ends, reporting how each ended in results, latest first (an older result is dropped).
func waitOnHolders(ctx context.Context, client *http.Client, targets <-chan peerTarget, results chan peerResult) {
	stop := func() {}
	defer func() { stop() }()
	for {
		var target peerTarget
		select {
		case <-ctx.Done():
			return
		case target = <-targets:
		}
		stop()
		stop = func() {}
		if target.url != "" {
			stop = startWait(ctx, client, target, results)
		}
	}
}

// startWait waits on target in its own goroutine, and returns what ends the wait.
func startWait(ctx context.Context, client *http.Client, target peerTarget, results chan peerResult) context.CancelFunc {
	waitCtx, cancel := context.WithCancel(ctx)
	go func() {
		err := waitOnHolder(waitCtx, client, target)
		if waitCtx.Err() != nil {
			return // given another target, or stopping
		}
		offerLatest(results, peerResult{target: target, err: err})
	}()
	return cancel
}

// offerLatest puts v in ch (capacity 1), in place of anything there.
func offerLatest[T any](ch chan T, v T) {
	for {
		select {
		case ch <- v:
			return
		default:
		}
		select {
		case <-ch:
		default:
		}
	}
}

// advertises reports whether this elector, leading, answers its followers' waits.
func (e *Elector) advertises() bool { return e.cfg.Wake != nil && e.cfg.WakeURL != "" }

// stampURL writes on l, a lease this elector is about to write as holder, where its followers wait
// (contract.HolderURL), or removes a URL an earlier holder wrote when it answers none.
func (e *Elector) stampURL(l *Lease) {
	if !e.advertises() {
		delete(l.Annotations, contract.HolderURL)
		return
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[contract.HolderURL] = e.cfg.WakeURL
}

// answerWaits makes the hub hold the waits on this elector before it writes itself holder with its URL:
// a follower that reads that write at once and asks is held, not told that this elector does not lead.
func (e *Elector) answerWaits() {
	if e.advertises() {
		e.cfg.Wake.lead(e.name, e.cfg.Identity)
	}
}

// letGo answers this elector's followers' waits: it no longer leads, and any release it writes has been
// written (so that a woken follower reads it).
func (e *Elector) letGo() {
	if e.advertises() {
		e.cfg.Wake.release(e.name, e.cfg.Identity)
	}
}

// choosePath chooses how this elector learns what happens to the lease next, and starts or stops the
// watch and the wait on the holder to match (path).
func (e *Elector) choosePath() {
	target, watch := e.path(e.clock.Now())
	if target != e.waitingOn {
		e.waitingOn = target
		offerLatest(e.peers, target)
	}
	e.watch.want(watch, e.known)
}

// path is how this elector learns what happens to the lease next: a leader learns it from its own
// compare-and-swaps (it watches only where the lock's answer comes through the object, as a
// MultiClusterLease's does); a follower waits on the holder where the lease names the holder's URL and
// that wait has not just ended, and watches the lease otherwise.
func (e *Elector) path(now time.Time) (target peerTarget, watch bool) {
	if e.leading {
		return peerTarget{}, e.cfg.Lock.answersHolder()
	}
	k := e.known
	if k == nil || k.Spec.HolderIdentity == "" || k.Spec.HolderIdentity == e.cfg.Identity {
		return peerTarget{}, true
	}
	u, ok := holderURLOf(k, e.peersOnLoopback)
	if !ok {
		return peerTarget{}, true
	}
	target = peerTarget{url: u, lease: e.name, holder: k.Spec.HolderIdentity}
	if target == e.skipped && now.Before(e.skipUntil) {
		return peerTarget{}, true
	}
	return target, false
}

// heard takes in how the wait on the holder ended: either way the lease is read next (a released lease
// is taken on that read), and that holder is not waited on again for a lease duration: it let go, or
// cannot be asked, and the watch covers the lease meanwhile.
func (e *Elector) heard(r peerResult) {
	e.skipped, e.skipUntil = r.target, e.clock.Now().Add(e.cfg.Timing.LeaseDuration)
	e.mustRead = true
	if r.err != nil {
		e.cfg.Log.V(1).Info("Could not wait on the holder; watching the lease instead", "lease", e.name, "holder", r.target.holder, "url", r.target.url, "reason", r.err.Error())
	}
}
