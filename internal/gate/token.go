package gate

import (
	"net/http"
	"strconv"

	"github.com/leasegate/leasegate/internal/contract"
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

// dropForgedToken removes every header a client sent that the app could read as the fencing token, so
// only the gate's reaches it: contract.FencingTokenHeader in any case, and with '_' for '-', which CGI-style
// servers (Rack, WSGI, PHP) read as the same variable, HTTP_LEASEGATE_FENCING_TOKEN.
func dropForgedToken(header http.Header) {
	const name = contract.FencingTokenHeader
	for key := range header {
		if len(key) == len(name) && sameHeaderName(key, name) {
			delete(header, key)
		}
	}
}

// sameHeaderName compares header names of equal length in any case, '_' matching '-'.
func sameHeaderName(a, b string) bool {
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
