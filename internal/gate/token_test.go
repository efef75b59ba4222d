package gate

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/gate/rules"
)

// TestGatePassesTheFencingToken: the app gets the gate's fencing token on every mutation it forwards on
// the leader, by either path (the forwarder, or ReverseProxy for a body too large to forward whole), and
// never a client's, in any spelling an app server would read as it.
func TestGatePassesTheFencingToken(t *testing.T) {
	app, _ := echoApp(t, nil)
	l := &leadership{}
	l.leading.Store(true)
	policy, _ := rules.NewPolicy("POST,PUT,PATCH,DELETE", "*")
	g, err := New(app, policy, l, prometheus.NewRegistry(), rules.DefaultBodyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	gate := h2cServer(t, g)
	forged := http.Header{"Leasegate-Fencing-Token": {"99"}, "Leasegate_fencing_token": {"98"}, "LEASEGATE_FENCING_TOKEN": {"97"}}
	for _, tc := range []struct {
		name, method, body string
		want               []string
	}{
		{"a mutation forwarded whole", http.MethodPost, `{"item":1}`, []string{"7"}},
		{"a mutation whose body streams", http.MethodPut, strings.Repeat("x", maxForwardedBody+1), []string{"7"}},
		{"a read", http.MethodGet, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, gate.URL+"/orders", strings.NewReader(tc.body))
			for key, values := range forged {
				req.Header[key] = values
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var got received
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatal(err)
			}
			var tokens []string
			for key, values := range got.Header {
				if rules.SameHeaderName(strings.ToLower(key), strings.ToLower(contract.FencingTokenHeader)) && len(key) == len(contract.FencingTokenHeader) {
					tokens = append(tokens, key+": "+strings.Join(values, ","))
				}
			}
			var want []string
			for _, v := range tc.want {
				want = append(want, contract.FencingTokenHeader+": "+v)
			}
			if strings.Join(tokens, ";") != strings.Join(want, ";") {
				t.Errorf("the app got %q, want %q", tokens, want)
			}
		})
	}
}

// TestClientCannotStripTheFencingToken: a mutation whose Connection header names the token header (in
// any case, among other names) reaches the app with the gate's token, by every path: the forwarder,
// ReverseProxy for a streamed body, and ReverseProxy for a request that asks to upgrade. Hop-by-hop
// removal runs before the stamp on each.
func TestClientCannotStripTheFencingToken(t *testing.T) {
	app, _ := echoApp(t, nil)
	l := &leadership{}
	l.leading.Store(true)
	policy, _ := rules.NewPolicy("POST,PUT,PATCH,DELETE", "*")
	g, err := New(app, policy, l, prometheus.NewRegistry(), rules.DefaultBodyTimeout)
	if err != nil {
		t.Fatal(err)
	}
	gate := h2cServer(t, g)
	paths := []struct {
		name, method, body string
		header             http.Header
	}{
		{"forwarded whole", http.MethodPost, `{"item":1}`, nil},
		{"streamed", http.MethodPut, strings.Repeat("x", maxForwardedBody+1), nil},
		{"of unknown length, streamed", http.MethodPatch, "", http.Header{"Transfer-Encoding": {"chunked"}}},
		{"asking to upgrade", http.MethodPost, `{"item":1}`, http.Header{"Upgrade": {"websocket"}}},
	}
	connections := []string{
		"Leasegate-Fencing-Token",
		"leasegate-fencing-token",
		"keep-alive, LEASEGATE-FENCING-TOKEN",
		"Leasegate_Fencing_Token",
	}
	for _, path := range paths {
		for _, connection := range connections {
			t.Run(path.name+"/Connection: "+connection, func(t *testing.T) {
				var body io.Reader = strings.NewReader(path.body)
				if path.header["Transfer-Encoding"] != nil {
					body = io.MultiReader(strings.NewReader(`{"item":`), strings.NewReader(`1}`))
				}
				req, _ := http.NewRequest(path.method, gate.URL+"/orders", body)
				for key, values := range path.header {
					if key != "Transfer-Encoding" {
						req.Header[key] = values
					}
				}
				req.Header["Connection"] = []string{connection}
				if path.header["Upgrade"] != nil {
					req.Header["Connection"] = []string{"Upgrade, " + connection}
				}
				req.Header[contract.FencingTokenHeader] = []string{"99"}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				got := decodeReceived(t, resp)
				if tokens := got.Header[contract.FencingTokenHeader]; len(tokens) != 1 || tokens[0] != "7" {
					t.Errorf("the app got %s %q, want the gate's 7 (its headers: %v)", contract.FencingTokenHeader, tokens, got.Header)
				}
			})
		}
	}
}

// BenchmarkStampToken is the gate's per-request cost of the token: dropping a client's and setting its
// own on a mutation, on a request with a browser's dozen headers.
func BenchmarkStampToken(b *testing.B) {
	g := &Gate{}
	header := http.Header{}
	for _, key := range []string{"Accept", "Accept-Encoding", "Accept-Language", "Authorization", "Cache-Control", "Content-Length",
		"Content-Type", "Cookie", "Origin", "Referer", "User-Agent", "X-Request-Id"} {
		header[key] = []string{"x"}
	}
	b.ReportAllocs()
	for b.Loop() {
		dropClientGateHeaders(header)
		g.stampToken(header, 42)
	}
}
