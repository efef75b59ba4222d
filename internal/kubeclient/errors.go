package kubeclient

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// Status is the API server's account of a failure (meta/v1 Status), as it sends it in the body of a
// failed response and in a watch's ERROR event.
type Status struct {
	Message string `json:"message"`
	// Reason is machine-readable: Conflict, NotFound, AlreadyExists, Expired, Gone, ...
	Reason  string         `json:"reason"`
	Code    int            `json:"code"`
	Details *StatusDetails `json:"details,omitempty"`
}

// StatusDetails is the part of a Status's details this client reads.
type StatusDetails struct {
	// RetryAfterSeconds is the server's Retry-After in the body: API Priority and Fairness's 429s and a
	// server timeout's 504 carry it, and a watch's ERROR event can carry nothing else of the kind.
	RetryAfterSeconds int32 `json:"retryAfterSeconds,omitempty"`
}

// StatusError is a request the API server refused.
type StatusError struct {
	Status Status
	// RetryAfter is how long the server asked this client to wait before its next request of the kind
	// (Retry-After, or the Status's retryAfterSeconds); 0 when it did not ask.
	RetryAfter time.Duration
}

func (e *StatusError) Error() string {
	if e.Status.Message != "" {
		return e.Status.Message
	}
	return "the server responded " + http.StatusText(e.Status.Code) + " (" + e.Status.Reason + ")"
}

// statusError reads the Status in a failed response's body; a body that is not one (a proxy's page, say)
// keeps its first line as the message.
func statusError(code int, body []byte) *StatusError {
	var s Status
	if json.Unmarshal(body, &s) != nil || s.Code == 0 {
		s = Status{Code: code, Message: strings.TrimSpace(strings.SplitN(string(body), "\n", 2)[0])}
	}
	if s.Reason == "" {
		s.Reason = reasonFor(code)
	}
	return &StatusError{Status: s}
}

// reasonFor is the reason the API server gives with a code, for a failure whose body said none.
func reasonFor(code int) string {
	switch code {
	case http.StatusConflict:
		return "Conflict"
	case http.StatusNotFound:
		return "NotFound"
	case http.StatusGone:
		return "Gone"
	}
	return ""
}

// ReasonOf is the reason of a *StatusError in err's chain, "" for any other error.
func ReasonOf(err error) string {
	var statusErr *StatusError
	if errors.As(err, &statusErr) {
		return statusErr.Status.Reason
	}
	return ""
}

// RetryAfterOf reports whether err says the API server is holding this client back, and the least it
// asked to wait before the next request of the kind: a 429 (API Priority and Fairness shedding load) or
// a 5xx, with or without a Retry-After; any refusal that carries one; or a *ThrottledError, a request
// not sent because of an earlier Retry-After. Callers back off at least that long.
func RetryAfterOf(err error) (time.Duration, bool) {
	var throttled *ThrottledError
	if errors.As(err, &throttled) {
		return throttled.Wait, true
	}
	var statusErr *StatusError
	if !errors.As(err, &statusErr) {
		return 0, false
	}
	code := statusErr.Status.Code
	return statusErr.RetryAfter, statusErr.RetryAfter > 0 || code == http.StatusTooManyRequests || code >= 500
}

// IsConflict: a write's resourceVersion was stale (or two creates raced: the second is AlreadyExists).
func IsConflict(err error) bool { return ReasonOf(err) == "Conflict" }

// IsNotFound: the object does not exist.
func IsNotFound(err error) bool { return ReasonOf(err) == "NotFound" }

// IsInvalid: the server refused the request's content or parameters (422).
func IsInvalid(err error) bool { return ReasonOf(err) == "Invalid" }

// IsAlreadyExists: a create found the object there.
func IsAlreadyExists(err error) bool { return ReasonOf(err) == "AlreadyExists" }

// IsResourceExpired: a watch or list asked for a resourceVersion the server no longer keeps (410
// Expired or Gone); the caller must list again.
func IsResourceExpired(err error) bool {
	var statusErr *StatusError
	return errors.As(err, &statusErr) && (statusErr.Status.Code == http.StatusGone || statusErr.Status.Reason == "Expired" || statusErr.Status.Reason == "Gone")
}

// The connection failures below are told apart as apimachinery's util/net tells them apart, by type and,
// where Go's HTTP stack gives only a message, by message, so that this client retries and resumes exactly
// where client-go does.

// IsProbableEOF: the connection was closed under the request or stream: an end of file, a reset, an
// HTTP/2 GOAWAY followed by the close (what every API server restart does to its clients), a closed
// connection.
func IsProbableEOF(err error) bool {
	if err == nil {
		return false
	}
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		err = urlErr.Err
	}
	msg := err.Error()
	switch {
	case err == io.EOF, err == io.ErrUnexpectedEOF:
		return true
	case msg == "http: can't write HTTP request on broken connection":
		return true
	case strings.Contains(msg, "http2: server sent GOAWAY and closed the connection"):
		return true
	case strings.Contains(msg, "connection reset by peer"):
		return true
	case strings.Contains(strings.ToLower(msg), "use of closed network connection"):
		return true
	}
	return false
}

// IsConnectionReset: the peer reset the connection (ECONNRESET).
func IsConnectionReset(err error) bool {
	var errno syscall.Errno
	return errors.As(err, &errno) && errno == syscall.ECONNRESET
}

// IsConnectionRefused: nothing listened at the server's address (ECONNREFUSED): the process was not
// running, and the one that answers there next is another.
func IsConnectionRefused(err error) bool {
	var errno syscall.Errno
	return errors.As(err, &errno) && errno == syscall.ECONNREFUSED
}

// IsHTTP2ConnectionLost: the HTTP/2 health check found the connection dead (a ping unanswered).
func IsHTTP2ConnectionLost(err error) bool {
	return err != nil && strings.Contains(err.Error(), "http2: client connection lost")
}

// IsTimeout: a network operation timed out (dialing, the TLS handshake, a deadline).
func IsTimeout(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout()
}
