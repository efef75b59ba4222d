// Package gate is the agent's mutation gate: a reverse proxy in front of the app's port, inside the pod,
// that passes every request while this pod leads and, on a follower, answers mutations itself (HTTP 503
// with Retry-After, gRPC UNAVAILABLE) while reads still reach the app. So an app gets "only the leader
// acts" for its API without a line of code, and readiness stays about health.
//
// The decision (Policy.Decide) is a pure function of the request's method, path and content type; the
// proxy around it reads leadership per request from the elector, so mutations stop at the same instant
// /leader says the pod no longer leads.
package gate

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// DefaultMethods are the HTTP methods gated on followers: those that change state.
var DefaultMethods = []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// Policy says which requests mutate.
type Policy struct {
	// methods are the HTTP methods gated on followers.
	methods map[string]bool
	// grpcAll gates every gRPC method; otherwise grpcMethods ("/pkg.Service/Method") and grpcServices
	// ("/pkg.Service/") are.
	grpcAll      bool
	grpcMethods  map[string]bool
	grpcServices []string
}

// NewPolicy reads the gated HTTP methods (comma-separated, e.g. "POST,PUT,PATCH,DELETE") and gRPC methods
// ("*" for all, since every gRPC call is a POST; or "/pkg.Service/Method" and "/pkg.Service/*").
func NewPolicy(methods, grpcMethods string) (Policy, error) {
	p := Policy{methods: map[string]bool{}, grpcMethods: map[string]bool{}}
	var errs []error
	for _, m := range splitList(methods) {
		if m != strings.ToUpper(m) || strings.ContainsAny(m, "/* ") {
			errs = append(errs, fmt.Errorf("HTTP method %q: write methods in capitals, e.g. POST,PUT,PATCH,DELETE", m))
			continue
		}
		p.methods[m] = true
	}
	if len(p.methods) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("no HTTP method is gated: name at least one, e.g. POST,PUT,PATCH,DELETE"))
	}
	for _, m := range splitList(grpcMethods) {
		switch service, method, ok := strings.Cut(strings.TrimPrefix(m, "/"), "/"); {
		case m == "*":
			p.grpcAll = true
		case !strings.HasPrefix(m, "/") || !ok || service == "" || method == "" || strings.Contains(method, "/"):
			errs = append(errs, fmt.Errorf("gRPC method %q: write /package.Service/Method, /package.Service/* or *", m))
		case method == "*":
			p.grpcServices = append(p.grpcServices, "/"+service+"/")
		default:
			p.grpcMethods[m] = true
		}
	}
	return p, errors.Join(errs...)
}

func splitList(s string) []string {
	var items []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			items = append(items, item)
		}
	}
	return items
}

// Request is what the decision looks at.
type Request struct {
	Method, Path, ContentType string
}

// IsGRPC reports whether the request is a gRPC call: its content type is application/grpc (with any
// suffix, such as +proto).
func (r Request) IsGRPC() bool {
	return strings.HasPrefix(r.ContentType, "application/grpc")
}

// Mutates reports whether the request changes state, so that only the leader may serve it.
func (p Policy) Mutates(r Request) bool {
	if r.IsGRPC() {
		if p.grpcAll || p.grpcMethods[r.Path] {
			return true
		}
		return slices.ContainsFunc(p.grpcServices, func(prefix string) bool { return strings.HasPrefix(r.Path, prefix) })
	}
	return p.methods[r.Method]
}

// RetryAfter is the Retry-After a follower answers with: the seconds until the lease could change hands
// (its expiry as this pod judges it), rounded up, at least 1. A released or unknown lease could change
// hands at once: 1.
func RetryAfter(expiresAt, now time.Time) int {
	if expiresAt.IsZero() {
		return 1
	}
	seconds := int((expiresAt.Sub(now) + time.Second - 1) / time.Second)
	return max(seconds, 1)
}
