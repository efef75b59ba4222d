// Package process starts, restarts and stops what the suites and measurement programs run as processes of
// their own: a real kube-apiserver and etcd, leasegate-agent and leasegate-webhook, Prometheus; and gives
// the pods the agents act for real pod-bound service account tokens. What it runs, it finds through
// package checkout. It is test code; the product never imports it.
package process

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/leasegate/leasegate/test/framework/checkout"
	"github.com/leasegate/leasegate/test/framework/observe"
)

// ControlPlane is a running kube-apiserver and etcd.
type ControlPlane struct {
	env    *envtest.Environment
	Config *rest.Config // system:masters
	Client kubernetes.Interface
	// restarted are the processes RestartAPIServer and RestartEtcd started in place of envtest's, by
	// command name: envtest does not know them, so Stop stops them first.
	restarted map[string]*restartedProcess
	logs      []string // their output, removed by Stop
	lastStart StartReport
}

// StartReport is how the process the last restart started came back: when it started, when the API
// server first answered a readiness poll at all (whatever the answer; each poll is given a second, so a
// server whose port is open but which is too busy to answer within it has not answered), when it answered
// ready, the CPU time the restarted process had spent by then, and the readiness checks the API server's
// last answer before ready still failed. A restarted kube-apiserver binds its port early in its start and
// serves once it is built, and then every client that comes back is at its door: the CPU and the checks
// say whether its own start or the clients held its answer.
type StartReport struct {
	Started, FirstAnswer, Ready time.Time
	CPU                         time.Duration
	// Failing are the checks (/readyz?verbose) the last answer that listed them before ready said
	// failed, none if the first such answer was ready.
	Failing []string
	// Served is the restarted kube-apiserver's apiserver_request_total, scraped as soon as it answered
	// ready (nil after an etcd restart, whose API server kept its counters, or when that scrape failed):
	// its counters started with the new process, so they hold the requests it served before it was ready
	// (those that reached its handlers: not a request its authorizer refused, nor a watch still open).
	Served observe.Metrics
}

// LastStart is the StartReport of the last restart that returned ready.
func (c *ControlPlane) LastStart() StartReport { return c.lastStart }

// StartControlPlane starts kube-apiserver and etcd through envtest, with the CRDs in crdDirs installed.
// The binaries come from KUBEBUILDER_ASSETS when the user sets it, otherwise from what
// `make controlplane` built into bin/ at the versions pinned in hack/versions.env.
func StartControlPlane(crdDirs ...string) (*ControlPlane, error) {
	return StartControlPlaneWithFlags(nil, crdDirs...)
}

// StartControlPlaneWithFlags is StartControlPlane with kube-apiserver flags (name without "--" -> value)
// set besides envtest's own.
func StartControlPlaneWithFlags(apiServerFlags map[string]string, crdDirs ...string) (*ControlPlane, error) {
	assets, err := checkout.ControlPlaneAssets()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets, CRDDirectoryPaths: crdDirs, ErrorIfCRDPathMissing: true}
	for name, value := range apiServerFlags {
		env.ControlPlane.GetAPIServer().Configure().Set(name, value)
	}
	config, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", assets, err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &ControlPlane{env: env, Config: config, Client: client}, nil
}

// Address is the API server's host:port.
func (c *ControlPlane) Address() string {
	u, err := url.Parse(c.Config.Host)
	if err != nil || u.Host == "" {
		return c.Config.Host
	}
	return u.Host
}

// EtcdURL is the address of the API server's etcd (plain HTTP on loopback), for tests that want an etcd
// of their own to write to: they must keep to keys outside the API server's prefix (/registry).
func (c *ControlPlane) EtcdURL() string { return c.env.ControlPlane.Etcd.URL.String() }

// Stop stops the API server and etcd and removes their data.
func (c *ControlPlane) Stop() error {
	for _, name := range []string{apiServerCommand, etcdCommand} { // the API server first, as envtest does
		if p := c.restarted[name]; p != nil {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			<-p.exited
		}
	}
	for _, log := range c.logs {
		_ = os.Remove(log)
	}
	return c.env.Stop()
}

// RestartLog is the end (at most 4 KiB) of the output of each process RestartAPIServer and RestartEtcd
// started, for a test that sees one not come back to say why.
func (c *ControlPlane) RestartLog() string {
	var b strings.Builder
	for _, log := range c.logs {
		data, _ := os.ReadFile(log)
		fmt.Fprintf(&b, "%s:\n%s\n", log, data[max(0, len(data)-4096):])
	}
	return b.String()
}

const apiServerCommand, etcdCommand = "kube-apiserver", "etcd"

// restartedProcess is a process started in place of one of envtest's.
type restartedProcess struct {
	cmd     *exec.Cmd
	log     string
	started time.Time
	exited  chan struct{} // closed once reaped
}

// RestartAPIServer kills kube-apiserver (SIGKILL: no graceful shutdown, every connection and watch drops at
// once, as when its node fails) and starts it again with the same flags, certificates and etcd. It returns
// when the new one answered ready.
func (c *ControlPlane) RestartAPIServer(ctx context.Context) (time.Time, error) {
	return c.restart(ctx, apiServerCommand, 0)
}

// RestartAPIServerAfter is RestartAPIServer with kube-apiserver left down for down before it is started
// again: an outage of at least that long, whatever the time the new one takes to start.
func (c *ControlPlane) RestartAPIServerAfter(ctx context.Context, down time.Duration) (time.Time, error) {
	return c.restart(ctx, apiServerCommand, down)
}

// RestartEtcd kills etcd (SIGKILL) and starts it again on the same data directory and ports, while
// kube-apiserver keeps running and reconnects to it. It returns when the API server answered ready again
// (its readiness includes etcd's).
func (c *ControlPlane) RestartEtcd(ctx context.Context) (time.Time, error) {
	return c.restart(ctx, etcdCommand, 0)
}

// restartAttempts bounds the starts of a restarted process whose port was taken: envtest's ports are in
// the kernel's ephemeral range, and while nothing listens on one, a client dialling it again and again
// (thousands of electors) can be given that very port as its own for a moment (a TCP self-connect).
const restartAttempts = 20

// restart kills the child process named name, starts its executable again with its command line once
// down has passed since the kill, and waits until the API server is ready.
func (c *ControlPlane) restart(ctx context.Context, name string, down time.Duration) (time.Time, error) {
	pid := children()[name]
	if pid == 0 {
		return time.Time{}, fmt.Errorf("no %s running under this process", name)
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return time.Time{}, err
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return time.Time{}, err
	}
	args := strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")[1:]
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return time.Time{}, fmt.Errorf("killing %s: %w", name, err)
	}
	killed := time.Now()
	if old := c.restarted[name]; old != nil {
		<-old.exited
	}
	// Gone once reaped (by envtest, or above for one restarted before): only then are its ports free.
	for children()[name] == pid {
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	case <-time.After(time.Until(killed.Add(down))):
	}
	for attempt := 1; ; attempt++ {
		p, err := c.start(name, exe, args)
		if err != nil {
			return time.Time{}, err
		}
		report, err := c.waitReady(ctx, p)
		if !errors.Is(err, errExited) {
			if err == nil {
				if name == apiServerCommand {
					report.Served = c.requestCounts(ctx)
				}
				c.lastStart = report
			}
			return report.Ready, err
		}
		data, _ := os.ReadFile(p.log)
		if attempt == restartAttempts || !strings.Contains(string(data), "address already in use") {
			return time.Time{}, fmt.Errorf("%s exited after its restart:\n%s", name, data[max(0, len(data)-4096):])
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// start starts exe as the process name, its output to a file (an API server under load logs without end).
func (c *ControlPlane) start(name, exe string, args []string) (*restartedProcess, error) {
	log, err := os.CreateTemp("", "leasegate-"+name+"-*.log")
	if err != nil {
		return nil, err
	}
	c.logs = append(c.logs, log.Name())
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // as envtest starts it: a terminal's ^C is for the test
	err = cmd.Start()
	_ = log.Close() // the child has its own descriptor
	if err != nil {
		return nil, fmt.Errorf("starting %s again: %w", name, err)
	}
	p := &restartedProcess{cmd: cmd, log: log.Name(), started: time.Now(), exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	if c.restarted == nil {
		c.restarted = map[string]*restartedProcess{}
	}
	c.restarted[name] = p
	return p, nil
}

var errExited = errors.New("exited")

// waitReady polls the API server's /readyz until it answers ok, until ctx's deadline or for two minutes
// when it has none, unless p exits; it reports how p came back.
func (c *ControlPlane) waitReady(ctx context.Context, p *restartedProcess) (StartReport, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(2 * time.Minute)
	}
	report := StartReport{Started: p.started}
	for {
		attempt, cancel := context.WithTimeout(ctx, time.Second)
		// No retries inside the poll: client-go's REST client would wait out a 429's Retry-After, past
		// the poll's second, and the answer would be lost.
		result := c.Client.CoreV1().RESTClient().Get().AbsPath("/readyz").Param("verbose", "").MaxRetries(0).Do(attempt)
		cancel()
		body, err := result.Raw()
		var code int
		if result.StatusCode(&code); code != 0 && report.FirstAnswer.IsZero() {
			report.FirstAnswer = time.Now()
		}
		if err == nil {
			report.Ready = time.Now()
			report.CPU, _ = CPUTime(p.cmd.Process.Pid)
			return report, nil
		}
		if failing, verbose := failingChecks(body); verbose {
			report.Failing = failing
		}
		if time.Now().After(deadline) {
			return report, fmt.Errorf("kube-apiserver not ready %s after a restart: %w (%w); the restarted processes' output is in %s",
				time.Since(p.started).Round(time.Second), err, context.DeadlineExceeded, strings.Join(c.logs, ", "))
		}
		select {
		case <-ctx.Done():
			return report, ctx.Err()
		case <-p.exited:
			return report, errExited
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// failingChecks are the checks a verbose health answer lists as failed ("[-]etcd failed: reason
// withheld"); verbose is false for an answer that lists no check at all (a 429, a 403), which says
// nothing about them.
func failingChecks(body []byte) (failing []string, verbose bool) {
	for line := range strings.Lines(string(body)) {
		failed := strings.HasPrefix(line, "[-]")
		if !failed && !strings.HasPrefix(line, "[+]") {
			continue
		}
		verbose = true
		if name := strings.Fields(line[len("[-]"):]); failed && len(name) > 0 {
			failing = append(failing, name[0])
		}
	}
	return failing, verbose
}

// Metrics are the API server's own metrics.
func (c *ControlPlane) Metrics(ctx context.Context) (observe.Metrics, error) {
	body, err := c.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	return observe.ParseMetrics(body)
}

// requestCounts is the API server's apiserver_request_total, scraped now (given at most two seconds, as a
// restarted server's answer must not wait on it), or nil if the scrape failed.
func (c *ControlPlane) requestCounts(ctx context.Context) observe.Metrics {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	metrics, err := c.Metrics(ctx)
	const family = "apiserver_request_total"
	if err != nil || metrics[family] == nil {
		return nil // a parse that failed part way returns what it read so far: not all the counts
	}
	return observe.Metrics{family: metrics[family]}
}

// RSSBytes are the resident set sizes of the API server and etcd, which envtest starts as this process's
// children; zero for one not found.
func (c *ControlPlane) RSSBytes() (apiServer, etcd int64) {
	pids := children()
	if pid := pids[apiServerCommand]; pid != 0 {
		apiServer, _ = RSSBytes(pid)
	}
	if pid := pids[etcdCommand]; pid != 0 {
		etcd, _ = RSSBytes(pid)
	}
	return apiServer, etcd
}

// children are this process's child processes that still run, pid by command name.
func children() map[string]int {
	pids := map[string]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, stat := range stats {
		data, err := os.ReadFile(stat)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after its closing parenthesis.
		lparen, rparen := strings.IndexByte(string(data), '('), strings.LastIndexByte(string(data), ')')
		fields := strings.Fields(string(data[rparen+1:]))
		if lparen < 0 || rparen < lparen || len(fields) < 2 || fields[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		if fields[0] == "Z" { // exited, not yet reaped
			continue
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(data[:lparen])))
		pids[string(data[lparen+1:rparen])] = pid
	}
	return pids
}
