package globalelection

import (
	"strings"
	"testing"
)

func TestKeyRoundTrip(t *testing.T) {
	tests := []struct {
		name, key        string
		namespace, lease string
		ok               bool
	}{
		{"a MultiClusterLease's key", Key("shop", "orders"), "shop", "orders", true},
		{"a key outside the prefix", "/registry/leases/shop/orders", "", "", false},
		{"a key without a name", KeyPrefix + "shop/", "", "", false},
		{"a key without a namespace", KeyPrefix + "/orders", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			namespace, name, ok := ParseKey(tt.key)
			if ok != tt.ok || namespace != tt.namespace || name != tt.lease {
				t.Errorf("ParseKey(%q) = %q, %q, %v; want %q, %q, %v", tt.key, namespace, name, ok, tt.namespace, tt.lease, tt.ok)
			}
		})
	}
}

func TestOptionsNameTheFlagAtFault(t *testing.T) {
	_, err := Options{ClusterName: "eu/west", EtcdEndpoints: []string{"http://etcd:2379"}}.EtcdClient()
	for _, want := range []string{
		`--multicluster-etcd-endpoints: "http://etcd:2379" is not an https:// URL`,
		`--multicluster-cluster-name: "eu/west" must be at most 63 characters without /`,
		`--multicluster-etcd-cert-dir: required`,
	} {
		if err == nil || !contains(err.Error(), want) {
			t.Errorf("EtcdClient() error = %v, want it to contain %q", err, want)
		}
	}
	_, err = Options{ClusterName: "eu-west", EtcdEndpoints: []string{"https://etcd:2379"}, EtcdCertDir: t.TempDir()}.EtcdClient()
	if err == nil || !contains(err.Error(), "--multicluster-etcd-cert-dir: the client certificate") {
		t.Errorf("EtcdClient() with an empty cert dir: error = %v", err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
