package main

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/go-logr/logr"

	"github.com/leasegate/leasegate/internal/kubeclient"
)

// failures counts what the electors logged as errors, by message and kind of error, so that a row that
// does not converge says why (throttled, timed out, refused) instead of only how many leases are unled.
type failures struct {
	mu     sync.Mutex
	counts map[string]int
	// outOfFiles counts the failures that were this process's own: a dial or accept refused because the
	// harness, which runs every elector, had no file descriptor left. A real agent is a process of its
	// own, so a scenario with any measures the harness, not the electors (outcome.outOfFiles).
	outOfFiles int
}

// logger is a logr.Logger whose errors go to f and whose other lines are dropped.
func (f *failures) logger() logr.Logger { return logr.New(failureSink{f}) }

func (f *failures) add(err error, msg string) {
	// The innermost cause, so that errors naming each lease's URL (url.Error, a failed decode) count as
	// one kind; the API server's refusals by code and reason.
	cause := err
	for next := errors.Unwrap(cause); next != nil; next = errors.Unwrap(cause) {
		cause = next
	}
	kind := cause.Error()
	var status *kubeclient.StatusError
	var throttled *kubeclient.ThrottledError
	switch {
	case errors.As(err, &status):
		kind = fmt.Sprintf("%d %s", status.Status.Code, status.Status.Reason) + refuser(status)
	case errors.As(err, &throttled):
		kind = "not sent: within an earlier " + throttled.Kind.String() + "'s Retry-After" // not by how long
	}
	if len(kind) > 80 {
		kind = kind[:80] + "..."
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.counts == nil {
		f.counts = map[string]int{}
	}
	f.counts[msg+": "+kind]++
	if outOfFiles(err) {
		f.outOfFiles++
	}
}

// refuser says who refused a request with 403: an admission webhook, by its name (its message starts
// `admission webhook "NAME" denied the request`), or else the authorizer (RBAC, impersonation). The
// message itself names the lease and the user, so it would count every refusal as a kind of its own.
func refuser(status *kubeclient.StatusError) string {
	if status.Status.Code != 403 {
		return ""
	}
	const webhook = `admission webhook "`
	if _, rest, ok := strings.Cut(status.Status.Message, webhook); ok {
		if name, _, ok := strings.Cut(rest, `"`); ok {
			return " by admission webhook " + name
		}
	}
	return " by the authorizer"
}

// outOfFiles reports whether err is this process having no file descriptor left for a connection.
func outOfFiles(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// ownLimit is how many failures so far were the harness's running out of file descriptors.
func (f *failures) ownLimit() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.outOfFiles
}

// take lists the counts, most frequent first, and starts counting again: each scenario's progress lines
// say what its electors met since it began.
func (f *failures) take() string {
	s := f.String()
	f.mu.Lock()
	f.counts, f.outOfFiles = nil, 0
	f.mu.Unlock()
	return s
}

// String lists the counts, most frequent first (then by kind, so that a listing reads the same each time).
func (f *failures) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.counts) == 0 {
		return "none"
	}
	keys := slices.SortedFunc(maps.Keys(f.counts), func(a, b string) int {
		return cmp.Or(cmp.Compare(f.counts[b], f.counts[a]), strings.Compare(a, b))
	})
	var lines []string
	for _, k := range keys {
		lines = append(lines, fmt.Sprintf("%d x %s", f.counts[k], k))
	}
	return strings.Join(lines, "; ")
}

type failureSink struct{ f *failures }

func (failureSink) Init(logr.RuntimeInfo)                   {}
func (failureSink) Enabled(int) bool                        { return false } // Info lines cost nothing
func (failureSink) Info(int, string, ...any)                {}
func (s failureSink) Error(err error, msg string, _ ...any) { s.f.add(err, msg) }
func (s failureSink) WithValues(...any) logr.LogSink        { return s }
func (s failureSink) WithName(string) logr.LogSink          { return s }
