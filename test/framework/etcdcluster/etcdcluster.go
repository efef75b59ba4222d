package etcdcluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasegate/leasegate/test/framework/certs"
	"github.com/leasegate/leasegate/test/framework/checkout"
	"github.com/leasegate/leasegate/test/framework/process"
)

// etcdReadyTimeout bounds how long a member may take to answer Status after it starts, so a member that
// cannot join fails the test with its log instead of hanging it.
const etcdReadyTimeout = 30 * time.Second

// Cluster is a real etcd cluster of separate processes on loopback, with TLS between members and
// towards clients, for the multi-cluster suite: members can be killed, restarted, paused and, through a
// relay.Proxy in front of ClientAddr, partitioned from a client, as the machines under a real cluster can.
type Cluster struct {
	binary  string
	dir     string
	token   string
	initial string // --initial-cluster
	caFile  string
	cert    string
	key     string
	tls     *tls.Config
	status  *clientv3.Client // asks members for Status; never used for data

	mu      sync.Mutex
	members []*etcdMember
}

// Member is what a test needs to know about one member.
type Member struct {
	Name       string
	ID         uint64 // raft member ID, from the member's first Status answer
	ClientURL  string // https://127.0.0.1:port
	ClientAddr string // 127.0.0.1:port, for a relay.Proxy in front of it
	PeerURL    string
	DataDir    string
	LogFile    string
	CertFile   string // the member's certificate, for both client and peer TLS
	KeyFile    string
}

type etcdMember struct {
	Member
	process *process.Process // nil while killed
	paused  bool
}

// Binary is the etcd the harness runs: $KUBEBUILDER_ASSETS/etcd when the user sets it, otherwise
// the one `make controlplane` builds next to kube-apiserver at the pinned versions.
func Binary() (string, error) {
	dir, err := checkout.ControlPlaneAssets()
	if err != nil {
		return "", err
	}
	binary := filepath.Join(dir, "etcd")
	if _, err := os.Stat(binary); err != nil {
		return "", fmt.Errorf("no etcd in %s: run `make controlplane` (or set KUBEBUILDER_ASSETS)", dir)
	}
	return binary, nil
}

// Start starts members etcd processes forming one new cluster, with a fresh CA, certificates
// and data under dir, and returns once every member answers. The caller owns dir: Stop leaves it, so a
// failed test's member logs stay readable.
func Start(dir string, members int) (*Cluster, error) {
	if members < 1 {
		return nil, fmt.Errorf("an etcd cluster needs at least one member, not %d", members)
	}
	binary, err := Binary()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	c := &Cluster{binary: binary, dir: dir, token: fmt.Sprintf("leasegate-%d", time.Now().UnixNano())}
	ports, err := process.FreePorts(2 * members)
	if err != nil {
		return nil, fmt.Errorf("picking ports for etcd: %w", err)
	}
	var initial []string
	for i := range members {
		name := fmt.Sprintf("etcd-%d", i)
		clientAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i]))
		m := &etcdMember{Member: Member{
			Name:       name,
			ClientURL:  "https://" + clientAddr,
			ClientAddr: clientAddr,
			PeerURL:    "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i+1])),
			DataDir:    filepath.Join(dir, name+".data"),
			LogFile:    filepath.Join(dir, name+".log"),
			CertFile:   filepath.Join(dir, name+".crt"),
			KeyFile:    filepath.Join(dir, name+".key"),
		}}
		c.members = append(c.members, m)
		initial = append(initial, name+"="+m.PeerURL)
	}
	c.initial = strings.Join(initial, ",")
	if err := c.writePKI(); err != nil {
		return nil, fmt.Errorf("writing etcd certificates into %s: %w", dir, err)
	}
	if c.status, err = c.newClient(c.Endpoints()...); err != nil {
		return nil, err
	}
	// All members start before any is waited for: none answers until a quorum has formed.
	for i := range c.members {
		if err := c.start(i, "new"); err != nil {
			c.Stop()
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), etcdReadyTimeout)
	defer cancel()
	for i := range c.members {
		if err := c.waitAnswering(ctx, i); err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	endpoints := make([]string, len(c.members))
	for i, m := range c.members {
		endpoints[i] = m.ClientURL
	}
	return endpoints
}

// TLS is a client configuration trusting the cluster's CA and presenting its client certificate. Each
// call returns a new copy, which the caller may change.
func (c *Cluster) TLS() *tls.Config { return c.tls.Clone() }

// CAFile is the CA certificate that signed every member's and the client's certificate.
func (c *Cluster) CAFile() string { return c.caFile }

// CertFile is the client certificate (CN leasegate-multicluster), for a controller that loads files.
func (c *Cluster) CertFile() string { return c.cert }

// KeyFile is the client certificate's key.
func (c *Cluster) KeyFile() string { return c.key }

// Member is member i's addresses and files.
func (c *Cluster) Member(i int) Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[i].Member
}

// Client is a new client over every member; the caller closes it. It logs nothing: a harness client's
// retry warnings during a kill would only bury the test's own output.
func (c *Cluster) Client() (*clientv3.Client, error) { return c.newClient(c.Endpoints()...) }

func (c *Cluster) newClient(endpoints ...string) (*clientv3.Client, error) {
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		TLS:         c.TLS(),
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("creating an etcd client for %v: %w", endpoints, err)
	}
	return client, nil
}

// Kill sends member i SIGKILL, as a crashed machine would stop, and waits for it to exit.
func (c *Cluster) Kill(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.members[i]
	if m.process == nil {
		return fmt.Errorf("etcd member %s is not running", m.Name)
	}
	m.process.Stop()
	m.process, m.paused = nil, false
	return nil
}

// Restart starts a killed member i again on its data dir, rejoining the cluster it left, and waits until
// it answers.
func (c *Cluster) Restart(i int) error {
	if err := c.start(i, "existing"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), etcdReadyTimeout)
	defer cancel()
	return c.waitAnswering(ctx, i)
}

// Pause stops member i with SIGSTOP: its connections stay open but nothing answers, the way a member
// stalled by its machine (or a long GC pause) looks to its peers and clients.
func (c *Cluster) Pause(i int) error { return c.signal(i, syscall.SIGSTOP, true) }

// Resume continues member i after Pause.
func (c *Cluster) Resume(i int) error { return c.signal(i, syscall.SIGCONT, false) }

func (c *Cluster) signal(i int, sig syscall.Signal, paused bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.members[i]
	if m.process == nil {
		return fmt.Errorf("etcd member %s is not running", m.Name)
	}
	if err := m.process.Signal(sig); err != nil {
		return fmt.Errorf("sending %v to etcd member %s: %w", sig, m.Name, err)
	}
	m.paused = paused
	return nil
}

// LeaderIndex is the index of the member the running, unpaused members say is the raft leader. While
// no member knows a leader (an election is under way) it asks again, until ctx is done.
func (c *Cluster) LeaderIndex(ctx context.Context) (int, error) {
	var last error
	for {
		for _, i := range c.up() {
			m := c.Member(i)
			statusCtx, cancel := context.WithTimeout(ctx, time.Second)
			resp, err := c.status.Status(statusCtx, m.ClientURL)
			cancel()
			if err != nil {
				last = fmt.Errorf("etcd member %s: %w", m.Name, err)
				continue
			}
			if resp.Leader == 0 {
				last = fmt.Errorf("etcd member %s knows no leader", m.Name)
				continue
			}
			if j := c.indexOf(resp.Leader); j >= 0 {
				return j, nil
			}
			last = fmt.Errorf("etcd member %s names leader %x, which is no member the harness started", m.Name, resp.Leader)
		}
		if last == nil {
			last = errors.New("every etcd member is killed or paused")
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("finding the etcd leader: %w (last: %v)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop kills every member. It removes nothing: the caller owns dir.
func (c *Cluster) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.members {
		if m.process != nil {
			m.process.Stop() // SIGKILL ends a stopped process too
			m.process, m.paused = nil, false
		}
	}
	if c.status != nil {
		_ = c.status.Close()
		c.status = nil
	}
}

func (c *Cluster) up() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var up []int
	for i, m := range c.members {
		if m.process != nil && !m.paused {
			up = append(up, i)
		}
	}
	return up
}

func (c *Cluster) indexOf(id uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, m := range c.members {
		if m.ID == id {
			return i
		}
	}
	return -1
}

// start runs member i with state "new" when the cluster is formed and "existing" when it rejoins; a
// member with a data dir ignores the initial-cluster flags, but they stay the same so they never lie.
func (c *Cluster) start(i int, state string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.members[i]
	if m.process != nil {
		return fmt.Errorf("etcd member %s is already running", m.Name)
	}
	cmd := exec.Command(c.binary,
		"--name", m.Name,
		"--data-dir", m.DataDir,
		"--listen-client-urls", m.ClientURL,
		"--advertise-client-urls", m.ClientURL,
		"--listen-peer-urls", m.PeerURL,
		"--initial-advertise-peer-urls", m.PeerURL,
		"--initial-cluster", c.initial,
		"--initial-cluster-state", state,
		"--initial-cluster-token", c.token,
		"--client-cert-auth",
		"--trusted-ca-file", c.caFile,
		"--cert-file", m.CertFile,
		"--key-file", m.KeyFile,
		"--peer-client-cert-auth",
		"--peer-trusted-ca-file", c.caFile,
		"--peer-cert-file", m.CertFile,
		"--peer-key-file", m.KeyFile,
		"--heartbeat-interval", "100",
		"--election-timeout", "1000",
		"--logger", "zap",
		"--log-level", "warn",
		"--log-outputs", m.LogFile,
	)
	// Its own process group keeps a terminal's Ctrl-C from reaching the members before the test has
	// reported; Pdeathsig kills them when the test process dies without calling Stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p, err := process.StartProcess(cmd)
	if err != nil {
		return fmt.Errorf("starting etcd member %s from %s: %w", m.Name, c.binary, err)
	}
	m.process, m.paused = p, false
	return nil
}

// waitAnswering waits until member i answers Status and records its ID.
func (c *Cluster) waitAnswering(ctx context.Context, i int) error {
	c.mu.Lock()
	m := c.members[i]
	p := m.process
	c.mu.Unlock()
	if p == nil {
		return fmt.Errorf("etcd member %s is not running", m.Name)
	}
	var last error
	for {
		statusCtx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := c.status.Status(statusCtx, m.ClientURL)
		cancel()
		if err == nil {
			c.mu.Lock()
			m.ID = resp.Header.MemberId
			c.mu.Unlock()
			return nil
		}
		last = err
		select {
		case <-p.Exited():
			return fmt.Errorf("etcd member %s exited with code %d before answering:\n%s", m.Name, p.ExitCode(), m.logTail(p))
		case <-ctx.Done():
			return fmt.Errorf("etcd member %s did not answer Status at %s: %v\n%s", m.Name, m.ClientURL, last, m.logTail(p))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// logTail is the end of the member's log file and of anything it wrote before its logger was set up.
func (m *etcdMember) logTail(p *process.Process) string {
	const lines = 30
	var b strings.Builder
	if data, err := os.ReadFile(m.LogFile); err == nil {
		fmt.Fprintf(&b, "--- %s ---\n%s\n", m.LogFile, tailLines(string(data), lines))
	} else {
		fmt.Fprintf(&b, "--- %s: %v ---\n", m.LogFile, err)
	}
	if out := strings.TrimSpace(p.Logs()); out != "" {
		fmt.Fprintf(&b, "--- stdout and stderr ---\n%s\n", tailLines(out, lines))
	}
	return b.String()
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// writePKI writes a CA, a certificate per member (server and client use, as it serves clients and both
// serves and dials peers) and the client certificate, and builds the client TLS configuration.
func (c *Cluster) writePKI() error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTemplate := certs.Template("leasegate-etcd-ca")
	caTemplate.IsCA = true
	caTemplate.BasicConstraintsValid = true
	caTemplate.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("signing the CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	c.caFile = filepath.Join(c.dir, "ca.crt")
	if err := os.WriteFile(c.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		return err
	}
	issue := func(template *x509.Certificate, certFile, keyFile string) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		der, err := x509.CreateCertificate(rand.Reader, template, ca, &key.PublicKey, caKey)
		if err != nil {
			return fmt.Errorf("signing %s: %w", template.Subject.CommonName, err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return err
		}
		if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
			return err
		}
		return os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
	}
	for _, m := range c.members {
		template := certs.Template(m.Name)
		template.DNSNames = []string{"localhost"}
		template.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		template.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		if err := issue(template, m.CertFile, m.KeyFile); err != nil {
			return err
		}
	}
	client := certs.Template("leasegate-multicluster")
	client.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	c.cert, c.key = filepath.Join(c.dir, "client.crt"), filepath.Join(c.dir, "client.key")
	if err := issue(client, c.cert, c.key); err != nil {
		return err
	}
	pair, err := tls.LoadX509KeyPair(c.cert, c.key)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	c.tls = &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots, MinVersion: tls.VersionTLS12}
	return nil
}
