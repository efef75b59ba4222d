package inject

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/gate/rules"
)

// gatePlan is the mutation gate injection sets up: the app's named port moves to the agent, which
// proxies it to the app on loopback.
type gatePlan struct {
	// portName is the app container port the gate takes over; a Service's named targetPort follows it.
	portName  string
	container string // the app container that declared it
	appPort   int32
	listen    int32
	protocol  corev1.Protocol
	// methods, grpcMethods, election and bodyTimeout are the annotations' values, "" for the agent's
	// defaults.
	methods, grpcMethods, election, bodyTimeout string
}

// GateStatus is what the status annotation records of the gate.
type GateStatus struct {
	Port    string `json:"port"`
	AppPort int32  `json:"appPort"`
	Listen  int32  `json:"listen"`
}

// planGate reads leasegate.io/gate and its companions. agentPort is taken; the gate listens on the next
// port no container declares.
func planGate(pod *corev1.Pod, elections []election, agentPort int32, path *field.Path) (*gatePlan, field.ErrorList) {
	name, ok := pod.Annotations[contract.Gate]
	if !ok {
		for _, key := range []string{contract.GateMethods, contract.GateGRPCMethods, contract.GateElection, contract.GateBodyTimeout} {
			if _, set := pod.Annotations[key]; set {
				return nil, field.ErrorList{field.Forbidden(path.Key(key), "set "+contract.Gate+" to the app's port name first: this tunes the mutation gate")}
			}
		}
		return nil, nil
	}
	g := &gatePlan{
		portName: name, methods: pod.Annotations[contract.GateMethods],
		grpcMethods: pod.Annotations[contract.GateGRPCMethods], election: pod.Annotations[contract.GateElection],
		bodyTimeout: pod.Annotations[contract.GateBodyTimeout],
	}
	var errs field.ErrorList
	for _, c := range pod.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == name {
				g.container, g.appPort, g.protocol = c.Name, port.ContainerPort, port.Protocol
			}
		}
	}
	switch {
	case g.container == "":
		errs = append(errs, field.Invalid(path.Key(contract.Gate), name,
			"no app container declares a port of this name: name the port your Service targets (containers[].ports[].name) and give that name here"))
	case g.protocol != "" && g.protocol != corev1.ProtocolTCP:
		errs = append(errs, field.Invalid(path.Key(contract.Gate), name, fmt.Sprintf("port %s is %s; the gate proxies HTTP and gRPC over TCP", name, g.protocol)))
	}
	// The agent's own rules (package gate), so that what admission accepts the agent starts with. Each
	// annotation is checked on its own, so an error names the annotation at fault.
	_, methodsErr := rules.ParseMethods(cmp.Or(g.methods, strings.Join(rules.DefaultMethods, ",")))
	for _, check := range []struct {
		key string
		err error
	}{
		{contract.GateMethods, methodsErr},
		{contract.GateGRPCMethods, rules.ParseGRPCMethods(cmp.Or(g.grpcMethods, "*"))},
		{contract.GateElection, rules.CheckElection(g.election, electionNames(elections))},
		{contract.GateBodyTimeout, checkBodyTimeout(g.bodyTimeout)},
	} {
		if check.err != nil {
			errs = append(errs, field.Invalid(path.Key(check.key), pod.Annotations[check.key], check.err.Error()))
		}
	}
	g.listen = freePort(pod, agentPort+1)
	return g, errs
}

func electionNames(elections []election) []string {
	names := make([]string, 0, len(elections))
	for _, e := range elections {
		names = append(names, e.name)
	}
	return names
}

// checkBodyTimeout checks leasegate.io/gate-body-timeout: empty for the agent's default, or a Go
// duration the agent accepts.
func checkBodyTimeout(value string) error {
	if value == "" {
		return nil
	}
	d, err := time.ParseDuration(value)
	if err != nil {
		return fmt.Errorf("want a Go duration such as %s", rules.DefaultBodyTimeout)
	}
	return rules.CheckBodyTimeout(d)
}

// apply moves the named port from the app container to the agent: a Service whose targetPort is the
// name now reaches the gate. The app's own probes that used the name are pointed at the gate, which
// passes their GETs on every replica, so an app that listens on loopback only (and cannot be reached
// past the gate) stays probed.
func (g *gatePlan) apply(pod *corev1.Pod, agent *corev1.Container) {
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if c.Name != g.container {
			continue
		}
		c.Ports = slices.DeleteFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == g.portName })
		for _, probe := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
			if probe != nil {
				g.renamePort(&probe.ProbeHandler)
			}
		}
	}
	agent.Ports = append(agent.Ports, corev1.ContainerPort{Name: g.portName, ContainerPort: g.listen, Protocol: corev1.ProtocolTCP})
	agent.Env = append(agent.Env,
		corev1.EnvVar{Name: contract.EnvGateUpstream, Value: "127.0.0.1:" + strconv.Itoa(int(g.appPort))},
		corev1.EnvVar{Name: contract.EnvGateListen, Value: ":" + strconv.Itoa(int(g.listen))},
	)
	for _, v := range []corev1.EnvVar{
		{Name: contract.EnvGateMethods, Value: g.methods},
		{Name: contract.EnvGateGRPCMethods, Value: g.grpcMethods},
		{Name: contract.EnvGateElection, Value: g.election},
		{Name: contract.EnvGateBodyTimeout, Value: g.bodyTimeout},
	} {
		if v.Value != "" {
			agent.Env = append(agent.Env, v)
		}
	}
}

func (g *gatePlan) renamePort(h *corev1.ProbeHandler) {
	byName := func(port *intstr.IntOrString) {
		if port.Type == intstr.String && port.StrVal == g.portName {
			*port = intstr.FromInt32(g.listen)
		}
	}
	if h.HTTPGet != nil {
		byName(&h.HTTPGet.Port)
	}
	if h.TCPSocket != nil {
		byName(&h.TCPSocket.Port)
	}
}

func (g *gatePlan) status() *GateStatus {
	return &GateStatus{Port: g.portName, AppPort: g.appPort, Listen: g.listen}
}
