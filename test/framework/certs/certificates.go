package certs

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
)

// ParseCertificate parses the first certificate of a PEM bundle, as Secrets of type kubernetes.io/tls
// and CA bundles hold them.
func ParseCertificate(data []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	return x509.ParseCertificate(block.Bytes)
}
