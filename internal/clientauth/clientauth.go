// Package clientauth verifies the client certificate the API server presents when it calls leasegate's
// webhooks (its AdmissionConfiguration's WebhookAdmission kubeconfig), so that only the API server's
// calls reach the handlers: a pod that POSTs an AdmissionReview of its own making is refused at the TLS
// handshake. The CA is read again on the first handshake after its file changed.
package clientauth

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// The flags that set Options, named as cert-manager's webhook names its own.
const (
	FlagEnable       = "enable-client-verification"
	FlagCAPath       = "client-ca-path"
	FlagSubjectNames = "client-subject-names"
)

// Options are the client verification flags.
type Options struct {
	// Enabled refuses every connection without a client certificate that CAPath's CA signed.
	Enabled bool
	// CAPath is a PEM file of the CAs that sign the API server's client certificate.
	CAPath string
	// SubjectNames, when set, are the only common names or DNS names the certificate may carry.
	SubjectNames []string
}

// Verifier checks client certificates against the CA file, reading it again when it changes.
type Verifier struct {
	path     string
	subjects []string
	log      logr.Logger
	// self is this process's own client certificate, made at start and never written anywhere: its
	// readiness check presents it, so the check's handshakes neither fail nor log.
	self tls.Certificate

	mu     sync.Mutex
	stamp  fileStamp
	pool   *x509.CertPool
	loaded bool
}

// fileStamp tells a changed file from the one read without reading it on every handshake. A Secret
// volume swaps its files in by renaming, which gives the file a new identity; a file rewritten in place
// keeps its modification time (and may keep its size) while the file system's clock has not ticked, so a
// file read less than racyWindow after it was modified is compared by content until it is older (git's
// "racily clean" rule).
type fileStamp struct {
	info   os.FileInfo
	readAt time.Time
	data   []byte
}

const racyWindow = time.Second

// unchanged says whether info is the file read, without reading it.
func (s fileStamp) unchanged(info os.FileInfo) bool {
	return s.info != nil && os.SameFile(s.info, info) && info.ModTime().Equal(s.info.ModTime()) &&
		info.Size() == s.info.Size() && s.readAt.Sub(info.ModTime()) > racyWindow
}

// New reads the CA file, refusing options it cannot serve with, each error naming its flag.
func New(opts Options, log logr.Logger) (*Verifier, error) {
	if opts.CAPath == "" {
		return nil, fmt.Errorf("--%s is required with --%s: the PEM file of the CA that signs the API server's client certificate", FlagCAPath, FlagEnable)
	}
	for _, name := range opts.SubjectNames {
		if strings.TrimSpace(name) == "" {
			return nil, fmt.Errorf("--%s=%s: an empty name; give comma-separated names without empty entries", FlagSubjectNames, strings.Join(opts.SubjectNames, ","))
		}
	}
	self, err := selfCertificate()
	if err != nil {
		return nil, fmt.Errorf("making the readiness check's client certificate: %w", err)
	}
	v := &Verifier{path: opts.CAPath, subjects: opts.SubjectNames, log: log, self: self}
	if _, err := v.currentPool(); err != nil {
		return nil, err
	}
	return v, nil
}

// Configure makes c refuse every handshake without a certificate the current CA signed for a client
// (and, with subject names, one of them).
//
// The check runs in VerifyConnection, which Go calls on every handshake, resumed ones included, with the
// certificates of the session being resumed; VerifyPeerCertificate runs on full handshakes only, so a
// client whose CA was removed could keep connecting by resuming a session (TLS 1.2 tickets or session
// IDs, TLS 1.3 PSKs) for as long as its ticket lived. A resumed session is judged against the CA file
// as it is now, exactly as a new one.
func (v *Verifier) Configure(c *tls.Config) {
	c.ClientAuth = tls.RequireAnyClientCert
	c.VerifyPeerCertificate = nil
	c.VerifyConnection = v.verifyConnection
}

func (v *Verifier) verifyConnection(state tls.ConnectionState) error {
	return v.verify(state.PeerCertificates)
}

func (v *Verifier) verify(certs []*x509.Certificate) error {
	if len(certs) == 0 {
		return errors.New("no client certificate")
	}
	if bytes.Equal(certs[0].Raw, v.self.Certificate[0]) {
		return nil
	}
	pool, err := v.currentPool()
	if err != nil {
		return err
	}
	intermediates := x509.NewCertPool()
	for _, cert := range certs[1:] {
		intermediates.AddCert(cert)
	}
	leaf := certs[0]
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots: pool, Intermediates: intermediates, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return fmt.Errorf("client certificate %q is not signed by the CA in --%s=%s for client use: %w", leaf.Subject.CommonName, FlagCAPath, v.path, err)
	}
	if len(v.subjects) == 0 || slices.Contains(v.subjects, leaf.Subject.CommonName) ||
		slices.ContainsFunc(leaf.DNSNames, func(name string) bool { return slices.Contains(v.subjects, name) }) {
		return nil
	}
	return fmt.Errorf("client certificate common name %q and DNS names %q are none of --%s=%s",
		leaf.Subject.CommonName, leaf.DNSNames, FlagSubjectNames, strings.Join(v.subjects, ","))
}

// currentPool is the CA pool, read again when the file has changed since it was read. A file that
// cannot be read or holds no certificate keeps the last good pool in force (a rotation writing it may
// be half done) and is tried again at the next handshake; at start it is an error.
func (v *Verifier) currentPool() (*x509.CertPool, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	info, err := os.Stat(v.path)
	if err == nil {
		if v.loaded && v.stamp.unchanged(info) {
			return v.pool, nil
		}
		var data []byte
		if data, err = os.ReadFile(v.path); err == nil {
			stamp := fileStamp{info: info, readAt: time.Now(), data: data}
			if v.loaded && bytes.Equal(data, v.stamp.data) {
				v.stamp = stamp
				return v.pool, nil
			}
			var pool *x509.CertPool
			if pool, err = parsePool(data); err == nil {
				if v.loaded {
					v.log.Info("Read the client CA again: it changed", "path", v.path)
				}
				v.pool, v.stamp, v.loaded = pool, stamp, true
				return pool, nil
			}
		}
	}
	err = fmt.Errorf("reading the client CA --%s=%s: %w", FlagCAPath, v.path, err)
	if !v.loaded {
		return nil, err
	}
	v.log.Error(err, "Keeping the client CA read before")
	return v.pool, nil
}

func parsePool(data []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, errors.New("no PEM certificate in it")
	}
	return pool, nil
}

// StartedChecker is a readiness check that completes a handshake with the server on port, as
// controller-runtime's StartedChecker does, presenting this process's own client certificate.
func (v *Verifier) StartedChecker(port int) func(*http.Request) error {
	config := &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{v.self}, MinVersion: tls.VersionTLS12}
	return func(*http.Request) error {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", net.JoinHostPort("", fmt.Sprint(port)), config)
		if err != nil {
			return fmt.Errorf("webhook server is not reachable: %w", err)
		}
		return conn.Close()
	}
}

// selfCertificate is a self-signed client certificate whose key lives only in this process.
func selfCertificate() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, err
	}
	template := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "leasegate-webhook readiness check"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(100, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
