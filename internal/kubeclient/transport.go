package kubeclient

import (
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

	"github.com/leasegate/leasegate/internal/tlsfiles"
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
		roots, err := tlsfiles.NewRoots(c.CAFile)
		switch {
		case errors.Is(err, tlsfiles.ErrNoCertificate):
			return nil, fmt.Errorf("the CA file %s (certificate-authority) holds no PEM certificate", c.CAFile)
		case err != nil:
			return nil, fmt.Errorf("the CA (certificate-authority): %w", err)
		}
		// The file is read again at each handshake, so the first connection after a CA rotation trusts
		// the new CA. The handshake's own verification is replaced, not skipped: VerifyConnection checks
		// the chain against the file's CAs of the moment and the server's name, on every new and resumed
		// connection, as crypto/tls would check RootCAs.
		config.InsecureSkipVerify = true
		config.VerifyConnection = roots.Verifier(name)
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
		// Read again at each handshake, so a certificate renewed in place is used from the next connection.
		cert, err := newFileCertificate(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, err
		}
		config.GetClientCertificate = cert.Get
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

// newFileCertificate reads a client certificate and key kept in files, naming the kubeconfig's fields in
// its errors.
func newFileCertificate(certPath, keyPath string) (*tlsfiles.Certificate, error) {
	if certPath == "" || keyPath == "" {
		return nil, errors.New("a client certificate file without its key file, or a key without its certificate (client-certificate, client-key): set both")
	}
	for _, file := range []struct{ field, path string }{{"client-certificate", certPath}, {"client-key", keyPath}} {
		if _, err := os.Stat(file.path); err != nil {
			return nil, fmt.Errorf("%s: %w", file.field, err)
		}
	}
	cert, err := tlsfiles.NewCertificate(certPath, keyPath)
	if err != nil {
		return nil, fmt.Errorf("the client certificate and key (client-certificate %s, client-key %s): %w", certPath, keyPath, err)
	}
	return cert, nil
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
