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
	if len(c.CAData) > 0 {
		if c.Insecure {
			// As client-go: a CA that would silently go unused is a mistake in the config.
			return nil, errors.New("a CA (certificate-authority) with insecure-skip-tls-verify: keep one")
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(c.CAData) {
			return nil, errors.New("the CA (certificate-authority) holds no PEM certificate")
		}
		config.RootCAs = pool
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
	if t.tokenFile != nil {
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
	return t.next.RoundTrip(req)
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
