package kubeclient

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// Config is how to reach and authenticate to one API server. It holds only what the agent uses: a bearer
// token or a client certificate, never exec plugins or auth providers, so the agent links no credential
// plugins and runs nothing.
type Config struct {
	// Host is the API server, such as "https://10.96.0.1:443"; a bare host:port means https.
	Host string
	// CAData is the PEM bundle of the server's CA; empty (and no CAFile) means the system roots.
	CAData []byte
	// CAFile is a file holding that bundle instead (the pod's ca.crt, a kubeconfig's
	// certificate-authority): read again at each new connection, so a rotated CA is trusted on the first
	// connection after the file gained it.
	CAFile string
	// ServerName overrides the name the server's certificate must carry (kubeconfig tls-server-name),
	// for a server reached by an address its certificate does not name.
	ServerName string
	// Insecure skips verifying the server's certificate (kubeconfig insecure-skip-tls-verify).
	Insecure bool
	// CertData and KeyData are the client certificate and its key, PEM.
	CertData, KeyData []byte
	// CertFile and KeyFile hold them instead (a kubeconfig's client-certificate and client-key): read
	// again at each new connection, so a renewed certificate is presented from the first connection
	// after both files changed.
	CertFile, KeyFile string
	BearerToken       string
	// BearerTokenFile is re-read at most once a minute, because projected service account tokens rotate
	// (client-go's in-cluster config does the same), and wins over BearerToken when set.
	BearerTokenFile string
	UserAgent       string
}

// serviceAccountDir is where the kubelet mounts the pod's service account token and the cluster's CA.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// errNotInCluster is client-go's ErrNotInCluster, word for word, so the agent fails outside a pod as any
// client-go program does.
var errNotInCluster = errors.New("unable to load in-cluster configuration, KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be defined")

// InCluster is the pod's own config: the API server from KUBERNETES_SERVICE_HOST and
// KUBERNETES_SERVICE_PORT, the service account token (re-read as it rotates) and the CA the kubelet
// mounts beside it. The token and CA are checked now, so a pod without them (automountServiceAccountToken:
// false) fails at start and says which file is missing, not at its first request.
func InCluster() (*Config, error) {
	return inCluster(os.Getenv, serviceAccountDir)
}

func inCluster(getenv func(string) string, dir string) (*Config, error) {
	host, port := getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errNotInCluster
	}
	tokenFile := filepath.Join(dir, "token")
	if _, err := readToken(tokenFile); err != nil {
		return nil, fmt.Errorf("the service account token: %w (is automountServiceAccountToken false for this pod?)", err)
	}
	caFile := filepath.Join(dir, "ca.crt")
	if _, err := os.ReadFile(caFile); err != nil {
		return nil, fmt.Errorf("the cluster's CA: %w (is automountServiceAccountToken false for this pod?)", err)
	}
	return &Config{
		// JoinHostPort brackets an IPv6 address, as on an IPv6-only cluster.
		Host:            "https://" + net.JoinHostPort(host, port),
		CAFile:          caFile,
		BearerTokenFile: tokenFile,
	}, nil
}

// kubeconfig is the part of a kubeconfig file the agent reads. The fields it refuses (exec, auth-provider,
// basic auth, impersonation, proxy-url) are read only to refuse them: ignoring one would connect as
// someone else, or some other way, than the file says.
type kubeconfig struct {
	CurrentContext string                   `json:"current-context"`
	Contexts       []kubeconfigContextEntry `json:"contexts"`
	Clusters       []kubeconfigClusterEntry `json:"clusters"`
	Users          []kubeconfigUserEntry    `json:"users"`
}

type kubeconfigContextEntry struct {
	Name    string            `json:"name"`
	Context kubeconfigContext `json:"context"`
}

type kubeconfigClusterEntry struct {
	Name    string            `json:"name"`
	Cluster kubeconfigCluster `json:"cluster"`
}

type kubeconfigUserEntry struct {
	Name string         `json:"name"`
	User kubeconfigUser `json:"user"`
}

type kubeconfigContext struct {
	Cluster string `json:"cluster"`
	User    string `json:"user"`
}

type kubeconfigCluster struct {
	Server                   string `json:"server"`
	CertificateAuthority     string `json:"certificate-authority"`
	CertificateAuthorityData string `json:"certificate-authority-data"`
	InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
	TLSServerName            string `json:"tls-server-name"`
	ProxyURL                 string `json:"proxy-url"`
}

type kubeconfigUser struct {
	Token                 string              `json:"token"`
	TokenFile             string              `json:"tokenFile"`
	ClientCertificate     string              `json:"client-certificate"`
	ClientCertificateData string              `json:"client-certificate-data"`
	ClientKey             string              `json:"client-key"`
	ClientKeyData         string              `json:"client-key-data"`
	Username              string              `json:"username"`
	Password              string              `json:"password"`
	Exec                  any                 `json:"exec"`
	AuthProvider          any                 `json:"auth-provider"`
	As                    string              `json:"as"`
	AsUID                 string              `json:"as-uid"`
	AsGroups              []string            `json:"as-groups"`
	AsUserExtra           map[string][]string `json:"as-user-extra"`
}

// LoadKubeconfig reads the kubeconfig file at path: its current-context's cluster and user. Relative
// file paths in it resolve against the file's directory, as kubectl resolves them. A user that
// authenticates any other way than a token or a client certificate is refused, naming the user: the agent
// runs no exec plugins or auth providers.
func LoadKubeconfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseKubeconfig(data, filepath.Dir(path))
}

// parseKubeconfig reads a kubeconfig's bytes; relative paths in it resolve against dir.
func parseKubeconfig(data []byte, dir string) (*Config, error) {
	var file kubeconfig
	if err := yaml.Unmarshal(data, &file); err != nil {
		return nil, fmt.Errorf("not a kubeconfig: %w", err)
	}

	// client-go refuses a file with two entries of one name in a list, whichever it would use: reading
	// the first, or the last, would connect to a cluster or as a user the file's author may not mean.
	if err := unique("contexts", file.Contexts, func(c kubeconfigContextEntry) string { return c.Name }); err != nil {
		return nil, err
	}
	if err := unique("clusters", file.Clusters, func(c kubeconfigClusterEntry) string { return c.Name }); err != nil {
		return nil, err
	}
	if err := unique("users", file.Users, func(u kubeconfigUserEntry) string { return u.Name }); err != nil {
		return nil, err
	}
	if file.CurrentContext == "" {
		return nil, errors.New("no current-context: set one with kubectl config use-context")
	}
	contextName := file.CurrentContext
	context, found := byName(file.Contexts, contextName, func(c kubeconfigContextEntry) (string, kubeconfigContext) { return c.Name, c.Context })
	if !found {
		return nil, fmt.Errorf("current-context %q: no context of that name in contexts", contextName)
	}
	if context.Cluster == "" {
		return nil, fmt.Errorf("context %q names no cluster", contextName)
	}
	if context.User == "" {
		return nil, fmt.Errorf("context %q names no user", contextName)
	}
	cluster, found := byName(file.Clusters, context.Cluster, func(c kubeconfigClusterEntry) (string, kubeconfigCluster) { return c.Name, c.Cluster })
	if !found {
		return nil, fmt.Errorf("context %q: no cluster named %q in clusters", contextName, context.Cluster)
	}
	user, found := byName(file.Users, context.User, func(u kubeconfigUserEntry) (string, kubeconfigUser) { return u.Name, u.User })
	if !found {
		return nil, fmt.Errorf("context %q: no user named %q in users", contextName, context.User)
	}
	config := &Config{}
	if err := config.setCluster(cluster, dir); err != nil {
		return nil, fmt.Errorf("cluster %q: %w", context.Cluster, err)
	}
	if err := config.setUser(user, dir); err != nil {
		return nil, fmt.Errorf("user %q: %w", context.User, err)
	}
	return config, nil
}

// unique refuses a kubeconfig list (contexts, clusters, users) with two entries of one name, in the
// meaning of client-go's refusal ("duplicate name ... in list").
func unique[E any](list string, entries []E, name func(E) string) error {
	seen := make(map[string]bool, len(entries))
	for _, e := range entries {
		n := name(e)
		if seen[n] {
			return fmt.Errorf("%s: duplicate name %q: client-go refuses this kubeconfig too; keep one entry of each name", list, n)
		}
		seen[n] = true
	}
	return nil
}

// byName is the value of the first entry of a kubeconfig list (contexts, clusters, users) named name.
func byName[E, V any](entries []E, name string, entry func(E) (string, V)) (V, bool) {
	for _, e := range entries {
		if n, v := entry(e); n == name {
			return v, true
		}
	}
	var zero V
	return zero, false
}

func (c *Config) setCluster(cluster kubeconfigCluster, dir string) error {
	if cluster.Server == "" {
		return errors.New("no server")
	}
	if cluster.ProxyURL != "" {
		return errors.New("proxy-url is not supported by the agent: set HTTPS_PROXY (and NO_PROXY) in its environment instead")
	}
	c.Host = cluster.Server
	c.ServerName = cluster.TLSServerName
	c.Insecure = cluster.InsecureSkipTLSVerify
	if cluster.CertificateAuthority != "" && cluster.CertificateAuthorityData == "" {
		// Kept as a path, to be read again as the CA rotates; read now so a missing file fails at start.
		c.CAFile = resolve(dir, cluster.CertificateAuthority)
		if _, err := os.ReadFile(c.CAFile); err != nil {
			return fmt.Errorf("certificate-authority: %w", err)
		}
		return nil
	}
	var err error
	c.CAData, err = fileOrData(dir, "certificate-authority", cluster.CertificateAuthority, cluster.CertificateAuthorityData)
	return err
}

func (c *Config) setUser(user kubeconfigUser, dir string) error {
	var refused string
	switch {
	case user.Exec != nil:
		refused = "exec"
	case user.AuthProvider != nil:
		refused = "auth-provider"
	case user.Username != "" || user.Password != "":
		refused = "username and password"
	}
	if refused != "" {
		return fmt.Errorf("authenticates with %s, which the agent does not support: it needs a token (token, tokenFile) or a client certificate (client-certificate, client-key)", refused)
	}
	impersonates := user.AsUID != "" || len(user.AsGroups) > 0 || len(user.AsUserExtra) > 0
	if impersonates && user.As == "" {
		// Ignored, the request would go out as the credential's own identity.
		return errors.New("as-uid, as-groups or as-user-extra without as: client-go refuses to request a uid, groups or extras without impersonating a user, and the agent supports no impersonation: give it the identity's own token or client certificate")
	}
	if impersonates || user.As != "" {
		return errors.New("impersonation (as, as-uid, as-groups, as-user-extra) is not supported by the agent: give it the impersonated identity's own token or client certificate")
	}
	c.BearerToken = user.Token
	if user.TokenFile != "" {
		c.BearerTokenFile = resolve(dir, user.TokenFile)
	}
	if user.ClientCertificate != "" && user.ClientCertificateData == "" && user.ClientKey != "" && user.ClientKeyData == "" {
		// Kept as paths, to be read again as the certificate is renewed; read now so a missing or
		// mismatched pair fails at start.
		c.CertFile, c.KeyFile = resolve(dir, user.ClientCertificate), resolve(dir, user.ClientKey)
		_, err := newFileCertificate(c.CertFile, c.KeyFile)
		return err
	}
	var err error
	if c.CertData, err = fileOrData(dir, "client-certificate", user.ClientCertificate, user.ClientCertificateData); err != nil {
		return err
	}
	if c.KeyData, err = fileOrData(dir, "client-key", user.ClientKey, user.ClientKeyData); err != nil {
		return err
	}
	if len(c.CertData) > 0 && len(c.KeyData) == 0 {
		return errors.New("client-certificate without client-key (or client-key-data): set both")
	}
	if len(c.KeyData) > 0 && len(c.CertData) == 0 {
		return errors.New("client-key without client-certificate (or client-certificate-data): set both")
	}
	return nil
}

// fileOrData is the content of a kubeconfig's <field> (a file path) or <field>-data (base64), which
// kubectl refuses to have both of.
func fileOrData(dir, field, file, data string) ([]byte, error) {
	switch {
	case file != "" && data != "":
		return nil, fmt.Errorf("both %s and %s-data are set: keep one", field, field)
	case data != "":
		decoded, err := base64.StdEncoding.DecodeString(strings.TrimSpace(data))
		if err != nil {
			return nil, fmt.Errorf("%s-data is not base64: %w", field, err)
		}
		return decoded, nil
	case file != "":
		content, err := os.ReadFile(resolve(dir, file))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		return content, nil
	}
	return nil, nil
}

// resolve makes a kubeconfig's relative path relative to the kubeconfig's directory, as kubectl does.
func resolve(dir, path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(dir, path)
}
