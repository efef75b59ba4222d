package globalelection

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasegate/leasegate/internal/tlsfiles"
)

// Options are leasegate-webhook's --multicluster-* flags. The controller runs only when ClusterName is
// set.
type Options struct {
	// ClusterName names this cluster to the others; unique among the clusters sharing the backend.
	ClusterName string
	// EtcdEndpoints are the global etcd's client URLs, https only.
	EtcdEndpoints []string
	// EtcdCertDir holds ca.crt, tls.crt and tls.key (a cert-manager or kubernetes.io/tls Secret mounted
	// as is): the CA that signed etcd's serving certificates, and this cluster's client certificate.
	EtcdCertDir string
}

// Enabled reports whether the multi-cluster election controller runs.
func (o Options) Enabled() bool { return o.ClusterName != "" }

// EtcdClient validates the options and connects to the global etcd over TLS 1.2 or later. Each error
// names the flag at fault.
func (o Options) EtcdClient() (*clientv3.Client, error) {
	var errs []error
	if len(o.EtcdEndpoints) == 0 {
		errs = append(errs, errors.New("--multicluster-etcd-endpoints: required with --multicluster-cluster-name (the global etcd's https:// client URLs)"))
	}
	for _, e := range o.EtcdEndpoints {
		if !strings.HasPrefix(e, "https://") {
			errs = append(errs, fmt.Errorf("--multicluster-etcd-endpoints: %q is not an https:// URL; the global backend is reached over TLS only", e))
		}
	}
	if strings.ContainsAny(o.ClusterName, "/\"") || len(o.ClusterName) > 63 {
		errs = append(errs, fmt.Errorf("--multicluster-cluster-name: %q must be at most 63 characters without / or \"", o.ClusterName))
	}
	tlsConfig, err := o.tlsConfig()
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return clientv3.New(clientv3.Config{
		Endpoints: o.EtcdEndpoints, TLS: tlsConfig, DialTimeout: 2 * time.Second,
		DialKeepAliveTime: 5 * time.Second, DialKeepAliveTimeout: backendTimeout,
		Logger: zap.NewNop(),
	})
}

// tlsConfig reads the cert dir at each new connection's handshake, as a mounted cert-manager Secret is
// renewed in place: the renewed client certificate is presented from the next connection on, and a new
// ca.crt is trusted from then too, rather than every reconnection failing once the certificate read at
// start expires. The server's certificate must be valid for one of the endpoints' hosts and signed by a
// CA in ca.crt of the moment.
func (o Options) tlsConfig() (*tls.Config, error) {
	if o.EtcdCertDir == "" {
		return nil, errors.New("--multicluster-etcd-cert-dir: required (a directory with ca.crt, tls.crt and tls.key)")
	}
	cert, err := tlsfiles.NewCertificate(filepath.Join(o.EtcdCertDir, "tls.crt"), filepath.Join(o.EtcdCertDir, "tls.key"))
	if err != nil {
		return nil, fmt.Errorf("--multicluster-etcd-cert-dir: the client certificate: %w", err)
	}
	roots, err := tlsfiles.NewRoots(filepath.Join(o.EtcdCertDir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("--multicluster-etcd-cert-dir: %w", err)
	}
	var hosts []string
	for _, endpoint := range o.EtcdEndpoints {
		if u, err := url.Parse(endpoint); err == nil && u.Hostname() != "" {
			hosts = append(hosts, u.Hostname())
		}
	}
	// The handshake's own verification is replaced, not skipped: it could only check a CA pool fixed at
	// start. Any of the endpoints' names will do, as etcd's members serve one store and trust each other.
	return &tls.Config{
		GetClientCertificate: cert.Get,
		InsecureSkipVerify:   true,
		VerifyConnection:     roots.Verifier(hosts...),
		MinVersion:           tls.VersionTLS12,
	}, nil
}
