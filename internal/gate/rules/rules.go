// Package rules is the mutation gate's pure rules: which requests mutate (Policy.Mutates, from the
// request's method, protocol, path, content type and method overrides) and the checks of the gate's
// settings, which the agent and the injector both apply. It has no proxy in it, so the webhook and the
// plugin check a pod's gate settings without linking the gate's forwarder.
package rules

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultMethods are the HTTP methods gated on followers: those that change state.
var DefaultMethods = []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// registeredMethods are the methods of the IANA HTTP Method Registry (RFC 9110 and the WebDAV family),
// the only names a gated-methods list may hold: a misspelt method ("POTS", "POST;DELETE") would gate
// nothing and let the method it meant pass a follower.
var registeredMethods = []string{
	"ACL", "BASELINE-CONTROL", "BIND", "CHECKIN", "CHECKOUT", "CONNECT", "COPY", "DELETE", "GET", "HEAD", "LABEL",
	"LINK", "LOCK", "MERGE", "MKACTIVITY", "MKCALENDAR", "MKCOL", "MKREDIRECTREF", "MKWORKSPACE", "MOVE", "OPTIONS",
	"ORDERPATCH", "PATCH", "POST", "PROPFIND", "PROPPATCH", "PUT", "QUERY", "REBIND", "REPORT", "SEARCH", "TRACE",
	"UNBIND", "UNCHECKOUT", "UNLINK", "UNLOCK", "UPDATE", "UPDATEREDIRECTREF", "VERSION-CONTROL",
}

// Policy says which requests mutate.
type Policy struct {
	// methods are the HTTP methods gated on followers, in capitals; a request's method matches in any
	// case, as several app stacks route "post" as POST.
	methods []string
	// grpcAll gates every gRPC method; otherwise grpcMethods ("/pkg.Service/Method") and grpcServices
	// ("/pkg.Service/") are.
	grpcAll      bool
	grpcMethods  map[string]bool
	grpcServices []string
}

// NewPolicy reads the gated HTTP methods and gRPC methods; see ParseMethods and ParseGRPCMethods.
func NewPolicy(methods, grpcMethods string) (Policy, error) {
	p := Policy{}
	var errs []error
	var err error
	if p.methods, err = ParseMethods(methods); err != nil {
		errs = append(errs, err)
	}
	if p.grpcAll, p.grpcMethods, p.grpcServices, err = parseGRPCMethods(grpcMethods); err != nil {
		errs = append(errs, err)
	}
	return p, errors.Join(errs...)
}

// ParseMethods reads a comma-separated list of HTTP methods to gate, such as "POST,PUT,PATCH,DELETE",
// in any case, and returns them in capitals. Each must be a registered HTTP method, and at least one
// must be named. The agent's LEASEGATE_GATE_METHODS and the injector's leasegate.io/gate-methods are
// both checked here.
func ParseMethods(s string) ([]string, error) {
	var methods []string
	var errs []error
	for _, m := range splitList(s) {
		upper := strings.ToUpper(m)
		switch {
		case strings.ContainsAny(m, "; \t|/"):
			errs = append(errs, fmt.Errorf("HTTP method %q: separate methods with commas, e.g. POST,PUT,PATCH,DELETE", m))
		case !slices.Contains(registeredMethods, upper):
			errs = append(errs, fmt.Errorf("HTTP method %q: not a registered HTTP method (check its spelling), e.g. POST,PUT,PATCH,DELETE", m))
		case !slices.Contains(methods, upper):
			methods = append(methods, upper)
		}
	}
	if len(methods) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("no HTTP method is gated: name at least one, e.g. POST,PUT,PATCH,DELETE"))
	}
	return methods, errors.Join(errs...)
}

// ParseGRPCMethods checks a comma-separated list of gRPC methods to gate: "*" for all (every gRPC call is
// a POST), or "/pkg.Service/Method" and "/pkg.Service/*".
func ParseGRPCMethods(s string) error {
	_, _, _, err := parseGRPCMethods(s)
	return err
}

func parseGRPCMethods(s string) (all bool, methods map[string]bool, services []string, err error) {
	methods = map[string]bool{}
	var errs []error
	for _, m := range splitList(s) {
		switch service, method, ok := strings.Cut(strings.TrimPrefix(m, "/"), "/"); {
		case m == "*":
			all = true
		case !strings.HasPrefix(m, "/") || !ok || service == "" || method == "" || strings.ContainsAny(method, "/;") || strings.ContainsAny(service, "; "):
			errs = append(errs, fmt.Errorf("gRPC method %q: write /package.Service/Method, /package.Service/* or *, separated by commas", m))
		case method == "*":
			services = append(services, "/"+service+"/")
		default:
			methods[m] = true
		}
	}
	if !all && len(methods) == 0 && len(services) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("no gRPC method is gated: write * for all, or name the mutating ones (/package.Service/Method)"))
	}
	return all, methods, services, errors.Join(errs...)
}

// CheckElection checks the election a gate follows against the elections its pod runs: with one
// election it may be empty (that one) or name it; with several it must name one of them.
func CheckElection(name string, elections []string) error {
	switch {
	case name == "" && len(elections) > 1:
		return fmt.Errorf("required: the pod runs several elections; name the one whose leader may mutate (one of %s)", strings.Join(elections, ", "))
	case name != "" && !slices.Contains(elections, name):
		return fmt.Errorf("no election %q: the pod runs %s", name, strings.Join(elections, ", "))
	}
	return nil
}

// CheckUpstream checks the app's address the gate forwards to: host:port, the port 1 to 65535.
func CheckUpstream(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return errors.New("want the app's host:port, such as 127.0.0.1:8080")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q: want a number from 1 to 65535, such as 127.0.0.1:8080", port)
	}
	return nil
}

// CheckListen checks the gate's listen address: [host]:port, the port 0 (any free one) to 65535.
func CheckListen(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("want [host]:port, such as :9441 or 127.0.0.1:9441")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q: want a number from 0 to 65535, such as :9441", port)
	}
	return nil
}

// DefaultBodyTimeout is how long a forwarded request's body may take to arrive, unless told otherwise.
const DefaultBodyTimeout = 10 * time.Second

// maxBodyTimeout bounds the body timeout: it is how long a follower's refusal of a mutation whose
// body is slow may be postponed, and how long a slow client may hold a connection to the gate.
const maxBodyTimeout = 10 * time.Minute

// CheckBodyTimeout checks how long a request's body may take to arrive: above 0, at most 10m.
func CheckBodyTimeout(d time.Duration) error {
	if d <= 0 || d > maxBodyTimeout {
		return fmt.Errorf("%s: want a duration above 0 and at most %s, such as %s", d, maxBodyTimeout, DefaultBodyTimeout)
	}
	return nil
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
	// ProtoMajor is the request's HTTP version: 1 or 2.
	ProtoMajor int
	// Header and RawQuery are read for method overrides (see Mutates); nil and "" when there are none.
	Header   http.Header
	RawQuery string
}

// RequestOf is what the decision looks at of r.
func RequestOf(r *http.Request) Request {
	return Request{Method: r.Method, Path: r.URL.Path, ContentType: r.Header.Get("Content-Type"), ProtoMajor: r.ProtoMajor, Header: r.Header, RawQuery: r.URL.RawQuery}
}

// IsGRPC reports whether the request is a gRPC call: an HTTP/2 POST whose content type is
// application/grpc (with any suffix, such as +proto). gRPC runs only over HTTP/2 and only as POST, so a
// request that claims the content type otherwise is not one, and the HTTP rules judge it.
func (r Request) IsGRPC() bool {
	return r.ProtoMajor == 2 && r.Method == http.MethodPost && strings.HasPrefix(r.ContentType, "application/grpc")
}

// overrideHeaders are the headers with which app stacks let a request ask to be handled as another
// method (Express's method-override, ASP.NET Core, Spring, Symfony, Laravel, Rack, Google's APIs, OData).
var overrideHeaders = [...]string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// overrideHeaderLengths marks the lengths of overrideHeaders, so most of a request's headers cost one
// look.
var overrideHeaderLengths = func() (lengths [32]bool) {
	for _, name := range overrideHeaders {
		lengths[len(name)] = true
	}
	return lengths
}()

// Mutates reports whether the request changes state, so that only the leader may serve it. A gRPC call
// is judged by its method against the gRPC list. Any other request mutates when its method mutates
// (mutatingMethod), or when it asks to be handled as a method that does: by an override header or by a
// _method query parameter, each read as every app stack that honours it may read it (see
// headerOverride and queryOverride). A request that asks to be handled as a read is still judged by its
// own method.
func (p Policy) Mutates(r Request) bool {
	if r.IsGRPC() {
		if p.grpcAll || p.grpcMethods[r.Path] {
			return true
		}
		return slices.ContainsFunc(p.grpcServices, func(prefix string) bool { return strings.HasPrefix(r.Path, prefix) })
	}
	if p.mutatingMethod(r.Method) {
		return true
	}
	return p.headerOverride(r.Header) || (r.RawQuery != "" && p.queryOverride(r.RawQuery))
}

// mutatingMethod reports whether method, in any case, is gated, or is no registered HTTP method at all:
// what an unregistered method does only the app knows, and no gated-methods list can name it, so a
// follower refuses it rather than pass it.
func (p Policy) mutatingMethod(method string) bool {
	return p.gated(method) || !registered(method)
}

// registered reports whether method, in any case, is in the IANA HTTP Method Registry.
func registered(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	return slices.ContainsFunc(registeredMethods, func(m string) bool { return strings.EqualFold(m, method) })
}

// gated reports whether method is one of the gated methods, in any case.
func (p Policy) gated(method string) bool {
	return slices.ContainsFunc(p.methods, func(m string) bool { return strings.EqualFold(m, method) })
}

// headerOverride reports whether an override header asks for a method that mutates. A header is one of
// overrideHeaders in any case and with '_' for '-' (Rack, WSGI and PHP read X_HTTP_METHOD_OVERRIDE as
// the same HTTP_X_HTTP_METHOD_OVERRIDE); every line of every such header counts, and every element of a
// comma-separated value (Express takes the first, others the whole value or the last line): a request
// mutates when any of them would.
func (p Policy) headerOverride(header http.Header) bool {
	for key, values := range header {
		if len(key) >= len(overrideHeaderLengths) || !overrideHeaderLengths[len(key)] || !isOverrideHeader(key) {
			continue
		}
		for _, value := range values {
			if p.overrideMutates(value) {
				return true
			}
		}
	}
	return false
}

func isOverrideHeader(key string) bool {
	for _, name := range overrideHeaders {
		if len(key) == len(name) && SameHeaderName(key, name) {
			return true
		}
	}
	return false
}

// overrideMutates reports whether an override's value names, in any of its comma-separated elements, a
// method that mutates (mutatingMethod: an unregistered one too). Empty elements name nothing.
func (p Policy) overrideMutates(value string) bool {
	for element := range strings.SplitSeq(value, ",") {
		if element = strings.Trim(element, " \t"); element != "" && p.mutatingMethod(element) {
			return true
		}
	}
	return false
}

// queryOverride reports whether the query has a _method parameter naming a method that mutates. The
// parameter's name is read as PHP reads it (Laravel, Symfony): in any case, with ' ', '.', '[' or '-'
// for '_', leading spaces dropped, and an array's _method[...] too; its value as overrideMutates reads
// a header's.
func (p Policy) queryOverride(query string) bool {
	for param := range strings.SplitSeq(query, "&") {
		if strings.ContainsAny(param, "%+") {
			// Percent-encoded letters or spaces, decoded as the app would: rarely taken.
			if decoded, err := url.QueryUnescape(param); err == nil {
				param = decoded
			}
		}
		key, value, _ := strings.Cut(param, "=")
		if isMethodParam(key) && p.overrideMutates(value) {
			return true
		}
	}
	return false
}

// isMethodParam reports whether a query parameter's name reads as _method to some app stack.
func isMethodParam(key string) bool {
	const name = "_method"
	key = strings.TrimLeft(key, " ")
	if len(key) < len(name) {
		return false
	}
	if rest := key[len(name):]; rest != "" && rest[0] != '[' {
		return false
	}
	switch key[0] {
	case '_', ' ', '.', '[', '-':
	default:
		return false
	}
	return strings.EqualFold(key[1:len(name)], name[1:])
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

// SameHeaderName compares header names of equal length in any case, '_' matching '-', as app stacks
// that read headers as variables (Rack, CGI) do.
func SameHeaderName(a, b string) bool {
	for i := range len(a) {
		if foldHeaderByte(a[i]) != foldHeaderByte(b[i]) {
			return false
		}
	}
	return true
}

func foldHeaderByte(c byte) byte {
	switch {
	case 'A' <= c && c <= 'Z':
		return c + 'a' - 'A'
	case c == '_':
		return '-'
	}
	return c
}
