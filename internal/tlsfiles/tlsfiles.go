// Package tlsfiles is TLS material kept in files that are renewed in place, read again at each new
// connection's handshake: a CA bundle (the kubelet rewrites a pod's ca.crt when the cluster's CA bundle
// changes) and a client certificate with its key (cert-manager renews a Secret's tls.crt and tls.key,
// and the kubelet updates the mounted files). Each file is parsed again only when its content changed, and
// a file that cannot be read or does not parse (being rewritten) keeps the last good value: trusting
// nothing, or presenting nothing, would cut the process off its server, while the last material was
// good a moment ago.
//
// client-go reads such files again every 5 minutes, so its new connections fail for up to that long after
// a rotation; etcd's client reads them once. A handshake already costs a round trip and public-key
// operations, and connections are made once and kept: reading a few KiB beside that is not worth caching
// by time (BenchmarkCAFileCheck against BenchmarkTLSHandshake in internal/kubeclient).
package tlsfiles

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
)

// ErrNoCertificate says a CA file holds no PEM certificate.
var ErrNoCertificate = errors.New("holds no PEM certificate")

// Roots are the CAs in a file.
type Roots struct {
	path string

	mu    sync.Mutex
	data  []byte // the content roots was parsed from
	roots *x509.CertPool
}

// NewRoots reads the CAs in the file at path. It fails if the file cannot be read, or with
// ErrNoCertificate if it holds none.
func NewRoots(path string) (*Roots, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s %w", path, ErrNoCertificate)
	}
	return &Roots{path: path, data: data, roots: roots}, nil
}

// Current is the pool of the file's CAs now.
func (r *Roots) Current() *x509.CertPool {
	data, err := os.ReadFile(r.path)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil || bytes.Equal(data, r.data) {
		return r.roots
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(data) {
		return r.roots
	}
	r.data, r.roots = data, roots
	return roots
}

// Verifier checks a server's certificate chain against the file's current CAs, as crypto/tls checks it
// against RootCAs (the server-auth usage, the validity period), and that the server's certificate is
// valid for one of names (DNS names or IP addresses, as ServerName would be). Set it as VerifyConnection
// with InsecureSkipVerify: the handshake's own verification is replaced, not skipped, and VerifyConnection
// runs on resumed connections too. The names are fixed by the caller because the connection state's
// ServerName is the SNI sent, which is empty for an IP address.
func (r *Roots) Verifier(names ...string) func(tls.ConnectionState) error {
	return func(state tls.ConnectionState) error {
		certs := state.PeerCertificates
		if len(certs) == 0 {
			return errors.New("tls: the server sent no certificate")
		}
		opts := x509.VerifyOptions{Roots: r.Current(), Intermediates: x509.NewCertPool()}
		for _, cert := range certs[1:] {
			opts.Intermediates.AddCert(cert)
		}
		if _, err := certs[0].Verify(opts); err != nil {
			return &tls.CertificateVerificationError{UnverifiedCertificates: certs, Err: err}
		}
		var errs []error
		for _, name := range names {
			err := certs[0].VerifyHostname(name)
			if err == nil {
				return nil
			}
			errs = append(errs, err)
		}
		if len(errs) == 0 {
			errs = append(errs, errors.New("no name to verify the certificate for"))
		}
		return &tls.CertificateVerificationError{UnverifiedCertificates: certs, Err: errors.Join(errs...)}
	}
}

// Certificate is a client certificate and its key, in two files.
type Certificate struct {
	certPath, keyPath string

	mu        sync.Mutex
	certData  []byte
	keyData   []byte
	certified *tls.Certificate
}

// NewCertificate reads the certificate at certPath and the key at keyPath; they must match.
func NewCertificate(certPath, keyPath string) (*Certificate, error) {
	certData, err := os.ReadFile(certPath)
	if err != nil {
		return nil, err
	}
	keyData, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certData, keyData)
	if err != nil {
		return nil, err
	}
	return &Certificate{certPath: certPath, keyPath: keyPath, certData: certData, keyData: keyData, certified: &cert}, nil
}

// Get is the certificate in the files now, for tls.Config's GetClientCertificate. A pair that cannot be
// read or does not match (one file written, the other not yet) keeps the last good certificate.
func (c *Certificate) Get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	certData, certErr := os.ReadFile(c.certPath)
	keyData, keyErr := os.ReadFile(c.keyPath)
	c.mu.Lock()
	defer c.mu.Unlock()
	if certErr != nil || keyErr != nil || (bytes.Equal(certData, c.certData) && bytes.Equal(keyData, c.keyData)) {
		return c.certified, nil
	}
	cert, err := tls.X509KeyPair(certData, keyData)
	if err != nil {
		return c.certified, nil
	}
	c.certData, c.keyData, c.certified = certData, keyData, &cert
	return c.certified, nil
}
