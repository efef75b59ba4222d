package kubeclient

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Kind sorts requests by what the server may ask this client to hold back: a Retry-After on an answer
// to one kind of request sets the earliest next request of that kind only. Reads and watches are one
// kind: they are what a follower sends (its watch's list and watch, a read before it takes), and an
// agent being shed must not send one of each within the server's wait. Writes are the other: a leader's
// renewals must not wait behind the relist of its own watch.
type Kind int

const (
	// KindRead is a GET: of an object, a list, or the opening of a watch.
	KindRead Kind = iota
	// KindWrite is anything that changes an object: a create, an update, an eviction.
	KindWrite
	kinds
)

func (k Kind) String() string {
	if k == KindRead {
		return "read"
	}
	return "write"
}

func kindOf(method string) Kind {
	if method == http.MethodGet {
		return KindRead
	}
	return KindWrite
}

// throttle is what the server asked of this client, per kind of request.
type throttle struct {
	kinds [kinds]gate
}

// gate holds back one kind of request after a Retry-After. While the server's wait runs, a request fails
// at once (ThrottledError). When it has run out, the next request goes out alone, as a probe, and the
// others wait for its answer: every request held back would otherwise go out in the same instant,
// which is the burst the server's wait was meant to spread (docs/api-server.md). The probe's answer decides for them: a new Retry-After holds
// them back again, anything else lets them go.
type gate struct {
	// notBefore is the earliest instant (Unix nanoseconds) a request may go out, and until a probe
	// after it has been answered it stays set; 0: no hold, every request goes, after one atomic load.
	notBefore atomic.Int64

	mu sync.Mutex
	// probing is closed when the probe out now is answered or gives up; nil while none is out.
	probing chan struct{}
}

// hold records a Retry-After of wait, asked at now, for kind. A later instant already asked for stays:
// the server's longest ask wins.
func (t *throttle) hold(kind Kind, now time.Time, wait time.Duration) {
	g := &t.kinds[kind]
	until := now.UnixNano() + int64(wait)
	for {
		current := g.notBefore.Load()
		if current >= until || g.notBefore.CompareAndSwap(current, until) {
			return
		}
	}
}

// admit decides whether a request of kind may go out now. While the server's wait runs, it returns
// what is left of it (the request is not sent). When the wait has run out, it makes the first caller
// the probe (probe true: it calls probed once the server has answered, or the request has given up) and
// holds every other one until the probe is answered; err: ctx ended first.
func (t *throttle) admit(ctx context.Context, kind Kind) (probe bool, wait time.Duration, err error) {
	g := &t.kinds[kind]
	for {
		if g.notBefore.Load() == 0 {
			return false, 0, nil
		}
		g.mu.Lock()
		notBefore := g.notBefore.Load()
		if notBefore == 0 {
			g.mu.Unlock()
			return false, 0, nil
		}
		if wait := time.Duration(notBefore - time.Now().UnixNano()); wait > 0 {
			g.mu.Unlock()
			return false, wait, nil
		}
		probing := g.probing
		if probing == nil {
			g.probing = make(chan struct{})
			g.mu.Unlock()
			return true, 0, nil
		}
		g.mu.Unlock()
		select {
		case <-probing:
		case <-ctx.Done():
			return false, 0, ctx.Err()
		}
	}
}

// probed ends the probe of kind. answered: the server answered it (any status; a Retry-After on the
// answer is already held), so the requests waiting go, unless that answer or another one asked for a
// later instant. Not answered (the connection failed, the caller gave up), the next request probes.
func (t *throttle) probed(kind Kind, answered bool) {
	g := &t.kinds[kind]
	g.mu.Lock()
	defer g.mu.Unlock()
	if notBefore := g.notBefore.Load(); answered && notBefore <= time.Now().UnixNano() {
		// A Retry-After recorded since the load stays: the swap fails.
		g.notBefore.CompareAndSwap(notBefore, 0)
	}
	close(g.probing)
	g.probing = nil
}

// ThrottledError is a request this client did not send because the API server asked, in a Retry-After
// on an earlier answer to a request of the same kind, that none be sent before Wait has passed. The
// caller retries after Wait (RetryAfterOf), as it would after the server's own refusal.
type ThrottledError struct {
	Kind Kind
	Wait time.Duration
}

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("not sent: the API server asked for no %s before %s from now (Retry-After)", e.Kind, e.Wait.Round(time.Millisecond))
}

// SetRateLimit caps the requests this client sends (retries included) with a token bucket of burst
// tokens refilled at qps a second, as client-go caps every client (QPS 5, burst 10 by default). A request
// waits for its token within its context; one whose deadline comes first fails at once. The caller sizes
// it so that it never binds in steady state and caps a storm. Call it before the first request.
func (c *Client) SetRateLimit(qps float64, burst int) {
	c.limiter = rate.NewLimiter(rate.Limit(qps), burst)
}

// unlimitedKey marks a context whose requests the client-side rate limit does not hold back.
type unlimitedKey struct{}

// Unlimited exempts the requests made with the returned context from the client-side rate limit
// (SetRateLimit), not from the server's Retry-After. It is for the writes of a lease the caller holds: a
// renewal and a release are bounded by the election itself (one per retry period, one per term) and are
// what keeps a term's end prompt, so tokens spent by a burst of reads, watches and takes must never
// delay them past their deadline.
func Unlimited(ctx context.Context) context.Context {
	return context.WithValue(ctx, unlimitedKey{}, true)
}

// takeToken waits for the rate limiter's token, if there is a limiter and ctx is not Unlimited.
func (c *Client) takeToken(ctx context.Context, req Request) error {
	if c.limiter == nil || ctx.Value(unlimitedKey{}) != nil {
		return nil
	}
	if err := c.limiter.Wait(ctx); err != nil {
		return fmt.Errorf("%s %s: the client's rate limit (%.3g requests/s, burst %d): %w", req.Method, req.Path, float64(c.limiter.Limit()), c.limiter.Burst(), err)
	}
	return nil
}

// WatchError is the error of a watch's ERROR event carrying status. A retryAfterSeconds in the status's
// details holds back the next read or watch as a Retry-After would.
func (c *Client) WatchError(status Status) *StatusError {
	err := &StatusError{Status: status}
	if d := status.Details; d != nil && d.RetryAfterSeconds > 0 {
		err.RetryAfter = time.Duration(d.RetryAfterSeconds) * time.Second
		c.throttle.hold(KindRead, time.Now(), err.RetryAfter)
	}
	return err
}
