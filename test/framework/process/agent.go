package process

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/lease"
)

// AgentOptions are the settings a test varies; the rest come from the pod.
type AgentOptions struct {
	Timing     lease.Timing
	Readiness  string // "" keeps the agent's default
	StatusFile string
	// Elections, when set, are the agent's several elections (LEASEGATE_ELECTIONS) instead of one lease.
	Elections []lease.ElectionSpec
	// GateUpstream, when set, puts the mutation gate in front of this address, on a free loopback port.
	GateUpstream string
	// GateGRPCMethods, when set, is LEASEGATE_GATE_GRPC_METHODS.
	GateGRPCMethods string
	// LeaseKind, when set, is LEASEGATE_LEASE_KIND (MultiClusterLease: one leader across clusters).
	LeaseKind string
	// PodIP, when set, is POD_IP, the address the agent, leading, names for its followers' waits; unset,
	// they reach it on its loopback listen address.
	PodIP string
}

// Agent is a running leasegate-agent process.
type Agent struct {
	*Process
	Pod *Pod
	URL string // http://127.0.0.1:<port>
	// GateURL is the mutation gate, http://127.0.0.1:<port>, when it has one.
	GateURL string
}

// StartAgent runs the agent binary as pod would run it: its environment is what the webhook injects and
// the downward API fills in, its credentials the pod-bound token. leaseName is unused with opts.Elections.
func StartAgent(binary string, pod *Pod, leaseName string, opts AgentOptions) (*Agent, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"POD_NAME=" + pod.Name,
		"POD_NAMESPACE=" + pod.Namespace,
		"POD_UID=" + pod.UID,
		"LEASEGATE_LISTEN=127.0.0.1:" + strconv.Itoa(port),
		"KUBECONFIG=" + pod.Kubeconfig,
	}
	if opts.Elections != nil {
		env = append(env, "LEASEGATE_ELECTIONS="+lease.EncodeElections(opts.Elections))
	} else {
		env = append(env, "LEASEGATE_LEASE="+leaseName)
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
	if opts.LeaseKind != "" {
		env = append(env, "LEASEGATE_LEASE_KIND="+opts.LeaseKind)
	}
	if opts.PodIP != "" {
		env = append(env, "POD_IP="+opts.PodIP)
	}
	gatePort := 0
	if opts.GateUpstream != "" {
		if gatePort, err = FreePort(); err != nil {
			return nil, err
		}
		env = append(env, "LEASEGATE_GATE_UPSTREAM="+opts.GateUpstream, "LEASEGATE_GATE_LISTEN=127.0.0.1:"+strconv.Itoa(gatePort))
		if opts.GateGRPCMethods != "" {
			env = append(env, "LEASEGATE_GATE_GRPC_METHODS="+opts.GateGRPCMethods)
		}
	}
	a, err := startAgentProcess(binary, pod, env, port)
	if err == nil && gatePort != 0 {
		a.GateURL = fmt.Sprintf("http://127.0.0.1:%d", gatePort)
	}
	return a, err
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
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	// The pod's IP is its loopback address here, where its listen address is too.
	downward := map[string]string{"metadata.name": pod.Name, "metadata.namespace": pod.Namespace, "metadata.uid": string(pod.UID), "status.podIP": "127.0.0.1"}
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
	cmd := exec.Command(binary)
	cmd.Env = env
	p, err := StartProcess(cmd)
	if err != nil {
		return nil, err
	}
	return &Agent{Process: p, Pod: pod, URL: fmt.Sprintf("http://127.0.0.1:%d", port)}, nil
}

// Leader is the agent's /leader answer.
func (a *Agent) Leader() (lease.Status, error) {
	var s lease.Status
	body, _, err := a.Get(contract.AgentLeaderPath)
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(body, &s)
}

// Election is the agent's /leader/<name> answer, for one of several elections.
func (a *Agent) Election(name string) (lease.Status, error) {
	var s lease.Status
	body, code, err := a.Get(contract.AgentLeaderPath + "/" + name)
	if err != nil {
		return s, err
	}
	if code != http.StatusOK {
		return s, fmt.Errorf("%s/%s: %d %s", contract.AgentLeaderPath, name, code, body)
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
	body, _, err := a.Get(contract.AgentMetricsPath)
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
