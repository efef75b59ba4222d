package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// ClientCertificate is a CA and a client certificate it signed, as PEM files.
type ClientCertificate struct {
	CAFile, CertFile, KeyFile string
}

// WriteClientCertificate makes a CA and a client certificate for commonName that it signs, and writes
// them under dir as <name>-ca.crt, <name>.crt and <name>.key.
func WriteClientCertificate(dir, name, commonName string) (*ClientCertificate, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name + " CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: commonName},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, caTemplate, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	c := &ClientCertificate{
		CAFile: filepath.Join(dir, name+"-ca.crt"), CertFile: filepath.Join(dir, name+".crt"), KeyFile: filepath.Join(dir, name+".key"),
	}
	for path, block := range map[string]*pem.Block{
		c.CAFile: {Type: "CERTIFICATE", Bytes: caDER}, c.CertFile: {Type: "CERTIFICATE", Bytes: der}, c.KeyFile: {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// WriteWebhookAdmissionConfig writes under dir an AdmissionConfiguration (kube-apiserver's
// --admission-control-config-file) whose webhook admission plugins present cert to every webhook they
// call: its kubeconfig's user "*" matches any webhook host.
func WriteWebhookAdmissionConfig(dir string, cert *ClientCertificate) (string, error) {
	kubeconfig := filepath.Join(dir, "webhook-admission.kubeconfig")
	if err := os.WriteFile(kubeconfig, fmt.Appendf(nil, `apiVersion: v1
kind: Config
users:
- name: "*"
  user:
    client-certificate: %s
    client-key: %s
`, cert.CertFile, cert.KeyFile), 0o600); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "admission-configuration.yaml")
	plugin := func(name string) string {
		return fmt.Sprintf(`- name: %s
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: %s
`, name, kubeconfig)
	}
	return path, os.WriteFile(path, []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n"+
		plugin("ValidatingAdmissionWebhook")+plugin("MutatingAdmissionWebhook")), 0o600)
}
