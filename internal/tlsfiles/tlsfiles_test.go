package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/leasegate/leasegate/test/framework/certs"
)

// The verifier judges a server's certificate against the CAs in the file as it is at each call, and by
// the names given: valid for one of them, or refused.
func TestRootsVerifier(t *testing.T) {
	first, err := certs.NewCA("first")
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := certs.NewCA("rotated")
	if err != nil {
		t.Fatal(err)
	}
	leafOf := func(ca *certs.CA) tls.ConnectionState {
		served, err := ca.ServingCertificate() // for 127.0.0.1 and localhost
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(served.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
	}
	path := filepath.Join(t.TempDir(), "ca.crt")
	write := func(data []byte) {
		t.Helper()
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(first.PEM)
	roots, err := NewRoots(path)
	if err != nil {
		t.Fatal(err)
	}

	steps := []struct {
		name   string
		change func()
		state  tls.ConnectionState
		names  []string
		ok     bool
	}{
		{"a certificate of the file's CA, for the name", func() {}, leafOf(first), []string{"127.0.0.1"}, true},
		{"for one of several names", func() {}, leafOf(first), []string{"etcd-0.example", "localhost"}, true},
		{"for none of the names", func() {}, leafOf(first), []string{"etcd-0.example"}, false},
		{"no name to check it for", func() {}, leafOf(first), nil, false},
		{"no certificate at all", func() {}, tls.ConnectionState{}, []string{"127.0.0.1"}, false},
		{"a CA not yet in the file", func() {}, leafOf(rotated), []string{"127.0.0.1"}, false},
		{"the file rotated to the new CA", func() { write(rotated.PEM) }, leafOf(rotated), []string{"127.0.0.1"}, true},
		{"the old CA no longer trusted", func() {}, leafOf(first), []string{"127.0.0.1"}, false},
		{"a file emptied by mistake keeps the last good CAs", func() { write(nil) }, leafOf(rotated), []string{"127.0.0.1"}, true},
		{"a file gone keeps them too", func() { _ = os.Remove(path) }, leafOf(rotated), []string{"127.0.0.1"}, true},
	}
	for _, step := range steps {
		step.change()
		if err := roots.Verifier(step.names...)(step.state); (err == nil) != step.ok {
			t.Errorf("%s: error %v, want accepted %v", step.name, err, step.ok)
		}
	}
}

func TestNewRootsNamesWhatIsWrong(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.crt")
	if err := os.WriteFile(garbage, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewRoots(garbage); !errors.Is(err, ErrNoCertificate) {
		t.Errorf("a file without PEM: error %v, want ErrNoCertificate", err)
	}
	if _, err := NewRoots(filepath.Join(dir, "missing.crt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: error %v, want it not to exist", err)
	}
}

// The pair is read again at each call: a renewed pair is returned, a half-written one keeps the last good.
func TestCertificateGet(t *testing.T) {
	dir := t.TempDir()
	first, err := certs.WriteClientCertificate(dir, "first", "first")
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := certs.WriteClientCertificate(dir, "renewed", "renewed")
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	install := func(path, from string) {
		t.Helper()
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	install(certPath, first.CertFile)
	install(keyPath, first.KeyFile)
	cert, err := NewCertificate(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewCertificate(certPath, renewed.KeyFile); err == nil {
		t.Error("a certificate with another's key was read")
	}
	presented := func() string {
		t.Helper()
		c, err := cert.Get(nil)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.Subject.CommonName
	}
	steps := []struct {
		name   string
		change func()
		want   string
	}{
		{"the pair read at start", func() {}, "first"},
		{"half written: the new certificate, the old key", func() { install(certPath, renewed.CertFile) }, "first"},
		{"renewed: both written", func() { install(keyPath, renewed.KeyFile) }, "renewed"},
		{"the files gone", func() { _ = os.Remove(certPath) }, "renewed"},
	}
	for _, step := range steps {
		step.change()
		if got := presented(); got != step.want {
			t.Errorf("%s: presents %q, want %q", step.name, got, step.want)
		}
	}
}
