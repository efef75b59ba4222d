package framework

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/leasegate/leasegate/internal/lease"
)

// BuildAgent builds cmd/agent into dir and returns the binary's path.
func BuildAgent(dir string) (string, error) {
	return buildBinary(dir, "./cmd/agent", "leasegate-agent")
}

// BuildWebhook builds cmd/webhook into dir and returns the binary's path.
func BuildWebhook(dir string) (string, error) {
	return buildBinary(dir, "./cmd/webhook", "leasegate-webhook")
}

func buildBinary(dir, pkg, name string) (string, error) {
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg)
	cmd.Dir = RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if output, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, output)
	}
	return out, nil
}

// AgentOptions are the settings a test varies; the rest come from the pod.
type AgentOptions struct {
	Timing     lease.Timing
	Readiness  string // "" keeps the agent's default
	StatusFile string
	// ExtraEnv is appended last, so it can override or break any setting.
	ExtraEnv []string
}

// Agent is a running leasegate-agent process.
type Agent struct {
	Pod  *Pod
	URL  string // http://127.0.0.1:<port>
	cmd  *exec.Cmd
	logs *syncBuffer

	exited   chan struct{}
	exitCode int
}

// StartAgent runs the agent binary as pod would run it: its environment is what the webhook injects and
// the downward API fills in, its credentials the pod-bound token.
func StartAgent(binary string, pod *Pod, leaseName string, opts AgentOptions) (*Agent, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"POD_NAME=" + pod.Name,
		"POD_NAMESPACE=" + pod.Namespace,
		"POD_UID=" + pod.UID,
		"LEASEGATE_LEASE=" + leaseName,
		"LEASEGATE_LISTEN=127.0.0.1:" + strconv.Itoa(port),
		"KUBECONFIG=" + pod.Kubeconfig,
	}
	if t := opts.Timing; t != (lease.Timing{}) {
		env = append(env, "LEASEGATE_LEASE_DURATION="+t.LeaseDuration.String(),
			"LEASEGATE_RENEW_DEADLINE="+t.RenewDeadline.String(), "LEASEGATE_RETRY_PERIOD="+t.RetryPeriod.String())
	}
	if opts.Readiness != "" {
		env = append(env, "LEASEGATE_READINESS="+opts.Readiness)
	}
	if opts.StatusFile != "" {
		env = append(env, "LEASEGATE_STATUS_FILE="+opts.StatusFile)
	}
	env = append(env, opts.ExtraEnv...)
	return startAgentProcess(binary, pod, env, port)
}

// StartInjectedAgent runs the agent binary with the environment the webhook injected into pod's
// leasegate-agent container, resolving the downward API as kubelet would; only its listen address
// (a free loopback port, so several agents share this host) and credentials (identity's pod-bound
// token) differ from what it would have in the pod.
func StartInjectedAgent(binary string, pod *corev1.Pod, identity *Pod) (*Agent, error) {
	var agent *corev1.Container
	for _, containers := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range containers {
			if containers[i].Name == "leasegate-agent" {
				agent = &containers[i]
			}
		}
	}
	if agent == nil {
		return nil, fmt.Errorf("pod %s/%s has no leasegate-agent container", pod.Namespace, pod.Name)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	downward := map[string]string{"metadata.name": pod.Name, "metadata.namespace": pod.Namespace, "metadata.uid": string(pod.UID)}
	env := []string{"PATH=" + os.Getenv("PATH")}
	for _, e := range agent.Env {
		value := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			value = downward[e.ValueFrom.FieldRef.FieldPath]
		}
		env = append(env, e.Name+"="+value)
	}
	env = append(env, "LEASEGATE_LISTEN=127.0.0.1:"+strconv.Itoa(port), "KUBECONFIG="+identity.Kubeconfig)
	return startAgentProcess(binary, identity, env, port)
}

func startAgentProcess(binary string, pod *Pod, env []string, port int) (*Agent, error) {
	a := &Agent{Pod: pod, URL: fmt.Sprintf("http://127.0.0.1:%d", port), logs: &syncBuffer{}, exited: make(chan struct{})}
	a.cmd = exec.Command(binary)
	a.cmd.Env = env
	a.cmd.Stdout, a.cmd.Stderr = a.logs, a.logs
	if err := a.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		_ = a.cmd.Wait()
		a.exitCode = a.cmd.ProcessState.ExitCode()
		close(a.exited)
	}()
	return a, nil
}

// Leader is the agent's /leader answer.
func (a *Agent) Leader() (lease.Status, error) {
	var s lease.Status
	body, _, err := a.Get("/leader")
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(body, &s)
}

// IsLeader is a convenience for polling: false on any error.
func (a *Agent) IsLeader() bool {
	s, err := a.Leader()
	return err == nil && s.IsLeader
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

// Get fetches one of the agent's endpoints.
func (a *Agent) Get(path string) ([]byte, int, error) {
	resp, err := httpClient.Get(a.URL + path)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return body, resp.StatusCode, err
}

// Metric returns the value of an unlabelled-by-us series from /metrics, such as
// "leasegate_agent_is_leader".
func (a *Agent) Metric(name string) (float64, error) {
	body, _, err := a.Get("/metrics")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			fields := strings.Fields(line)
			return strconv.ParseFloat(fields[len(fields)-1], 64)
		}
	}
	return 0, fmt.Errorf("no series %s in /metrics", name)
}

// Signal sends sig to the agent process.
func (a *Agent) Signal(sig syscall.Signal) error { return a.cmd.Process.Signal(sig) }

// Pid is the agent's process id.
func (a *Agent) Pid() int { return a.cmd.Process.Pid }

// Exited is closed when the process has exited.
func (a *Agent) Exited() <-chan struct{} { return a.exited }

// ExitCode is the exit status, valid once Exited is closed; -1 when killed by a signal.
func (a *Agent) ExitCode() int { return a.exitCode }

// Logs is everything the agent wrote to stdout and stderr so far.
func (a *Agent) Logs() string { return a.logs.String() }

// Stop kills the agent if it still runs and waits for it.
func (a *Agent) Stop() {
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
}

// WaitExit waits up to timeout for the process to exit and reports whether it did.
func (a *Agent) WaitExit(ctx context.Context, timeout time.Duration) bool {
	select {
	case <-a.exited:
		return true
	case <-time.After(timeout):
		return false
	case <-ctx.Done():
		return false
	}
}

// RSSBytes is the agent's resident set size from /proc.
func (a *Agent) RSSBytes() (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", a.Pid()))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", a.Pid())
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
