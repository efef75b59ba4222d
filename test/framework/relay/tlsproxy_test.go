package relay

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/leasegate/leasegate/test/framework/certs"
)

func TestTLSProxyServesItsCertificateAndRelaysTheProtocol(t *testing.T) {
	upstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Proto+" "+r.Header.Get("Authorization"))
	}))
	upstream.EnableHTTP2 = true
	upstream.StartTLS()
	defer upstream.Close()
	upstreamCA := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: upstream.Certificate().Raw})

	oldCA, err := certs.NewCA("old")
	if err != nil {
		t.Fatal(err)
	}
	newCA, err := certs.NewCA("new")
	if err != nil {
		t.Fatal(err)
	}
	oldCert, err := oldCA.ServingCertificate()
	if err != nil {
		t.Fatal(err)
	}
	newCert, err := newCA.ServingCertificate()
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := StartTLSProxy(upstream.Listener.Addr().String(), upstreamCA, oldCert)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()

	get := func(trusted *certs.CA, http2 bool) (string, error) {
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(trusted.PEM)
		transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: http2}
		defer transport.CloseIdleConnections()
		req, _ := http.NewRequest(http.MethodGet, "https://"+proxy.Addr, nil)
		req.Header.Set("Authorization", "Bearer t")
		resp, err := transport.RoundTrip(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return string(body), err
	}
	for _, tc := range []struct {
		http2 bool
		want  string
	}{{true, "HTTP/2.0 Bearer t"}, {false, "HTTP/1.1 Bearer t"}} {
		if got, err := get(oldCA, tc.http2); err != nil || got != tc.want {
			t.Errorf("through the proxy: %q, %v; want %q", got, err, tc.want)
		}
	}
	proxy.Serve(newCert)
	proxy.CutConnections()
	if _, err := get(oldCA, true); err == nil {
		t.Error("a client trusting the old CA connected after the proxy served the new CA's certificate")
	}
	if got, err := get(newCA, true); err != nil || got != "HTTP/2.0 Bearer t" {
		t.Errorf("a client trusting the new CA: %q, %v", got, err)
	}
}
