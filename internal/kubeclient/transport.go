package kubeclient

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// tokenRereadInterval is how long a token read from BearerTokenFile is used before the file is read again:
// the kubelet rotates a projected token well before it expires (at 80% of its life, an hour at least), so
// a minute-old token is always still valid, and requests do not each read a file.
const tokenRereadInterval = time.Minute

// HTTPClient is an HTTP client for the config, set up as client-go sets up its own: TLS 1.2 at least,
// HTTP/2 with connection health checks (a connection whose peer vanished without a FIN is pinged after
// 30s of silence and dropped 15s later, so a watch on it does not hang for the kernel's TCP timeout),
// proxies from the environment, and the bearer token and user agent on every request. It has no overall
// Timeout because watches are long; callers bound requests with contexts.
func (c *Config) HTTPClient() (*http.Client, error) {
	base, err := c.transport()
	if err != nil {
		return nil, err
	}
	var rt http.RoundTripper = base
	if c.BearerToken != "" || c.BearerTokenFile != "" || c.UserAgent != "" {
		auth := &authTransport{next: base, token: c.BearerToken, userAgent: c.UserAgent}
		if c.BearerTokenFile != "" {
			auth.tokenFile = &fileToken{path: c.BearerTokenFile, every: tokenRereadInterval, now: time.Now}
		}
		rt = auth
	}
	return &http.Client{Transport: rt}, nil
}

// transport is the connection layer: TLS, HTTP/2, dialing and proxies, with client-go's numbers.
func (c *Config) transport() (*http.Transport, error) {
	tlsConfig, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         dialer.DialContext,
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: 10 * time.Second,
		IdleConnTimeout:     90 * time.Second,
		MaxIdleConnsPerHost: 25,
		// A custom dialer and TLS config turn HTTP/2 off unless asked for.
		ForceAttemptHTTP2: true,
		// SendPingTimeout is golang.org/x/net/http2's ReadIdleTimeout, which client-go sets to 30s.
		HTTP2: &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second},
	}, nil
}

func (c *Config) tlsConfig() (*tls.Config, error) {
	config := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         c.ServerName,
		InsecureSkipVerify: c.Insecure,
	}
	if c.CAFile != "" && len(c.CAData) > 0 {
		return nil, errors.New("both a CA file (certificate-authority) and CA data (certificate-authority-data): keep one")
	}
	if c.Insecure && (len(c.CAData) > 0 || c.CAFile != "") {
		// As client-go: a CA that would silently go unused is a mistake in the config.
		return nil, errors.New("a CA (certificate-authority) with insecure-skip-tls-verify: keep one")
	}
	switch {
	case c.CAFile != "":
		name, err := c.verifiedName()
		if err != nil {
			return nil, err
		}
		roots, err := newFileRoots(c.CAFile)
		if err != nil {
			return nil, err
		}
		// The handshake's own verification is replaced, not skipped: VerifyConnection checks the chain
		// against the file's CAs of the moment and the server's name, on every new and resumed
		// connection, as crypto/tls would check RootCAs.
		config.InsecureSkipVerify = true
		config.VerifyConnection = roots.verifier(name)
	case len(c.CAData) > 0:
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(c.CAData) {
			return nil, errors.New("the CA (certificate-authority) holds no PEM certificate")
		}
		config.RootCAs = pool
	}
	if c.CertFile != "" || c.KeyFile != "" {
		if len(c.CertData) > 0 || len(c.KeyData) > 0 {
			return nil, errors.New("a client certificate both in files and as data (client-certificate, client-key): keep one")
		}
		cert, err := newFileCertificate(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, err
		}
		config.GetClientCertificate = cert.get
	}
	if len(c.CertData) > 0 || len(c.KeyData) > 0 {
		cert, err := tls.X509KeyPair(c.CertData, c.KeyData)
		if err != nil {
			return nil, fmt.Errorf("the client certificate and key (client-certificate, client-key): %w", err)
		}
		config.Certificates = []tls.Certificate{cert}
	}
	return config, nil
}

// verifiedName is the name the server's certificate must carry: ServerName, or else the host Host names
// (an IP address for the in-cluster service), as net/http would verify it.
func (c *Config) verifiedName() (string, error) {
	if c.ServerName != "" {
		return c.ServerName, nil
	}
	u, err := serverURL(c.Host)
	if err != nil {
		return "", err
	}
	return u.Hostname(), nil
}

// fileRoots are the CAs in a file that is rotated in place: the kubelet rewrites a pod's ca.crt when the
// cluster's CA bundle changes (a CA rotation first adds the new CA, then the API server serves a
// certificate it signed). The file is read again at each new connection's handshake, and parsed again
// only when its content changed, so the first connection after a rotation trusts the new CA; client-go
// re-reads it every 5 minutes, so its new connections fail for up to that long. A handshake already
// costs a round trip and public-key operations, and connections are made once and kept; reading a file of
// a few KiB beside that is not worth caching by time.
type fileRoots struct {
	path string

	mu    sync.Mutex
	data  []byte // the content roots was parsed from
	roots *x509.CertPool
}

func newFileRoots(path string) (*fileRoots, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("the CA (certificate-authority): %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("the CA file %s (certificate-authority) holds no PEM certificate", path)
	}
	return &fileRoots{path: path, data: data, roots: roots}, nil
}

// current is the pool of the file's CAs now. A file that cannot be read or holds no certificate (being
// rewritten, or emptied by mistake) keeps the last good pool: trusting nothing would cut the agent off
// the API server, while the last CAs were trusted a moment ago.
func (f *fileRoots) current() *x509.CertPool {
	data, err := os.ReadFile(f.path)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil || bytes.Equal(data, f.data) {
		return f.roots
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(data) {
		return f.roots
	}
	f.data, f.roots = data, roots
	return roots
}

// verifier checks a server's certificate chain against the file's current CAs and name, as crypto/tls
// checks it against RootCAs and ServerName (TLS 1.2 and up, the server-auth usage, the validity period).
// The name is fixed: the connection state's ServerName is the SNI sent, which is empty for an IP address.
func (f *fileRoots) verifier(name string) func(tls.ConnectionState) error {
	return func(state tls.ConnectionState) error {
		certs := state.PeerCertificates
		if len(certs) == 0 {
			return errors.New("tls: the server sent no certificate")
		}
		opts := x509.VerifyOptions{Roots: f.current(), DNSName: name, Intermediates: x509.NewCertPool()}
		for _, cert := range certs[1:] {
			opts.Intermediates.AddCert(cert)
		}
		if _, err := certs[0].Verify(opts); err != nil {
			return &tls.CertificateVerificationError{UnverifiedCertificates: certs, Err: err}
		}
		return nil
	}
}

// fileCertificate is a client certificate and key in files that are renewed in place (by cert-manager's
// csi-driver, a sidecar, a person): read again at each new connection's handshake, and parsed again only
// when either changed, as fileRoots reads the CA. client-go reads such files again every 5 minutes. A
// pair that cannot be read or does not match (one file written, the other not yet) keeps the last good
// certificate.
type fileCertificate struct {
	certPath, keyPath string

	mu        sync.Mutex
	certData  []byte
	keyData   []byte
	certified *tls.Certificate
}

func newFileCertificate(certPath, keyPath string) (*fileCertificate, error) {
	if certPath == "" || keyPath == "" {
		return nil, errors.New("a client certificate file without its key file, or a key without its certificate (client-certificate, client-key): set both")
	}
	certData, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("client-certificate: %w", err)
	}
	keyData, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("client-key: %w", err)
	}
	cert, err := tls.X509KeyPair(certData, keyData)
	if err != nil {
		return nil, fmt.Errorf("the client certificate and key (client-certificate %s, client-key %s): %w", certPath, keyPath, err)
	}
	return &fileCertificate{certPath: certPath, keyPath: keyPath, certData: certData, keyData: keyData, certified: &cert}, nil
}

func (f *fileCertificate) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	certData, certErr := os.ReadFile(f.certPath)
	keyData, keyErr := os.ReadFile(f.keyPath)
	f.mu.Lock()
	defer f.mu.Unlock()
	if certErr != nil || keyErr != nil || (bytes.Equal(certData, f.certData) && bytes.Equal(keyData, f.keyData)) {
		return f.certified, nil
	}
	cert, err := tls.X509KeyPair(certData, keyData)
	if err != nil {
		return f.certified, nil
	}
	f.certData, f.keyData, f.certified = certData, keyData, &cert
	return f.certified, nil
}

// authTransport sets the Authorization and User-Agent headers on a copy of each request, leaving ones the
// caller set alone (as client-go's round trippers do).
type authTransport struct {
	next      http.RoundTripper
	token     string
	tokenFile *fileToken // wins over token when set
	userAgent string
}

func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	token := t.token
	var sent time.Time
	if t.tokenFile != nil {
		sent = t.tokenFile.now()
		var err error
		if token, err = t.tokenFile.get(); err != nil {
			// A RoundTripper closes the body even when it sends nothing.
			if req.Body != nil {
				req.Body.Close()
			}
			return nil, err
		}
	}
	// A RoundTripper must not modify the caller's request.
	req = req.Clone(req.Context())
	if token != "" && req.Header.Get("Authorization") == "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if t.userAgent != "" && req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", t.userAgent)
	}
	resp, err := t.next.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusUnauthorized && t.tokenFile != nil {
		t.tokenFile.expireReadBefore(sent)
	}
	return resp, err
}

// fileToken is a token file read at most once every interval. A failed re-read keeps the last good token,
// which outlives the rotation by far, rather than failing requests; only a failed first read is an
// error, and the file is read again on the next request.
type fileToken struct {
	path  string
	every time.Duration
	now   func() time.Time

	mu     sync.Mutex
	token  string // "" until a read succeeds
	readAt time.Time
}

func (f *fileToken) get() (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if f.token != "" && now.Sub(f.readAt) < f.every {
		return f.token, nil
	}
	token, err := readToken(f.path)
	if err != nil {
		if f.token == "" {
			return "", err
		}
		return f.token, nil
	}
	f.token, f.readAt = token, now
	return token, nil
}

// expireReadBefore makes the next request read the file again if the token was read before t: the API
// server refused a token this old (401), which happens when the file was rotated within the interval and
// the old token was revoked (its pod or secret deleted, the signing key rotated). A token read since t
// was read after the refused request went out and is kept, so refusals do not turn into a file read per
// request. As client-go's token sources (ResetTokenOlderThan); the last good token is still the
// fallback should the read fail.
func (f *fileToken) expireReadBefore(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.readAt.Before(t) {
		f.readAt = time.Time{}
	}
}

// readToken is the token in a file, without the newline editors leave; an empty file is an error, so that
// no request goes out unauthenticated by accident.
func readToken(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("the token file %s is empty", path)
	}
	return token, nil
}
