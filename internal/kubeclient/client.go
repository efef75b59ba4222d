// Package kubeclient is the smallest client of the Kubernetes API the leader agent needs: configuration
// (in-cluster or a kubeconfig), JSON requests whose failures are the API server's Status, and watch
// streams. It replaces client-go in the agent, which runs beside every replica of every opted-in workload:
// client-go's REST client, reflector and the API types it links would be most of the agent's binary and
// resident memory (docs/performance.md has the figures), where the agent itself needs a few requests and
// one watch per election.
// The webhook and the tools keep client-go.
package kubeclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"
)

// maxUndecodedBody bounds how much of a body is read without being decoded: a failure's Status, or what
// follows a decoded value.
const maxUndecodedBody = 64 << 10

// Client sends JSON requests to one API server. It honours the server's Retry-After: an answer that
// carries one holds back the next request of its kind (Kind) until it has passed, and such a request
// fails at once with a *ThrottledError instead of being sent; the first one after that goes out alone,
// and the others of its kind wait for its answer, which may hold them back again. It retries no refusal
// itself: whether a shed request is worth sending again, and when, is the caller's to judge (a leader's
// renewal is, a follower's take can wait longer), and RetryAfterOf tells it the least wait.
type Client struct {
	host     *url.URL
	http     *http.Client
	throttle throttle
	limiter  *rate.Limiter // nil: no client-side rate limit (SetRateLimit)
}

// New builds a client for config.
func New(config *Config) (*Client, error) {
	client, err := config.HTTPClient()
	if err != nil {
		return nil, err
	}
	return NewForHTTPClient(config.Host, client)
}

// NewForHTTPClient is a client of the server at host that sends its requests through httpClient. Clients
// built on one transport share its connections: a load test that acts as thousands of pods (each
// impersonated by a round tripper of its own) holds one connection to the API server, as the agents of
// a node would hold one each.
func NewForHTTPClient(host string, httpClient *http.Client) (*Client, error) {
	u, err := serverURL(host)
	if err != nil {
		return nil, err
	}
	return &Client{host: u, http: httpClient}, nil
}

// serverURL is the API server's URL: a bare host:port means https.
func serverURL(host string) (*url.URL, error) {
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	u, err := url.Parse(host)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("server %q: not a URL such as https://10.96.0.1:443", host)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return u, nil
}

// Request is one API call: method and path (such as /apis/coordination.k8s.io/v1/namespaces/shop/leases),
// the query, and a body encoded as JSON when not nil.
type Request struct {
	Method string
	Path   string
	Query  url.Values
	Body   any
}

// Do sends req and decodes a successful response's JSON into into (when not nil). A response outside
// 2xx is a *StatusError.
func (c *Client) Do(ctx context.Context, req Request, into any) error {
	resp, err := c.send(ctx, req, kindOf(req.Method), "application/json", retryableRequestError)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if into != nil {
		if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
			return fmt.Errorf("%s %s: decoding the response: %w", req.Method, req.Path, err)
		}
	}
	// Read the rest (an answer nobody decodes, or a chunked HTTP/1.1 body's last chunk after the value),
	// so the connection is reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxUndecodedBody))
	return nil
}

// Stream sends req, a GET with watch=true, and returns the open response body: one JSON watch event
// after another until the server ends the watch or ctx ends. A refusal is a *StatusError.
func (c *Client) Stream(ctx context.Context, req Request) (io.ReadCloser, error) {
	resp, err := c.send(ctx, req, KindRead, "application/json;stream=watch", retryableWatchError)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// maxRetries is how often a request whose connection failed in a way that is safe to retry
// (retryableRequestError, retryableWatchError) is sent again, after a second, within the caller's
// context, as client-go's REST client does. A refusal by the server is never retried here.
const maxRetries = 10

// errorRetryAfter is the wait before a request whose connection failed is sent again: client-go answers
// such a failure with a made-up "Retry-After: 1".
const errorRetryAfter = time.Second

// retryableRequestError reports whether a request that failed with err is sent again: a GET (which
// changes nothing) whose connection was reset or closed, as an API server that restarts or sheds a
// connection does. Writes are not retried: the server may have acted on them. client-go's REST client
// (rest.Request.request) decides the same.
func retryableRequestError(method string, err error) bool {
	return method == http.MethodGet && (IsConnectionReset(err) || IsProbableEOF(err) || IsHTTP2ConnectionLost(err))
}

// retryableWatchError reports whether a watch request that failed with err is sent again: a connection
// closed or timed out (client-go's rest.Request.Watch).
func retryableWatchError(_ string, err error) bool {
	return IsProbableEOF(err) || IsTimeout(err)
}

func (c *Client) send(ctx context.Context, req Request, kind Kind, accept string, retryable func(method string, err error) bool) (*http.Response, error) {
	u := *c.host
	u.Path += req.Path
	u.RawQuery = req.Query.Encode()
	var data []byte
	if req.Body != nil {
		var err error
		if data, err = json.Marshal(req.Body); err != nil {
			return nil, fmt.Errorf("%s %s: encoding the body: %w", req.Method, req.Path, err)
		}
	}
	target := u.String()
	for attempt := 0; ; attempt++ {
		probe, wait, err := c.throttle.admit(ctx, kind)
		if wait > 0 {
			return nil, &ThrottledError{Kind: kind, Wait: wait}
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: waiting for the answer to the first %s sent after the API server's Retry-After: %w", req.Method, req.Path, kind, err)
		}
		resp, failure, err := c.roundTrip(ctx, req, target, data, accept, kind)
		if probe {
			// After the hold its answer may carry (roundTrip records it), so the requests waiting see it.
			c.throttle.probed(kind, err == nil)
		}
		if failure != nil {
			return nil, failure
		}
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil || !retryable(req.Method, err) || attempt == maxRetries {
			return nil, err
		}
		t := time.NewTimer(errorRetryAfter)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

// roundTrip sends req once, after the client-side rate limit's token. The server's answer is either
// resp (2xx) or failure, whose Retry-After it holds; err: no answer (not sent, or the connection failed).
func (c *Client) roundTrip(ctx context.Context, req Request, target string, data []byte, accept string, kind Kind) (resp *http.Response, failure *StatusError, err error) {
	if err := c.takeToken(ctx, req); err != nil {
		return nil, nil, err
	}
	var body io.Reader
	if data != nil {
		body = bytes.NewReader(data)
	}
	httpReq, err := http.NewRequestWithContext(ctx, req.Method, target, body)
	if err != nil {
		return nil, nil, err
	}
	httpReq.Header.Set("Accept", accept)
	if data != nil {
		httpReq.Header.Set("Content-Type", "application/json")
	}
	if resp, err = c.http.Do(httpReq); err != nil {
		return nil, nil, err
	}
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return resp, nil, nil
	}
	errBody, _ := io.ReadAll(io.LimitReader(resp.Body, maxUndecodedBody))
	resp.Body.Close()
	failure = statusError(resp.StatusCode, errBody)
	failure.RetryAfter = retryAfter(resp, failure.Status)
	if failure.RetryAfter > 0 {
		c.throttle.hold(kind, time.Now(), failure.RetryAfter)
	}
	return nil, failure, nil
}

// retryAfter is how long the server asked this client to wait: a 429's or a 5xx's Retry-After header of
// whole seconds, as client-go's REST client reads it (checkWait, retryAfterSeconds), or else the
// retryAfterSeconds of the Status in the body, which any refusal may carry. A date in Retry-After is
// not read, as client-go does not read it either. 0: the server did not ask.
func retryAfter(resp *http.Response, status Status) time.Duration {
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
		if seconds, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
			// Clamped so that no header overflows the duration.
			return time.Duration(min(max(seconds, 0), math.MaxInt32)) * time.Second
		}
	}
	if status.Details != nil && status.Details.RetryAfterSeconds > 0 {
		return time.Duration(status.Details.RetryAfterSeconds) * time.Second
	}
	return 0
}
