package kubeclient

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Kind sorts requests by what the server may ask this client to hold back: a Retry-After on an answer
// to one kind of request sets the earliest next request of that kind only, so that a list shed while
// the API server catches up does not also hold back the writes of an election that leads.
type Kind int

const (
	// KindRead is a GET of an object or a list.
	KindRead Kind = iota
	// KindWatch is the opening of a watch.
	KindWatch
	// KindWrite is anything that changes an object: a create, an update, an eviction.
	KindWrite
	kinds
)

func (k Kind) String() string {
	switch k {
	case KindRead:
		return "read"
	case KindWatch:
		return "watch"
	}
	return "write"
}

func kindOf(method string, watch bool) Kind {
	switch {
	case watch:
		return KindWatch
	case method == http.MethodGet:
		return KindRead
	}
	return KindWrite
}

// throttle is what the server asked of this client, per kind of request: the earliest instant (Unix
// nanoseconds) the next one may go out.
type throttle struct {
	notBefore [kinds]atomic.Int64
}

// hold records a Retry-After of wait, asked at now, for kind. A later instant already asked for stays:
// the server's longest ask wins.
func (t *throttle) hold(kind Kind, now time.Time, wait time.Duration) {
	until := now.Add(wait).UnixNano()
	for {
		current := t.notBefore[kind].Load()
		if current >= until || t.notBefore[kind].CompareAndSwap(current, until) {
			return
		}
	}
}

// wait is how long a request of kind must still wait at now, 0 when it may go out.
func (t *throttle) wait(kind Kind, now time.Time) time.Duration {
	return max(time.Duration(t.notBefore[kind].Load()-now.UnixNano()), 0)
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

// takeToken waits for the rate limiter's token, if there is a limiter.
func (c *Client) takeToken(ctx context.Context, req Request) error {
	if c.limiter == nil {
		return nil
	}
	if err := c.limiter.Wait(ctx); err != nil {
		return fmt.Errorf("%s %s: the client's rate limit (%.3g requests/s, burst %d): %w", req.Method, req.Path, float64(c.limiter.Limit()), c.limiter.Burst(), err)
	}
	return nil
}

// WatchError is the error of a watch's ERROR event carrying status. A retryAfterSeconds in the status's
// details holds back the next watch as a Retry-After would.
func (c *Client) WatchError(status Status) *StatusError {
	err := &StatusError{Status: status}
	if d := status.Details; d != nil && d.RetryAfterSeconds > 0 {
		err.RetryAfter = time.Duration(d.RetryAfterSeconds) * time.Second
		c.throttle.hold(KindWatch, time.Now(), err.RetryAfter)
	}
	return err
}
