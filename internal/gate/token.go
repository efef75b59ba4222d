package gate

import (
	"net/http"
	"strconv"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/gate/rules"
)

// fencingToken is a term's fencing token as the header value the gate sends, formatted once per term.
type fencingToken struct {
	token int64
	value []string
}

// stampToken sets the fencing token of the term in which this pod leads (and passes the mutation whose
// header this is) as contract.FencingTokenHeader. The value is formatted on the first mutation of a term
// and shared by the rest, which nothing appends to (its capacity is 1), so a mutation costs no allocation.
func (g *Gate) stampToken(header http.Header, token int64) {
	t := g.token.Load()
	if t == nil || t.token != token {
		t = &fencingToken{token: token, value: []string{strconv.FormatInt(token, 10)}}
		g.token.Store(t)
	}
	header[contract.FencingTokenHeader] = t.value
}

// gateHeaders are the request headers the gate itself sets toward the app: the fencing token, and
// X-Forwarded-For/-Host/-Proto (Forwarded, the standard form, is dropped as ReverseProxy does). The app may
// trust what arrives under these names, so no client's copy may reach it.
var gateHeaders = [...]string{contract.FencingTokenHeader, "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}

// gateHeaderLengths marks the lengths of gateHeaders, so most of a request's headers cost one look.
var gateHeaderLengths = func() (lengths [32]bool) {
	for _, name := range gateHeaders {
		lengths[len(name)] = true
	}
	return lengths
}()

// dropClientGateHeaders removes every header a client sent that the app could read as one of
// gateHeaders: in any case, and with '_' for '-', which CGI-style servers (Rack, WSGI, PHP) read as the
// same variable (HTTP_X_FORWARDED_FOR): otherwise a client's X_Forwarded_For would sit beside the gate's
// and one of them, the app's choice, would win. A request pays one length check per header it carries.
func dropClientGateHeaders(header http.Header) {
	for key := range header {
		if len(key) >= len(gateHeaderLengths) || !gateHeaderLengths[len(key)] {
			continue
		}
		for _, name := range gateHeaders {
			if len(key) == len(name) && rules.SameHeaderName(key, name) {
				delete(header, key)
				break
			}
		}
	}
}
