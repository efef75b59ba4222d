package kubeclient

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/tlsfiles"
)

// testCA is a certificate authority that signs serving certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  string
}

var serial atomic.Int64

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))}
}

// serving is a server certificate the CA signs for the names and addresses given, valid until notAfter.
func (ca *testCA) serving(t testing.TB, notAfter time.Time, names ...string) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, name := range names {
		if ip := net.ParseIP(name); ip != nil {
			template.IPAddresses = append(template.IPAddresses, ip)
		} else {
			template.DNSNames = append(template.DNSNames, name)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// pemPair is cert and its key as PEM, as files and kubeconfigs hold them.
func (ca *testCA) pemPair(t testing.TB, cert *tls.Certificate) (certPEM, keyPEM string) {
	t.Helper()
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
}

// TestClientCertificateFilesRotation: the steps run in order, each on a new connection, with the files
// as the step leaves them; the server records the certificate each connection presented.
func TestClientCertificateFilesRotation(t *testing.T) {
	ca := newTestCA(t, "client CA")
	var presented atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		presented.Store(r.TLS.PeerCertificates[0].DNSNames[0])
	}))
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	srv.StartTLS()
	defer srv.Close()
	serverCA := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))

	dir := t.TempDir()
	pair := func(name string) (string, string) {
		return ca.pemPair(t, ca.serving(t, time.Now().Add(time.Hour), name))
	}
	certOne, keyOne := pair("one")
	writeFiles(t, dir, map[string]string{"client.crt": certOne, "client.key": keyOne})
	client, err := (&Config{Host: srv.URL, CAData: []byte(serverCA), CertFile: filepath.Join(dir, "client.crt"), KeyFile: filepath.Join(dir, "client.key")}).HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	certTwo, keyTwo := pair("two")
	certThree, keyThree := pair("three")
	steps := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{name: "the files' certificate is presented", want: "one"},
		{name: "renewed files are presented on the next connection", files: map[string]string{"client.crt": certTwo, "client.key": keyTwo}, want: "two"},
		{name: "a certificate whose key is not written yet keeps the last pair", files: map[string]string{"client.crt": certThree}, want: "two"},
		{name: "and its key completes the pair", files: map[string]string{"client.key": keyThree}, want: "three"},
	}
	for _, step := range steps {
		writeFiles(t, dir, step.files)
		client.CloseIdleConnections()
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		resp.Body.Close()
		if got := presented.Load(); got != step.want {
			t.Errorf("%s: presented %v, want %q", step.name, got, step.want)
		}
	}
}

// TestCAFileRotation runs a CA rotation against one client: the steps run in order, each on a new
// connection, with the server's certificate and the CA file as the step sets them.
func TestCAFileRotation(t *testing.T) {
	oldCA, newCA := newTestCA(t, "old cluster CA"), newTestCA(t, "new cluster CA")
	later := time.Now().Add(time.Hour)
	var serving atomic.Pointer[tls.Certificate]
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.EnableHTTP2 = true
	// Per connection, since a client that dials an IP address sends no server name for GetCertificate.
	srv.TLS = &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return &tls.Config{Certificates: []tls.Certificate{*serving.Load()}, NextProtos: []string{"h2", "http/1.1"}}, nil
	}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes below are expected
	srv.StartTLS()
	defer srv.Close()

	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, []byte(oldCA.pem), 0o600); err != nil {
		t.Fatal(err)
	}
	client, err := (&Config{Host: srv.URL, CAFile: caFile}).HTTPClient()
	if err != nil {
		t.Fatal(err)
	}

	const unchanged = "<unchanged>"
	steps := []struct {
		name    string
		file    string // the CA file's content for this step
		serves  *tls.Certificate
		wantErr string
	}{
		{name: "the file's CA verifies the server's certificate",
			file: oldCA.pem, serves: oldCA.serving(t, later, "127.0.0.1")},
		{name: "a certificate from a CA the file does not hold is refused",
			file: unchanged, serves: newCA.serving(t, later, "127.0.0.1"), wantErr: "certificate signed by unknown authority"},
		{name: "once the file gains the new CA, the next connection trusts it",
			file: oldCA.pem + newCA.pem, serves: newCA.serving(t, later, "127.0.0.1")},
		{name: "and still trusts the old one while the file holds both",
			file: unchanged, serves: oldCA.serving(t, later, "127.0.0.1")},
		{name: "a file being rewritten (empty for a moment) keeps the last CAs",
			file: "", serves: newCA.serving(t, later, "127.0.0.1")},
		{name: "a CA the file no longer holds is no longer trusted",
			file: newCA.pem, serves: oldCA.serving(t, later, "127.0.0.1"), wantErr: "certificate signed by unknown authority"},
		{name: "the server's address is still verified: a certificate for another name is refused",
			file: unchanged, serves: newCA.serving(t, later, "kubernetes.default.svc"), wantErr: "127.0.0.1"},
		{name: "an expired certificate is refused",
			file: unchanged, serves: newCA.serving(t, time.Now().Add(-time.Hour), "127.0.0.1"), wantErr: "expired"},
		{name: "after the failures, a good certificate is trusted again",
			file: unchanged, serves: newCA.serving(t, later, "127.0.0.1")},
	}
	for _, step := range steps {
		if step.file != unchanged {
			if err := os.WriteFile(caFile, []byte(step.file), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		serving.Store(step.serves)
		client.CloseIdleConnections()
		srv.CloseClientConnections()
		resp, err := client.Get(srv.URL)
		if err == nil {
			resp.Body.Close()
		}
		switch {
		case step.wantErr == "" && err != nil:
			t.Errorf("%s: GET error = %v", step.name, err)
		case step.wantErr != "" && err == nil:
			t.Errorf("%s: GET succeeded, want an error containing %q", step.name, step.wantErr)
		case step.wantErr != "" && !strings.Contains(err.Error(), step.wantErr):
			t.Errorf("%s: GET error = %v, want one containing %q", step.name, err, step.wantErr)
		}
	}
}

func TestCAFileMustHoldACertificateAtStart(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(garbage, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		config  Config
		wantErr string
	}{
		{name: "a CA file without PEM", config: Config{Host: "https://10.96.0.1", CAFile: garbage}, wantErr: "holds no PEM certificate"},
		{name: "a CA file that is missing", config: Config{Host: "https://10.96.0.1", CAFile: filepath.Join(dir, "missing")}, wantErr: "no such file"},
		{name: "a CA file and CA data", config: Config{Host: "https://10.96.0.1", CAFile: garbage, CAData: []byte("x")}, wantErr: "keep one"},
		{name: "a CA file with insecure-skip-tls-verify", config: Config{Host: "https://10.96.0.1", CAFile: garbage, Insecure: true}, wantErr: "insecure-skip-tls-verify"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.config.HTTPClient(); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("HTTPClient() error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// BenchmarkCAFileCheck is what a new connection pays for reading the CA file again: the unchanged case,
// a file read and a comparison.
func BenchmarkCAFileCheck(b *testing.B) {
	ca := newTestCA(b, "cluster CA")
	path := filepath.Join(b.TempDir(), "ca.crt")
	if err := os.WriteFile(path, []byte(ca.pem), 0o600); err != nil {
		b.Fatal(err)
	}
	roots, err := tlsfiles.NewRoots(path)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		roots.Current()
	}
}

// BenchmarkTLSHandshake is what a new connection pays anyway, for BenchmarkCAFileCheck to be read
// against: a TLS 1.3 handshake with an ECDSA P-256 certificate, over an in-memory pipe.
func BenchmarkTLSHandshake(b *testing.B) {
	ca := newTestCA(b, "cluster CA")
	cert := ca.serving(b, time.Now().Add(time.Hour), "127.0.0.1")
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	for b.Loop() {
		c, s := net.Pipe()
		server := tls.Server(s, &tls.Config{Certificates: []tls.Certificate{*cert}})
		go func() { _ = server.Handshake() }()
		if err := tls.Client(c, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}).Handshake(); err != nil {
			b.Fatal(err)
		}
		c.Close()
		s.Close()
	}
}
