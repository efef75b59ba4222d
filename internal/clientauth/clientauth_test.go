package clientauth

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// authority is a test CA that signs certificates.
type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

var serials int64

func newAuthority(t *testing.T) *authority {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serials++
	template := &x509.Certificate{
		SerialNumber: big.NewInt(serials), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &authority{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue signs a certificate for cn and dnsNames with usage.
func (a *authority) issue(t *testing.T, cn string, dnsNames []string, usage x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serials++
	template := &x509.Certificate{
		SerialNumber: big.NewInt(serials), Subject: pkix.Name{CommonName: cn}, DNSNames: dnsNames,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, a.cert, &key.PublicKey, a.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// handshake runs a TLS handshake between a server that v configures and a client presenting certs, and
// returns the server's error.
func handshake(t *testing.T, v *Verifier, serving tls.Certificate, certs ...tls.Certificate) error {
	t.Helper()
	serverConn, clientConn := net.Pipe()
	server := &tls.Config{Certificates: []tls.Certificate{serving}, MinVersion: tls.VersionTLS12}
	v.Configure(server)
	done := make(chan error, 1)
	go func() {
		client := tls.Client(clientConn, &tls.Config{InsecureSkipVerify: true, Certificates: certs})
		done <- client.Handshake()
		// TLS 1.3 ends the client's handshake before the server judged its certificate: read its verdict.
		_, _ = client.Read(make([]byte, 1))
		client.Close()
	}()
	err := tls.Server(serverConn, server).Handshake()
	serverConn.Close()
	<-done
	return err
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	// A Secret volume swaps a new file in by renaming: so does the test.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestVerify(t *testing.T) {
	ca, other := newAuthority(t), newAuthority(t)
	serving := other.issue(t, "leasegate-webhook", nil, x509.ExtKeyUsageServerAuth)
	apiServer := ca.issue(t, "kube-apiserver-webhook-client", nil, x509.ExtKeyUsageClientAuth)
	tests := []struct {
		name     string
		subjects []string
		certs    []tls.Certificate
		refusal  string
	}{
		{"the API server's certificate, any subject", nil, []tls.Certificate{apiServer}, ""},
		{"the API server's certificate, its common name listed", []string{"other", "kube-apiserver-webhook-client"}, []tls.Certificate{apiServer}, ""},
		{"a DNS name listed", []string{"apiserver.example"}, []tls.Certificate{ca.issue(t, "x", []string{"apiserver.example"}, x509.ExtKeyUsageClientAuth)}, ""},
		{"no certificate, as a pod's POST", nil, nil, "client didn't provide a certificate"},
		{"a certificate another CA signed", nil, []tls.Certificate{other.issue(t, "kube-apiserver-webhook-client", nil, x509.ExtKeyUsageClientAuth)}, "is not signed by the CA in --client-ca-path"},
		{"a certificate the CA signed for servers only", nil, []tls.Certificate{ca.issue(t, "kube-apiserver-webhook-client", nil, x509.ExtKeyUsageServerAuth)}, "for client use"},
		{"a subject not listed", []string{"kube-apiserver"}, []tls.Certificate{apiServer}, `are none of --client-subject-names=kube-apiserver`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ca.crt")
			writeFile(t, path, ca.pem)
			v, err := New(Options{Enabled: true, CAPath: path, SubjectNames: tt.subjects}, logr.Discard())
			if err != nil {
				t.Fatal(err)
			}
			err = handshake(t, v, serving, tt.certs...)
			switch {
			case tt.refusal == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.refusal != "" && (err == nil || !strings.Contains(err.Error(), tt.refusal)):
				t.Errorf("handshake error %v, want one containing %q", err, tt.refusal)
			}
		})
	}
}

func TestReadsTheCAAgainWhenItChanges(t *testing.T) {
	before, after := newAuthority(t), newAuthority(t)
	serving := before.issue(t, "leasegate-webhook", nil, x509.ExtKeyUsageServerAuth)
	signedBefore := before.issue(t, "apiserver", nil, x509.ExtKeyUsageClientAuth)
	signedAfter := after.issue(t, "apiserver", nil, x509.ExtKeyUsageClientAuth)
	path := filepath.Join(t.TempDir(), "ca.crt")
	writeFile(t, path, before.pem)
	v, err := New(Options{Enabled: true, CAPath: path}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name    string
		write   []byte
		cert    tls.Certificate
		refused bool
	}{
		{"the first CA's client", nil, signedBefore, false},
		{"the next CA's client, not yet trusted", nil, signedAfter, true},
		{"the next CA's client, on the first handshake after the file changed", after.pem, signedAfter, false},
		{"the first CA's client, no longer trusted", nil, signedBefore, true},
		{"a file without a certificate keeps the CA read before", []byte("half written"), signedAfter, false},
		{"both CAs during a rotation", append(append([]byte{}, before.pem...), after.pem...), signedBefore, false},
	}
	for _, s := range steps {
		if s.write != nil {
			writeFile(t, path, s.write)
		}
		err := handshake(t, v, serving, s.cert)
		if (err != nil) != s.refused {
			t.Errorf("%s: handshake error %v, want refused %v", s.name, err, s.refused)
		}
	}
}

func TestReadinessCheckIsAccepted(t *testing.T) {
	ca := newAuthority(t)
	path := filepath.Join(t.TempDir(), "ca.crt")
	writeFile(t, path, ca.pem)
	v, err := New(Options{Enabled: true, CAPath: path, SubjectNames: []string{"kube-apiserver"}}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, v, ca.issue(t, "leasegate-webhook", nil, x509.ExtKeyUsageServerAuth), v.self); err != nil {
		t.Errorf("the readiness check's own certificate was refused: %v", err)
	}
}

func TestNewRefusesWhatItCannotServeWith(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.crt")
	writeFile(t, empty, []byte("not a certificate"))
	ca := filepath.Join(dir, "ca.crt")
	writeFile(t, ca, newAuthority(t).pem)
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"no CA path", Options{Enabled: true}, "--client-ca-path is required with --enable-client-verification"},
		{"a CA path that does not exist", Options{Enabled: true, CAPath: filepath.Join(dir, "missing.crt")}, "reading the client CA --client-ca-path=" + filepath.Join(dir, "missing.crt")},
		{"a CA file without a certificate", Options{Enabled: true, CAPath: empty}, "no PEM certificate in it"},
		{"an empty subject name", Options{Enabled: true, CAPath: ca, SubjectNames: []string{"kube-apiserver", ""}}, "--client-subject-names=kube-apiserver,: an empty name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.opts, logr.Discard())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New() error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// A CA file rewritten in place within one tick of the file system's clock, to the same size, keeps its
// identity, modification time and size: only its content tells the change.
func TestReadsTheCAAgainWhenRewrittenInPlaceWithinOneTick(t *testing.T) {
	before, after := newAuthority(t), newAuthority(t)
	serving := before.issue(t, "leasegate-webhook", nil, x509.ExtKeyUsageServerAuth)
	size := max(len(before.pem), len(after.pem)) + 1
	padded := func(pem []byte) []byte {
		return append(append([]byte{}, pem...), bytes.Repeat([]byte("\n"), size-len(pem))...)
	}
	path := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(path, padded(before.pem), 0o600); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := New(Options{Enabled: true, CAPath: path}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, padded(after.pem), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, info.ModTime(), info.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, v, serving, after.issue(t, "apiserver", nil, x509.ExtKeyUsageClientAuth)); err != nil {
		t.Errorf("the next CA's client was refused after the file was rewritten in place: %v", err)
	}
	if err := handshake(t, v, serving, before.issue(t, "apiserver", nil, x509.ExtKeyUsageClientAuth)); err == nil {
		t.Error("the first CA's client is still trusted after the file was rewritten in place")
	}
}

// dialer is a client keeping one session cache across its connections, as the API server's transport
// does, so that its second connection offers to resume the first one's session.
type dialer struct {
	config *tls.Config
}

// dial connects to addr and returns whether the handshake resumed a session and the server's refusal,
// if any: the server writes one byte after a handshake it accepted.
func (d dialer) dial(t *testing.T, addr string) (resumed bool, err error) {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, d.config)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	// TLS 1.3 ends the client's handshake before the server judged it, and sends its ticket after.
	if _, err := conn.Read(make([]byte, 1)); err != nil {
		return conn.ConnectionState().DidResume, err
	}
	return conn.ConnectionState().DidResume, nil
}

// serve accepts on a loopback listener with one server config (so one set of session ticket keys, as a
// long-running webhook server has) and writes one byte on every handshake it accepts.
func serve(t *testing.T, config *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				server := tls.Server(conn, config)
				if server.Handshake() == nil {
					_, _ = server.Write([]byte{1})
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// A session resumed (a TLS 1.2 ticket, a TLS 1.3 PSK) is judged against the CA file as it is now: a
// client whose CA was removed is refused even though it holds a ticket from when it was trusted.
func TestResumedSessionIsJudgedAgain(t *testing.T) {
	for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		t.Run(tls.VersionName(version), func(t *testing.T) {
			before, after := newAuthority(t), newAuthority(t)
			serving := before.issue(t, "leasegate-webhook", nil, x509.ExtKeyUsageServerAuth)
			path := filepath.Join(t.TempDir(), "ca.crt")
			writeFile(t, path, before.pem)
			v, err := New(Options{Enabled: true, CAPath: path}, logr.Discard())
			if err != nil {
				t.Fatal(err)
			}
			server := &tls.Config{Certificates: []tls.Certificate{serving}, MinVersion: tls.VersionTLS12}
			v.Configure(server)
			addr := serve(t, server)
			client := dialer{&tls.Config{
				InsecureSkipVerify: true, MinVersion: version, MaxVersion: version,
				Certificates:       []tls.Certificate{before.issue(t, "apiserver", nil, x509.ExtKeyUsageClientAuth)},
				ClientSessionCache: tls.NewLRUClientSessionCache(8),
			}}
			if _, err := client.dial(t, addr); err != nil {
				t.Fatalf("the trusted client was refused: %v", err)
			}
			// The setup resumes: without that the test below would prove nothing.
			if resumed, err := client.dial(t, addr); err != nil || !resumed {
				t.Fatalf("the trusted client's second connection: resumed %v, error %v; want a resumed session", resumed, err)
			}
			writeFile(t, path, after.pem)
			for i := range 3 {
				if resumed, err := client.dial(t, addr); err == nil {
					t.Fatalf("connection %d after its CA was removed was accepted (resumed %v)", i, resumed)
				}
			}
		})
	}
}
