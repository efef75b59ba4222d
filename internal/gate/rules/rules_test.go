package rules

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestPolicyMutates(t *testing.T) {
	p, err := NewPolicy("POST,PUT,PATCH,DELETE", "/orders.Orders/Create, /orders.Admin/*")
	if err != nil {
		t.Fatal(err)
	}
	all, err := NewPolicy("POST", "*")
	if err != nil {
		t.Fatal(err)
	}
	// noPost gates no POST: the app uses POST for searches, so only an override can make one mutate.
	noPost, err := NewPolicy("put,patch,delete", "*")
	if err != nil {
		t.Fatal(err)
	}
	const grpc = "application/grpc"
	tests := []struct {
		name   string
		policy Policy
		req    Request
		want   bool
	}{
		{"GET reads", p, Request{Method: "GET", Path: "/orders", ProtoMajor: 1}, false},
		{"HEAD reads", p, Request{Method: "HEAD", Path: "/orders", ProtoMajor: 1}, false},
		{"OPTIONS reads", p, Request{Method: "OPTIONS", Path: "/orders", ProtoMajor: 1}, false},
		{"POST mutates", p, Request{Method: "POST", Path: "/orders", ProtoMajor: 1}, true},
		{"PUT mutates", p, Request{Method: "PUT", Path: "/orders/1", ProtoMajor: 1}, true},
		{"PATCH mutates", p, Request{Method: "PATCH", Path: "/orders/1", ProtoMajor: 1}, true},
		{"DELETE mutates", p, Request{Method: "DELETE", Path: "/orders/1", ProtoMajor: 1}, true},
		{"post in lower case mutates, as app stacks that fold case route it", p, Request{Method: "post", Path: "/orders", ProtoMajor: 1}, true},
		{"Delete in mixed case mutates", p, Request{Method: "Delete", Path: "/orders/1", ProtoMajor: 2}, true},
		{"a method listed in lower case matches its capitals", noPost, Request{Method: "DELETE", Path: "/orders/1", ProtoMajor: 1}, true},
		{"an ungated POST reads", noPost, Request{Method: "POST", Path: "/search", ProtoMajor: 1}, false},
		{"an ungated POST with X-HTTP-Method-Override: DELETE mutates", noPost,
			Request{Method: "POST", Path: "/orders/1", ProtoMajor: 1, Header: http.Header{"X-Http-Method-Override": {"DELETE"}}}, true},
		{"a GET with X-HTTP-Method: delete mutates", noPost,
			Request{Method: "GET", Path: "/orders/1", ProtoMajor: 1, Header: http.Header{"X-Http-Method": {" delete "}}}, true},
		{"a GET with X-Method-Override: PUT mutates", noPost,
			Request{Method: "GET", Path: "/orders/1", ProtoMajor: 1, Header: http.Header{"X-Method-Override": {"PUT"}}}, true},
		{"an override to a read leaves a gated method gated", p,
			Request{Method: "POST", Path: "/orders", ProtoMajor: 1, Header: http.Header{"X-Http-Method-Override": {"GET"}}}, true},
		{"an ungated POST with ?_method=DELETE mutates", noPost, Request{Method: "POST", Path: "/orders/1", ProtoMajor: 1, RawQuery: "x=1&_method=DELETE"}, true},
		{"?_method=patch in lower case mutates", noPost, Request{Method: "POST", Path: "/orders/1", ProtoMajor: 1, RawQuery: "_method=patch"}, true},
		{"?_method percent-encoded mutates", noPost, Request{Method: "POST", Path: "/orders/1", ProtoMajor: 1, RawQuery: "%5Fmethod=%44ELETE"}, true},
		{"?_method=GET reads", noPost, Request{Method: "POST", Path: "/search", ProtoMajor: 1, RawQuery: "_method=GET&q=1"}, false},
		{"a query parameter that only ends in _method reads", noPost, Request{Method: "POST", Path: "/search", ProtoMajor: 1, RawQuery: "x_method=DELETE"}, false},
		// Override headers as the app stacks read them: any case, '_' for '-', every line, every element.
		{"X_HTTP_METHOD_OVERRIDE, which Rack reads as the same variable, mutates", noPost,
			Request{Method: "POST", Path: "/orders/1", ProtoMajor: 1, Header: http.Header{"X_http_method_override": {"DELETE"}}}, true},
		{"X_HTTP_METHOD in HTTP/2's lower case mutates", noPost,
			Request{Method: "POST", Path: "/orders/1", ProtoMajor: 2, Header: http.Header{"x_http_method": {"delete"}}}, true},
		{"X-Method_Override, mixed, mutates", noPost,
			Request{Method: "GET", Path: "/orders/1", ProtoMajor: 1, Header: http.Header{"X-Method_override": {"PUT"}}}, true},
		{"a list whose first element mutates (Express takes the first)", noPost,
			Request{Method: "POST", Path: "/orders/1", ProtoMajor: 1, Header: http.Header{"X-Http-Method-Override": {"DELETE, GET"}}}, true},
		{"a list whose last element mutates", noPost,
			Request{Method: "POST", Path: "/orders/1", ProtoMajor: 1, Header: http.Header{"X-Http-Method-Override": {"GET,\tDELETE"}}}, true},
		{"a second header line that mutates", noPost,
			Request{Method: "POST", Path: "/orders/1", ProtoMajor: 1, Header: http.Header{"X-Http-Method-Override": {"GET", "PATCH"}}}, true},
		{"the same header spelt twice, the underscore one mutating", noPost,
			Request{Method: "POST", Path: "/orders/1", ProtoMajor: 1, Header: http.Header{"X-Http-Method-Override": {"GET"}, "X_http_method_override": {"PUT"}}}, true},
		{"an override to an unregistered method mutates", noPost,
			Request{Method: "POST", Path: "/orders/1", ProtoMajor: 1, Header: http.Header{"X-Http-Method": {"PURGE"}}}, true},
		{"an override list of reads reads", noPost,
			Request{Method: "POST", Path: "/search", ProtoMajor: 1, Header: http.Header{"X-Http-Method-Override": {"GET, head", ""}, "X_method_override": {" , "}}}, false},
		{"a header that only resembles an override reads", noPost,
			Request{Method: "POST", Path: "/search", ProtoMajor: 1, Header: http.Header{"X-Http-Method-Overrides": {"DELETE"}, "Y-Http-Method": {"DELETE"}}}, false},
		{"?_method=GET,DELETE mutates", noPost, Request{Method: "POST", Path: "/orders/1", ProtoMajor: 1, RawQuery: "_method=GET,DELETE"}, true},
		{"?_method twice, the second mutating", noPost, Request{Method: "POST", Path: "/orders/1", ProtoMajor: 1, RawQuery: "_method=GET&_method=DELETE"}, true},
		{"?.method, which PHP reads as _method, mutates", noPost, Request{Method: "POST", Path: "/orders/1", ProtoMajor: 1, RawQuery: ".method=DELETE"}, true},
		{"?+_method (a leading space, which PHP drops) mutates", noPost, Request{Method: "POST", Path: "/orders/1", ProtoMajor: 1, RawQuery: "+_method=DELETE"}, true},
		{"?_METHOD mutates", noPost, Request{Method: "POST", Path: "/orders/1", ProtoMajor: 1, RawQuery: "_METHOD=put"}, true},
		{"?_method[]=DELETE, a PHP array, mutates", noPost, Request{Method: "POST", Path: "/orders/1", ProtoMajor: 1, RawQuery: "_method%5B%5D=DELETE"}, true},
		{"?_method=PURGE, unregistered, mutates", noPost, Request{Method: "POST", Path: "/orders/1", ProtoMajor: 1, RawQuery: "_method=PURGE"}, true},
		{"?_methods=DELETE reads", noPost, Request{Method: "POST", Path: "/search", ProtoMajor: 1, RawQuery: "_methods=DELETE"}, false},
		// Methods: a registered one not gated reads; an unregistered one cannot be listed, so it mutates.
		{"an unregistered method mutates", p, Request{Method: "PURGE", Path: "/cache", ProtoMajor: 1}, true},
		{"an unregistered method in lower case mutates", p, Request{Method: "frobnicate", Path: "/orders/1", ProtoMajor: 2}, true},
		{"a registered method not gated reads", p, Request{Method: "PROPFIND", Path: "/files", ProtoMajor: 1}, false},
		{"a registered method in lower case reads", p, Request{Method: "get", Path: "/orders", ProtoMajor: 1}, false},
		{"a listed gRPC method mutates", p, Request{Method: "POST", Path: "/orders.Orders/Create", ContentType: grpc, ProtoMajor: 2}, true},
		{"an unlisted gRPC method reads, though every gRPC call is a POST", p, Request{Method: "POST", Path: "/orders.Orders/Get", ContentType: grpc + "+proto", ProtoMajor: 2}, false},
		{"a gRPC service listed with /* mutates in every method", p, Request{Method: "POST", Path: "/orders.Admin/Reset", ContentType: grpc, ProtoMajor: 2}, true},
		{"gRPC * gates every method", all, Request{Method: "POST", Path: "/grpc.health.v1.Health/Check", ContentType: grpc, ProtoMajor: 2}, true},
		{"a REST POST over HTTP/1.1 that claims gRPC is judged by the HTTP rules", p, Request{Method: "POST", Path: "/orders", ContentType: grpc, ProtoMajor: 1}, true},
		{"an HTTP/2 PUT that claims gRPC is judged by the HTTP rules", p, Request{Method: "PUT", Path: "/orders/1", ContentType: grpc, ProtoMajor: 2}, true},
		{"an HTTP/2 post in lower case that claims gRPC is judged by the HTTP rules", p, Request{Method: "post", Path: "/orders.Orders/Get", ContentType: grpc, ProtoMajor: 2}, true},
		{"an HTTP/1.1 GET that claims gRPC reads", p, Request{Method: "GET", Path: "/orders", ContentType: grpc, ProtoMajor: 1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.policy.Mutates(tt.req); got != tt.want {
				t.Errorf("Mutates(%+v) = %v, want %v", tt.req, got, tt.want)
			}
		})
	}
}

func TestNewPolicyErrors(t *testing.T) {
	tests := []struct{ name, methods, grpc, want string }{
		{"methods separated by semicolons", "POST;DELETE", "*", `HTTP method "POST;DELETE": separate methods with commas`},
		{"methods separated by spaces", "POST DELETE", "*", `HTTP method "POST DELETE": separate methods with commas`},
		{"a misspelt method", "POST,DELET", "*", `HTTP method "DELET": not a registered HTTP method (check its spelling)`},
		{"no method at all", " , ", "*", "no HTTP method is gated"},
		{"a gRPC method without its service", "POST", "Create", `gRPC method "Create": write /package.Service/Method, /package.Service/* or *`},
		{"a gRPC path too deep", "POST", "/a.B/C/D", `gRPC method "/a.B/C/D"`},
		{"gRPC methods separated by semicolons", "POST", "/a.B/C;/a.B/D", `gRPC method "/a.B/C;/a.B/D"`},
		{"no gRPC method at all", "POST", " , ", "no gRPC method is gated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewPolicy(tt.methods, tt.grpc); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewPolicy(%q, %q) = %v, want %q", tt.methods, tt.grpc, err, tt.want)
			}
		})
	}
}

func TestChecks(t *testing.T) {
	tests := []struct {
		name, want string
		err        error
	}{
		{"an upstream port above 65535", `port "99999": want a number from 1 to 65535`, CheckUpstream("127.0.0.1:99999")},
		{"an upstream port 0", `port "0": want a number from 1 to 65535`, CheckUpstream("127.0.0.1:0")},
		{"an upstream without a host", "want the app's host:port", CheckUpstream(":8080")},
		{"an upstream without a port", "want the app's host:port", CheckUpstream("8080")},
		{"a good upstream", "", CheckUpstream("127.0.0.1:8080")},
		{"a listen port that is not a number", `port "notaport": want a number from 0 to 65535`, CheckListen("127.0.0.1:notaport")},
		{"a listen address without a port", "want [host]:port", CheckListen("127.0.0.1")},
		{"listening on any free port", "", CheckListen("127.0.0.1:0")},
		{"a body timeout of 0", "want a duration above 0 and at most 10m0s", CheckBodyTimeout(0)},
		{"a body timeout of an hour", "want a duration above 0 and at most 10m0s", CheckBodyTimeout(time.Hour)},
		{"a good body timeout", "", CheckBodyTimeout(30 * time.Second)},
		{"no election named with one", "", CheckElection("", []string{"orders"})},
		{"the one election named", "", CheckElection("orders", []string{"orders"})},
		{"an unknown election", `no election "nope": the pod runs orders`, CheckElection("nope", []string{"orders"})},
		{"no election named with several", "required: the pod runs several elections; name the one whose leader may mutate (one of reader, writer)", CheckElection("", []string{"reader", "writer"})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			switch {
			case tt.want == "" && tt.err != nil:
				t.Errorf("got %v, want no error", tt.err)
			case tt.want != "" && (tt.err == nil || !strings.Contains(tt.err.Error(), tt.want)):
				t.Errorf("got %v, want %q", tt.err, tt.want)
			}
		})
	}
}
