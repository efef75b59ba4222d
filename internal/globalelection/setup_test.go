package globalelection

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasegate/leasegate/test/framework/certs"
)

// The cert dir is a mounted cert-manager Secret, renewed in place: each new connection presents the
// client certificate in tls.crt and tls.key as they are then, and trusts the CAs in ca.crt as it is then.
// Read once at start, a renewed certificate would go unused until the old one expired and every
// reconnection failed. The steps run in order on new connections, each with the files as it leaves them.
func TestEtcdTLSReadsTheCertDirAtEachHandshake(t *testing.T) {
	dir := t.TempDir()
	first, err := certs.WriteClientCertificate(dir, "first", "cluster-a")
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := certs.WriteClientCertificate(dir, "renewed", "cluster-a-renewed")
	if err != nil {
		t.Fatal(err)
	}
	serverCA, err := certs.NewCA("etcd CA")
	if err != nil {
		t.Fatal(err)
	}
	rotatedCA, err := certs.NewCA("etcd CA, rotated")
	if err != nil {
		t.Fatal(err)
	}
	serving := func(ca *certs.CA) *tls.Certificate {
		cert, err := ca.ServingCertificate()
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}
	certDir := filepath.Join(dir, "etcd-client")
	if err := os.Mkdir(certDir, 0o700); err != nil {
		t.Fatal(err)
	}
	install := func(name string, from string) {
		t.Helper()
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(certDir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	installCA := func(ca *certs.CA) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(certDir, "ca.crt"), ca.PEM, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	install("tls.crt", first.CertFile)
	install("tls.key", first.KeyFile)
	installCA(serverCA)

	// The server: etcd's side of the handshake, asking for a client certificate from either client CA and
	// serving the certificate of the moment.
	clientCAs := x509.NewCertPool()
	for _, c := range []*certs.ClientCertificate{first, renewed} {
		data, err := os.ReadFile(c.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		clientCAs.AppendCertsFromPEM(data)
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	var serverCert atomic.Pointer[tls.Certificate]
	serverCert.Store(serving(serverCA))
	presented := make(chan string, 1)
	go func() {
		for {
			conn, err := listener.Accept()
			if err != nil {
				return
			}
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			server := tls.Server(conn, &tls.Config{Certificates: []tls.Certificate{*serverCert.Load()}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCAs})
			if server.Handshake() == nil {
				presented <- server.ConnectionState().PeerCertificates[0].Subject.CommonName
			} else {
				presented <- ""
			}
			server.Close()
		}
	}()

	config, err := Options{ClusterName: "a", EtcdEndpoints: []string{"https://" + listener.Addr().String()}, EtcdCertDir: certDir}.tlsConfig()
	if err != nil {
		t.Fatal(err)
	}
	connect := func() (string, error) {
		conn, err := net.Dial("tcp", listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		// As grpc's TLS credentials, which etcd's client dials through, name the endpoint's host.
		clientConfig := config.Clone()
		clientConfig.ServerName = "127.0.0.1"
		client := tls.Client(conn, clientConfig)
		if err = client.Handshake(); err != nil {
			conn.Close() // the server learns at once, whatever the client's TLS stack left unsent
		}
		select {
		case cn := <-presented:
			return cn, err
		case <-time.After(10 * time.Second):
			t.Fatalf("the server saw no handshake (client: %v)", err)
			return "", err
		}
	}

	steps := []struct {
		name    string
		change  func()
		wantCN  string
		wantErr bool
	}{
		{"the certificate read at start", func() {}, "cluster-a", false},
		{"the certificate renewed in place is presented on the next connection", func() {
			install("tls.crt", renewed.CertFile)
			install("tls.key", renewed.KeyFile)
		}, "cluster-a-renewed", false},
		{"a half-written pair (the certificate without its key) keeps the last good one", func() {
			install("tls.crt", first.CertFile)
		}, "cluster-a-renewed", false},
		{"etcd serving a certificate of a CA not yet in ca.crt is refused", func() {
			install("tls.key", first.KeyFile)
			serverCert.Store(serving(rotatedCA))
		}, "", true},
		{"once ca.crt holds the rotated CA, the next connection trusts it", func() { installCA(rotatedCA) }, "cluster-a", false},
		{"a ca.crt emptied by mistake keeps the last good CAs", func() {
			if err := os.WriteFile(filepath.Join(certDir, "ca.crt"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "cluster-a", false},
	}
	for _, step := range steps {
		step.change()
		cn, err := connect()
		if (err != nil) != step.wantErr || (!step.wantErr && cn != step.wantCN) {
			t.Errorf("%s: handshake error %v, presented %q; want error %v, presented %q", step.name, err, cn, step.wantErr, step.wantCN)
		}
	}
}

// The server's certificate must name an endpoint: one the CA signed for another host is refused.
func TestEtcdTLSChecksTheEndpointsNames(t *testing.T) {
	ca, err := certs.NewCA("etcd CA")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	client, err := certs.WriteClientCertificate(dir, "client", "cluster-a")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, from := range map[string]string{"tls.crt": client.CertFile, "tls.key": client.KeyFile} {
		data, _ := os.ReadFile(from)
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	served, err := ca.ServingCertificate() // for 127.0.0.1 and localhost
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(served.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		endpoints []string
		ok        bool
	}{
		{[]string{"https://127.0.0.1:2379"}, true},
		{[]string{"https://etcd-0.example:2379", "https://localhost:2379"}, true},
		{[]string{"https://etcd-0.example:2379"}, false},
		{[]string{"https://10.0.0.7:2379"}, false},
	} {
		config, err := Options{ClusterName: "a", EtcdEndpoints: tt.endpoints, EtcdCertDir: dir}.tlsConfig()
		if err != nil {
			t.Fatal(err)
		}
		err = config.VerifyConnection(tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}})
		if (err == nil) != tt.ok {
			t.Errorf("endpoints %v, a certificate for 127.0.0.1 and localhost: error %v, want accepted %v", tt.endpoints, err, tt.ok)
		}
	}
}
