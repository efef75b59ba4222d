package kubeclient

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// writeFiles writes files (paths relative to dir) into dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// kubeconfigFor is a kubeconfig whose current context "dev" joins cluster "kind" and user "alice", with
// the given lines (YAML "key: value") under each.
func kubeconfigFor(cluster, user string) string {
	indent := func(lines string) string {
		return "    " + strings.ReplaceAll(strings.TrimSpace(lines), "\n", "\n    ")
	}
	return `apiVersion: v1
kind: Config
current-context: dev
contexts:
- name: dev
  context: {cluster: kind, user: alice, namespace: shop}
clusters:
- name: kind
  cluster:
` + indent(cluster) + `
users:
- name: alice
  user:
` + indent(user) + "\n"
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestLoadKubeconfig(t *testing.T) {
	ca := newTestCA(t, "client CA")
	clientCert, clientKey := ca.pemPair(t, ca.serving(t, time.Now().Add(time.Hour), "alice"))
	_, otherKey := ca.pemPair(t, ca.serving(t, time.Now().Add(time.Hour), "bob"))
	// The kubeconfig is written to <dir>/kube/config, so relative paths resolve against <dir>/kube; "{dir}"
	// in a kubeconfig is replaced by <dir>.
	tests := []struct {
		name       string
		kubeconfig string
		files      map[string]string
		want       func(dir string) *Config
		wantErr    []string // each must appear in the error
	}{
		{
			name: "inline data is decoded from base64",
			kubeconfig: kubeconfigFor(`
server: https://10.0.0.1:6443
certificate-authority-data: `+b64("ca pem")+`
tls-server-name: kubernetes.default.svc`, `
token: s3cret
client-certificate-data: `+b64("cert pem")+`
client-key-data: `+b64("key pem")),
			want: func(string) *Config {
				return &Config{
					Host: "https://10.0.0.1:6443", CAData: []byte("ca pem"), ServerName: "kubernetes.default.svc",
					BearerToken: "s3cret", CertData: []byte("cert pem"), KeyData: []byte("key pem"),
				}
			},
		},
		{
			name: "relative file paths resolve against the kubeconfig's directory, absolute ones are kept; files are kept as paths, to be re-read as they rotate",
			kubeconfig: kubeconfigFor(`
server: https://10.0.0.1:6443
certificate-authority: ca.crt`, `
client-certificate: ../certs/client.crt
client-key: {dir}/certs/client.key`),
			files: map[string]string{"kube/ca.crt": "ca from file", "certs/client.crt": clientCert, "certs/client.key": clientKey},
			want: func(dir string) *Config {
				return &Config{
					Host: "https://10.0.0.1:6443", CAFile: filepath.Join(dir, "kube", "ca.crt"),
					CertFile: filepath.Join(dir, "certs", "client.crt"), KeyFile: filepath.Join(dir, "certs", "client.key"),
				}
			},
		},
		{
			name: "a certificate file beside key data is read once",
			kubeconfig: kubeconfigFor(`server: https://10.0.0.1:6443`, `
client-certificate: client.crt
client-key-data: `+b64(clientKey)),
			files: map[string]string{"kube/client.crt": clientCert},
			want: func(string) *Config {
				return &Config{Host: "https://10.0.0.1:6443", CertData: []byte(clientCert), KeyData: []byte(clientKey)}
			},
		},
		{
			name: "a certificate file and a key file that do not match",
			kubeconfig: kubeconfigFor(`server: https://10.0.0.1:6443`, `
client-certificate: client.crt
client-key: other.key`),
			files:   map[string]string{"kube/client.crt": clientCert, "kube/other.key": otherKey},
			wantErr: []string{`user "alice"`, "client-certificate", "client-key"},
		},
		{
			name:       "a tokenFile is kept as a path, resolved, to be re-read as it rotates",
			kubeconfig: kubeconfigFor(`server: https://10.0.0.1:6443`, "token: static\ntokenFile: token"),
			want: func(dir string) *Config {
				return &Config{Host: "https://10.0.0.1:6443", BearerToken: "static", BearerTokenFile: filepath.Join(dir, "kube", "token")}
			},
		},
		{
			name:       "insecure-skip-tls-verify is carried over",
			kubeconfig: kubeconfigFor("server: https://10.0.0.1:6443\ninsecure-skip-tls-verify: true", `token: s3cret`),
			want: func(string) *Config {
				return &Config{Host: "https://10.0.0.1:6443", Insecure: true, BearerToken: "s3cret"}
			},
		},
		{
			name:       "no current-context",
			kubeconfig: strings.Replace(kubeconfigFor(`server: https://10.0.0.1:6443`, `token: s3cret`), "current-context: dev", "", 1),
			wantErr:    []string{"no current-context", "kubectl config use-context"},
		},
		{
			name:       "current-context names no context",
			kubeconfig: strings.Replace(kubeconfigFor(`server: https://10.0.0.1:6443`, `token: s3cret`), "current-context: dev", "current-context: prod", 1),
			wantErr:    []string{`current-context "prod"`, "no context"},
		},
		{
			name:       "the context's cluster is missing",
			kubeconfig: strings.Replace(kubeconfigFor(`server: https://10.0.0.1:6443`, `token: s3cret`), "cluster: kind,", "cluster: gone,", 1),
			wantErr:    []string{`context "dev"`, `no cluster named "gone"`},
		},
		{
			name:       "the context's user is missing",
			kubeconfig: strings.Replace(kubeconfigFor(`server: https://10.0.0.1:6443`, `token: s3cret`), "user: alice,", "user: gone,", 1),
			wantErr:    []string{`context "dev"`, `no user named "gone"`},
		},
		{
			name:       "the cluster has no server",
			kubeconfig: kubeconfigFor(`tls-server-name: x`, `token: s3cret`),
			wantErr:    []string{`cluster "kind"`, "no server"},
		},
		{
			name: "an exec user is refused, naming the user and what the agent needs",
			kubeconfig: kubeconfigFor(`server: https://10.0.0.1:6443`, `
exec:
  apiVersion: client.authentication.k8s.io/v1
  command: aws`),
			wantErr: []string{`user "alice"`, "exec", "needs a token", "client certificate"},
		},
		{
			name:       "an auth-provider user is refused",
			kubeconfig: kubeconfigFor(`server: https://10.0.0.1:6443`, "auth-provider:\n  name: oidc"),
			wantErr:    []string{`user "alice"`, "auth-provider", "needs a token"},
		},
		{
			name:       "a username and password are refused",
			kubeconfig: kubeconfigFor(`server: https://10.0.0.1:6443`, "username: admin\npassword: hunter2"),
			wantErr:    []string{`user "alice"`, "username and password", "needs a token"},
		},
		{
			name:       "impersonation is refused rather than ignored",
			kubeconfig: kubeconfigFor(`server: https://10.0.0.1:6443`, "token: s3cret\nas: bob"),
			wantErr:    []string{`user "alice"`, "impersonation"},
		},
		{
			name:       "a proxy-url is refused rather than ignored",
			kubeconfig: kubeconfigFor("server: https://10.0.0.1:6443\nproxy-url: http://proxy:3128", `token: s3cret`),
			wantErr:    []string{`cluster "kind"`, "proxy-url", "HTTPS_PROXY"},
		},
		{
			name:       "bad base64 in certificate-authority-data names the field",
			kubeconfig: kubeconfigFor("server: https://10.0.0.1:6443\ncertificate-authority-data: not*base64", `token: s3cret`),
			wantErr:    []string{`cluster "kind"`, "certificate-authority-data is not base64"},
		},
		{
			name:       "bad base64 in client-key-data names the field",
			kubeconfig: kubeconfigFor(`server: https://10.0.0.1:6443`, "client-certificate-data: "+b64("cert")+"\nclient-key-data: not*base64"),
			wantErr:    []string{`user "alice"`, "client-key-data is not base64"},
		},
		{
			name:       "a missing certificate-authority file names the field and the path",
			kubeconfig: kubeconfigFor("server: https://10.0.0.1:6443\ncertificate-authority: missing.crt", `token: s3cret`),
			wantErr:    []string{`cluster "kind"`, "certificate-authority", filepath.Join("kube", "missing.crt")},
		},
		{
			name:       "a file and inline data for the same field are refused, as kubectl does",
			kubeconfig: kubeconfigFor("server: https://10.0.0.1:6443\ncertificate-authority: ca.crt\ncertificate-authority-data: "+b64("ca"), `token: s3cret`),
			files:      map[string]string{"kube/ca.crt": "ca"},
			wantErr:    []string{"both certificate-authority and certificate-authority-data"},
		},
		{
			name:       "a client certificate without its key",
			kubeconfig: kubeconfigFor(`server: https://10.0.0.1:6443`, "client-certificate-data: "+b64("cert")),
			wantErr:    []string{`user "alice"`, "client-certificate without client-key"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, tt.files)
			path := filepath.Join(dir, "kube", "config")
			writeFiles(t, dir, map[string]string{"kube/config": strings.ReplaceAll(tt.kubeconfig, "{dir}", dir)})

			got, err := LoadKubeconfig(path)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("LoadKubeconfig() = %+v, want an error containing %q", got, tt.wantErr)
				}
				for _, want := range tt.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("LoadKubeconfig() error = %q, want it to contain %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("LoadKubeconfig() error = %v", err)
			}
			if want := tt.want(dir); !reflect.DeepEqual(got, want) {
				t.Errorf("LoadKubeconfig() =\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func TestInCluster(t *testing.T) {
	serviceAccount := map[string]string{"token": "pod-token\n", "ca.crt": "cluster ca"}
	tests := []struct {
		name     string
		env      map[string]string
		files    map[string]string
		wantHost string
		wantErr  []string
	}{
		{
			name:     "an IPv4 service host",
			env:      map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"},
			files:    serviceAccount,
			wantHost: "https://10.96.0.1:443",
		},
		{
			name:     "an IPv6 service host is bracketed",
			env:      map[string]string{"KUBERNETES_SERVICE_HOST": "fd00:10:96::1", "KUBERNETES_SERVICE_PORT": "443"},
			files:    serviceAccount,
			wantHost: "https://[fd00:10:96::1]:443",
		},
		{
			name:    "no KUBERNETES_SERVICE_HOST: not in a cluster, in client-go's words",
			env:     map[string]string{"KUBERNETES_SERVICE_PORT": "443"},
			files:   serviceAccount,
			wantErr: []string{"unable to load in-cluster configuration, KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be defined"},
		},
		{
			name:    "no KUBERNETES_SERVICE_PORT",
			env:     map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1"},
			files:   serviceAccount,
			wantErr: []string{"KUBERNETES_SERVICE_PORT must be defined"},
		},
		{
			name:    "no token mounted names the token file",
			env:     map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"},
			files:   map[string]string{"ca.crt": "cluster ca"},
			wantErr: []string{"service account token", "token", "automountServiceAccountToken"},
		},
		{
			name:    "an empty token file is as good as none",
			env:     map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"},
			files:   map[string]string{"token": "\n", "ca.crt": "cluster ca"},
			wantErr: []string{"service account token", "is empty"},
		},
		{
			name:    "no CA mounted names ca.crt",
			env:     map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"},
			files:   map[string]string{"token": "pod-token"},
			wantErr: []string{"CA", "ca.crt"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, tt.files)
			got, err := inCluster(func(key string) string { return tt.env[key] }, dir)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("inCluster() = %+v, want an error", got)
				}
				for _, want := range tt.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("inCluster() error = %q, want it to contain %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("inCluster() error = %v", err)
			}
			want := &Config{Host: tt.wantHost, CAFile: filepath.Join(dir, "ca.crt"), BearerTokenFile: filepath.Join(dir, "token")}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("inCluster() =\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func TestFileTokenRereadsAtMostOnceAnInterval(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	tokens := &fileToken{path: path, every: time.Minute, now: func() time.Time { return now }}

	// The steps run in order against the same fileToken: each moves the clock, changes the file, reads.
	const remove = "<remove>"
	steps := []struct {
		name    string
		after   time.Duration
		file    string // written before reading; remove deletes it; "" leaves it
		want    string
		wantErr bool
	}{
		{name: "a missing file fails the first read", wantErr: true},
		{name: "the file is read again on the next request once it exists", file: "one\n", want: "one"},
		{name: "within the interval the cached token is used though the file changed", after: 59 * time.Second, file: "two", want: "one"},
		{name: "once the interval has passed the file is read again", after: time.Second, want: "two"},
		{name: "a failed re-read keeps the last good token", after: 2 * time.Minute, file: remove, want: "two"},
		{name: "an empty file keeps the last good token", after: time.Second, file: " \n", want: "two"},
		{name: "after a failed re-read the file is read again on the next request", after: time.Second, file: "three", want: "three"},
		{name: "and then cached again", after: 30 * time.Second, file: "four", want: "three"},
	}
	for _, step := range steps {
		now = now.Add(step.after)
		switch step.file {
		case "":
		case remove:
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		default:
			if err := os.WriteFile(path, []byte(step.file), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		got, err := tokens.get()
		if step.wantErr {
			if err == nil {
				t.Fatalf("%s: get() = %q, want an error", step.name, got)
			}
			continue
		}
		if err != nil || got != step.want {
			t.Fatalf("%s: get() = %q, %v; want %q", step.name, got, err, step.want)
		}
	}
}

// recordingTransport keeps the request it was given and answers 204.
type recordingTransport struct{ got *http.Request }

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r.got = req
	return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody, Request: req}, nil
}

// trackedBody records whether it was closed.
type trackedBody struct {
	io.Reader
	closed bool
}

func (b *trackedBody) Close() error { b.closed = true; return nil }

func TestAuthTransport(t *testing.T) {
	tests := []struct {
		name          string
		token         string
		tokenFile     string // content of a token file; "" for no file, "<missing>" for a path that does not exist
		userAgent     string
		callerHeaders map[string]string
		wantHeaders   map[string]string // as sent on
		wantErr       bool
	}{
		{
			name:        "the token and user agent are set",
			token:       "s3cret",
			userAgent:   "leasegate-agent",
			wantHeaders: map[string]string{"Authorization": "Bearer s3cret", "User-Agent": "leasegate-agent"},
		},
		{
			name:        "the token file wins over the token",
			token:       "static",
			tokenFile:   "from-file\n",
			wantHeaders: map[string]string{"Authorization": "Bearer from-file", "User-Agent": ""},
		},
		{
			name:          "headers the caller set are kept",
			token:         "s3cret",
			userAgent:     "leasegate-agent",
			callerHeaders: map[string]string{"Authorization": "Bearer caller", "User-Agent": "caller/1"},
			wantHeaders:   map[string]string{"Authorization": "Bearer caller", "User-Agent": "caller/1"},
		},
		{
			name:      "an unreadable token file on the first read fails the request, sending nothing",
			token:     "static",
			tokenFile: "<missing>",
			wantErr:   true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next := &recordingTransport{}
			rt := &authTransport{next: next, token: tt.token, userAgent: tt.userAgent}
			if tt.tokenFile != "" {
				path := filepath.Join(t.TempDir(), "token")
				if tt.tokenFile != "<missing>" {
					writeFiles(t, filepath.Dir(path), map[string]string{"token": tt.tokenFile})
				}
				rt.tokenFile = &fileToken{path: path, every: time.Minute, now: time.Now}
			}
			body := &trackedBody{Reader: strings.NewReader("{}")}
			req, err := http.NewRequest(http.MethodPost, "https://10.96.0.1/api", body)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.callerHeaders {
				req.Header.Set(k, v)
			}
			before := req.Header.Clone()

			_, err = rt.RoundTrip(req)
			if tt.wantErr {
				if err == nil {
					t.Fatal("RoundTrip() succeeded, want the token file's error")
				}
				if next.got != nil {
					t.Error("the request was sent on despite the error")
				}
				if !body.closed {
					t.Error("the request body was not closed")
				}
				return
			}
			if err != nil {
				t.Fatalf("RoundTrip() error = %v", err)
			}
			for k, want := range tt.wantHeaders {
				if got := next.got.Header.Get(k); got != want {
					t.Errorf("sent %s = %q, want %q", k, got, want)
				}
			}
			if !reflect.DeepEqual(req.Header, before) {
				t.Errorf("the caller's request headers changed: %v, were %v", req.Header, before)
			}
		})
	}
}

// received is what a test server saw of one request.
type received struct {
	authorization, userAgent     string
	protoMajor, peerCertificates int
}

func TestHTTPClientAgainstTLSServer(t *testing.T) {
	var mu sync.Mutex
	var last received
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		last = received{
			authorization: r.Header.Get("Authorization"), userAgent: r.Header.Get("User-Agent"),
			protoMajor: r.ProtoMajor, peerCertificates: len(r.TLS.PeerCertificates),
		}
	}))
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes below are expected
	// Asked for, not required, so that requests without one succeed too.
	srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	srv.StartTLS()
	defer srv.Close()

	// The server's own certificate is its CA (it is self-signed), and serves as a client certificate too.
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	keyDER, err := x509.MarshalPKCS8PrivateKey(srv.TLS.Certificates[0].PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})

	tests := []struct {
		name    string
		config  Config
		want    received
		wantErr string
	}{
		{
			name:   "the CA in CAData verifies the server; the token and user agent arrive over HTTP/2",
			config: Config{CAData: caPEM, BearerToken: "s3cret", UserAgent: "leasegate-agent/test"},
			want:   received{authorization: "Bearer s3cret", userAgent: "leasegate-agent/test", protoMajor: 2},
		},
		{
			name:    "without CAData the system roots do not trust the server",
			config:  Config{BearerToken: "s3cret"},
			wantErr: "certificate",
		},
		{
			name:   "ServerName is the name the certificate must carry: one it names",
			config: Config{CAData: caPEM, ServerName: "example.com", BearerToken: "s3cret"},
			want:   received{authorization: "Bearer s3cret", userAgent: "Go-http-client/2.0", protoMajor: 2},
		},
		{
			name:    "ServerName is the name the certificate must carry: one it does not name",
			config:  Config{CAData: caPEM, ServerName: "kubernetes.default.svc"},
			wantErr: "kubernetes.default.svc",
		},
		{
			name:   "Insecure skips verifying the server",
			config: Config{Insecure: true},
			want:   received{userAgent: "Go-http-client/2.0", protoMajor: 2},
		},
		{
			name:   "the client certificate is presented",
			config: Config{CAData: caPEM, CertData: caPEM, KeyData: keyPEM},
			want:   received{userAgent: "Go-http-client/2.0", protoMajor: 2, peerCertificates: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			last = received{}
			mu.Unlock()
			client, err := tt.config.HTTPClient()
			if err != nil {
				t.Fatalf("HTTPClient() error = %v", err)
			}
			defer client.CloseIdleConnections()

			resp, err := client.Get(srv.URL)
			if tt.wantErr != "" {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("GET succeeded, want an error containing %q", tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("GET error = %q, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("GET error = %v", err)
			}
			resp.Body.Close()
			mu.Lock()
			got := last
			mu.Unlock()
			if got != tt.want {
				t.Errorf("the server received %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestHTTPClientRefusesTLSBelow12(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake below is expected
	srv.StartTLS()
	defer srv.Close()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	config := Config{CAData: caPEM}

	// Go's client has defaulted to TLS 1.2 since Go 1.22, so the explicit minimum is checked too: it keeps
	// the floor if that default moves or GODEBUG changes it.
	base, err := config.transport()
	if err != nil {
		t.Fatal(err)
	}
	if got := base.TLSClientConfig.MinVersion; got != tls.VersionTLS12 {
		t.Errorf("MinVersion = %#x, want TLS 1.2 (%#x)", got, tls.VersionTLS12)
	}

	// The server does speak TLS 1.1 to a client that accepts it, so the refusal below is the version's.
	control := base.Clone()
	control.TLSClientConfig.MinVersion = tls.VersionTLS10
	resp, err := (&http.Client{Transport: control}).Get(srv.URL)
	if err != nil {
		t.Fatalf("a client accepting TLS 1.0 failed too, so the test proves nothing: %v", err)
	}
	resp.Body.Close()
	control.CloseIdleConnections()

	client, err := config.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	resp, err = client.Get(srv.URL)
	if err == nil {
		resp.Body.Close()
		t.Fatal("GET over TLS 1.1 succeeded, want it refused")
	}
	if !strings.Contains(err.Error(), "protocol version") {
		t.Errorf("GET error = %q, want a protocol version refusal", err)
	}
}

func TestHTTPClientSettings(t *testing.T) {
	config := Config{BearerToken: "s3cret"}
	client, err := config.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	if client.Timeout != 0 {
		t.Errorf("Timeout = %v, want none: watches are long, callers use contexts", client.Timeout)
	}
	base, err := config.transport()
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"HTTP/2 is attempted despite the custom TLS config", base.ForceAttemptHTTP2, true},
		{"HTTP/2 pings a connection silent for 30s", base.HTTP2 != nil && base.HTTP2.SendPingTimeout == 30*time.Second, true},
		{"HTTP/2 drops a connection whose ping is unanswered for 15s", base.HTTP2 != nil && base.HTTP2.PingTimeout == 15*time.Second, true},
		{"the TLS handshake times out after 10s", base.TLSHandshakeTimeout, 10 * time.Second},
		{"idle connections per host", base.MaxIdleConnsPerHost, 25},
		{"proxies come from the environment", reflect.ValueOf(base.Proxy).Pointer(), reflect.ValueOf(http.ProxyFromEnvironment).Pointer()},
		{"the DialContext is set (30s timeout and keep-alive)", base.DialContext != nil, true},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestHTTPClientRejectsBadTLSConfig(t *testing.T) {
	tests := []struct {
		name    string
		config  Config
		wantErr string
	}{
		{name: "a CA that is not PEM", config: Config{CAData: []byte("not pem")}, wantErr: "no PEM certificate"},
		{name: "a CA with insecure-skip-tls-verify", config: Config{CAData: []byte("x"), Insecure: true}, wantErr: "insecure-skip-tls-verify"},
		{name: "a client certificate without its key", config: Config{CertData: []byte("x")}, wantErr: "client-certificate, client-key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.config.HTTPClient()
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("HTTPClient() error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// A token file that cannot be read before any token was had fails the request with the file's own error,
// before anything is sent.
func TestFirstTokenReadErrorIsTheFilesError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	client, err := (&Config{BearerTokenFile: path}).HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.Get("https://127.0.0.1:1/")
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("GET error = %v, want the token file's not-exist error", err)
	}
}

// TestKubeconfigRefusedWhereClientGoRefuses holds LoadKubeconfig to client-go's reading of the same files:
// every kubeconfig client-go refuses, the agent refuses too, with a message of the same meaning, where
// reading it anyway would connect as someone or somewhere the file does not clearly say. Each case is
// checked against client-go itself, so the table stays true as client-go changes.
func TestKubeconfigRefusedWhereClientGoRefuses(t *testing.T) {
	good := kubeconfigFor(`server: https://10.0.0.1:6443`, `token: s3cret`)
	tests := []struct {
		name       string
		kubeconfig string
		wantErr    []string // each must appear in the agent's error; none: both accept it
		// clientGoAccepts, for a file only the agent refuses, says why the agent is stricter.
		clientGoAccepts string
	}{
		{name: "a plain token kubeconfig is accepted by both", kubeconfig: good},
		{
			name:       "two clusters of one name",
			kubeconfig: strings.Replace(good, "clusters:\n", "clusters:\n- name: kind\n  cluster: {server: 'https://10.0.0.2:6443'}\n", 1),
			wantErr:    []string{"clusters", `duplicate name "kind"`},
		},
		{
			name:       "two users of one name",
			kubeconfig: strings.Replace(good, "users:\n", "users:\n- name: alice\n  user: {token: other}\n", 1),
			wantErr:    []string{"users", `duplicate name "alice"`},
		},
		{
			name:       "two contexts of one name",
			kubeconfig: strings.Replace(good, "contexts:\n", "contexts:\n- name: dev\n  context: {cluster: kind, user: alice}\n", 1),
			wantErr:    []string{"contexts", `duplicate name "dev"`},
		},
		{
			name:       "as-uid without as",
			kubeconfig: kubeconfigFor(`server: https://10.0.0.1:6443`, "token: s3cret\nas-uid: '1234'"),
			wantErr:    []string{`user "alice"`, "without as", "impersonating a user"},
		},
		{
			name:       "as-user-extra without as",
			kubeconfig: kubeconfigFor(`server: https://10.0.0.1:6443`, "token: s3cret\nas-user-extra:\n  authentication.kubernetes.io/pod-name: [orders-0]"),
			wantErr:    []string{`user "alice"`, "without as", "impersonating a user"},
		},
		{
			name:       "as-groups without as",
			kubeconfig: kubeconfigFor(`server: https://10.0.0.1:6443`, "token: s3cret\nas-groups: [system:masters]"),
			wantErr:    []string{`user "alice"`, "without as"},
		},
		{
			name:       "a token and a username and password",
			kubeconfig: kubeconfigFor(`server: https://10.0.0.1:6443`, "token: s3cret\nusername: admin\npassword: hunter2"),
			wantErr:    []string{`user "alice"`, "username and password"},
		},
		{
			name:       "a client certificate without its key",
			kubeconfig: kubeconfigFor(`server: https://10.0.0.1:6443`, "client-certificate-data: "+b64("cert")),
			wantErr:    []string{`user "alice"`, "without client-key"},
		},
		{
			name:       "a CA file and CA data",
			kubeconfig: kubeconfigFor("server: https://10.0.0.1:6443\ncertificate-authority: {dir}/kube/config\ncertificate-authority-data: "+b64("ca"), `token: s3cret`),
			wantErr:    []string{"both certificate-authority and certificate-authority-data"},
		},
		{
			name:       "a cluster without a server",
			kubeconfig: kubeconfigFor(`tls-server-name: kubernetes`, `token: s3cret`),
			wantErr:    []string{`cluster "kind"`, "no server"},
		},
		{
			name:       "a current-context that names no context",
			kubeconfig: strings.Replace(good, "current-context: dev", "current-context: prod", 1),
			wantErr:    []string{`current-context "prod"`},
		},
		{
			name:            "a context whose user is missing",
			kubeconfig:      strings.Replace(good, "user: alice,", "user: bob,", 1),
			wantErr:         []string{`no user named "bob"`},
			clientGoAccepts: "client-go connects without credentials, as the anonymous user",
		},
		{
			name:            "impersonation with as",
			kubeconfig:      kubeconfigFor(`server: https://10.0.0.1:6443`, "token: s3cret\nas: bob\nas-uid: '1234'"),
			wantErr:         []string{`user "alice"`, "impersonation"},
			clientGoAccepts: "the agent impersonates nobody",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "kube", "config")
			writeFiles(t, dir, map[string]string{"kube/config": strings.ReplaceAll(tt.kubeconfig, "{dir}", dir)})

			_, clientGoErr := clientcmd.BuildConfigFromFlags("", path)
			if refuses := clientGoErr != nil; refuses != (tt.wantErr != nil && tt.clientGoAccepts == "") {
				t.Fatalf("client-go's error = %v: the case says client-go refuses it: %v", clientGoErr, !refuses)
			}
			_, err := LoadKubeconfig(path)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("LoadKubeconfig() error = %v, client-go accepts it", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("LoadKubeconfig() accepted what client-go refuses: %v", clientGoErr)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("LoadKubeconfig() error = %q, want it to contain %q (client-go: %v)", err, want, clientGoErr)
				}
			}
		})
	}
}

// tokenChecker answers 401 to a token it no longer accepts and 204 to any other, recording what it got.
type tokenChecker struct {
	revoked map[string]bool
	got     []string
}

func (c *tokenChecker) RoundTrip(req *http.Request) (*http.Response, error) {
	token := strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer ")
	c.got = append(c.got, token)
	code := http.StatusNoContent
	if c.revoked[token] {
		code = http.StatusUnauthorized
	}
	return &http.Response{StatusCode: code, Body: http.NoBody, Request: req}, nil
}

// TestA401ReadsTheTokenFileAgain: the steps run in order against one transport, each moving the clock,
// changing the file or the server's mind, and sending one request.
func TestA401ReadsTheTokenFileAgain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	server := &tokenChecker{revoked: map[string]bool{}}
	rt := &authTransport{next: server, tokenFile: &fileToken{path: path, every: time.Minute, now: func() time.Time { return now }}}
	steps := []struct {
		name     string
		after    time.Duration
		file     string // written before the request, when not ""
		revoke   string // a token the server refuses from this step on
		wantSent string
		wantCode int
	}{
		{name: "the first request reads the file", file: "one", wantSent: "one", wantCode: 204},
		{name: "the file is rotated; within the interval the cached token goes out", after: 10 * time.Second, file: "two", wantSent: "one", wantCode: 204},
		{name: "the server refuses the old token", after: time.Second, revoke: "one", wantSent: "one", wantCode: 401},
		{name: "so the next request reads the file, still within the interval", wantSent: "two", wantCode: 204},
		{name: "a refused token read as the request went out is kept: no file read per refusal", revoke: "two", file: "three", wantSent: "two", wantCode: 401},
		{name: "and is read again at the interval", after: time.Minute, wantSent: "three", wantCode: 204},
	}
	for _, step := range steps {
		now = now.Add(step.after)
		if step.file != "" {
			writeFiles(t, filepath.Dir(path), map[string]string{"token": step.file})
		}
		if step.revoke != "" {
			server.revoked[step.revoke] = true
		}
		req, err := http.NewRequest(http.MethodGet, "https://10.96.0.1/api", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if sent := server.got[len(server.got)-1]; sent != step.wantSent || resp.StatusCode != step.wantCode {
			t.Fatalf("%s: sent %q, answered %d; want %q, %d", step.name, sent, resp.StatusCode, step.wantSent, step.wantCode)
		}
	}
}
