package inject

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/contract"
)

// agentPod is a pod with the agent as injection makes it (a native sidecar) and env as "NAME=value"
// pairs, plus a status annotation saying something else entirely.
func agentPod(env ...string) *corev1.Pod {
	agent := corev1.Container{Name: AgentContainer, RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		agent.Env = append(agent.Env, corev1.EnvVar{Name: name, Value: value})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-a", UID: "uid-a", Annotations: map[string]string{
			contract.Status: `{"lease":"cert-manager-controller","leaseSeconds":{"cert-manager-controller":86400},"restartOnLoss":"","leaseKind":"MultiClusterLease"}`,
		}},
		Spec: corev1.PodSpec{InitContainers: []corev1.Container{agent}, Containers: []corev1.Container{{Name: "orders"}}},
	}
}

// What the injector records in the status annotation and what it puts in the agent's environment agree
// on every golden pod: the decisions read the latter.
func TestGivenToReadsWhatInjectionRecorded(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.injected")
	read := 0
	for _, file := range files {
		data, _ := os.ReadFile(file)
		if strings.HasPrefix(string(data), "# denied") || !strings.Contains(string(data), contract.Status) {
			continue
		}
		read++
		t.Run(filepath.Base(file), func(t *testing.T) {
			pod := readPod(t, file)
			recorded := StatusOf(pod)
			want := Given{Lease: recorded.Lease, Leases: recorded.Leases, LeaseKind: recorded.LeaseKind, RestartOnLoss: recorded.RestartOnLoss, LeaseSeconds: recorded.LeaseSeconds}
			got, ok := GivenTo(pod)
			if !ok || !reflect.DeepEqual(got, want) {
				t.Errorf("GivenTo() = %+v, %v; want %+v, true", got, ok, want)
			}
		})
	}
	if read < 10 {
		t.Fatalf("read %d injected goldens: the glob or the filter is wrong", read)
	}
}

// Pods injected by earlier versions (their goldens as those versions wrote them, before the status
// annotation recorded lease durations) are read from their agent's environment like any other.
func TestGivenToReadsPodsOfEarlierVersions(t *testing.T) {
	tests := []struct {
		file string
		want Given
	}{
		{"first-release-deployment-pod", Given{Lease: "orders", LeaseSeconds: map[string]int32{"orders": 15}}},
		{"takeover", Given{Lease: "billing", LeaseSeconds: map[string]int32{"billing": 7}}},
		{"classic-sidecar", Given{Lease: "gateway-active", LeaseSeconds: map[string]int32{"gateway-active": 15}}},
		{"elections", Given{
			Leases:       []string{"orders-poller", "orders-reconciler", "orders-snapshot-writer"},
			LeaseSeconds: map[string]int32{"orders-poller": 4, "orders-reconciler": 60, "orders-snapshot-writer": 15},
		}},
		{"on-loss-restart", Given{Lease: "scheduler", RestartOnLoss: "scheduler", LeaseSeconds: map[string]int32{"scheduler": 15}}},
		{"multicluster-lease", Given{Lease: "payouts", LeaseKind: "MultiClusterLease", RestartOnLoss: "payouts", LeaseSeconds: map[string]int32{"payouts": 5}}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			pod := readPod(t, filepath.Join("testdata", "before-lease-seconds", tt.file+".yaml.injected"))
			if recorded := StatusOf(pod); recorded.LeaseSeconds != nil {
				t.Fatalf("the fixture records leaseSeconds %v: it is not from before they were recorded", recorded.LeaseSeconds)
			}
			if got, ok := GivenTo(pod); !ok || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("GivenTo() = %+v, %v; want %+v, true", got, ok, tt.want)
			}
		})
	}
}

func TestGivenToReadsOnlyTheSpec(t *testing.T) {
	elections := `[{"name":"a","lease":"orders-a","leaseDuration":"20s","renewDeadline":"10s","retryPeriod":"2s"},{"name":"b","lease":"orders-b","leaseDuration":"30s","renewDeadline":"10s","retryPeriod":"2s"}]`
	withAgent := func(mutate func(*corev1.Pod)) *corev1.Pod {
		pod := agentPod("LEASEGATE_LEASE=orders", "LEASEGATE_LEASE_DURATION=15s")
		mutate(pod)
		return pod
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want Given
		ok   bool
	}{
		{"one lease, whatever the annotation says", agentPod("LEASEGATE_LEASE=orders", "LEASEGATE_LEASE_DURATION=15s"),
			Given{Lease: "orders", LeaseSeconds: map[string]int32{"orders": 15}}, true},
		{"several elections, one restarting the pod", agentPod("LEASEGATE_ELECTIONS="+elections, "LEASEGATE_ON_LOSS=restart", "LEASEGATE_ON_LOSS_ELECTION=b", "LEASEGATE_LEASE_KIND=Lease"),
			Given{Leases: []string{"orders-a", "orders-b"}, RestartOnLoss: "orders-b", LeaseSeconds: map[string]int32{"orders-a": 20, "orders-b": 30}}, true},
		{"the last of duplicate variables wins, as in the container", agentPod("LEASEGATE_LEASE=orders", "LEASEGATE_LEASE_DURATION=15s", "LEASEGATE_LEASE_DURATION=20s"),
			Given{Lease: "orders", LeaseSeconds: map[string]int32{"orders": 20}}, true},
		{"the agent as an app container (agent.nativeSidecar never)", withAgent(func(p *corev1.Pod) {
			agent := p.Spec.InitContainers[0]
			agent.RestartPolicy = nil
			p.Spec.InitContainers, p.Spec.Containers = nil, append(p.Spec.Containers, agent)
		}), Given{Lease: "orders", LeaseSeconds: map[string]int32{"orders": 15}}, true},
		{"the agent's name on an init container that runs to completion", withAgent(func(p *corev1.Pod) { p.Spec.InitContainers[0].RestartPolicy = nil }), Given{}, false},
		{"the agent's name on an ephemeral container only", withAgent(func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon(p.Spec.InitContainers[0])}}
			p.Spec.InitContainers = nil
		}), Given{}, false},
		{"only the status annotation", withAgent(func(p *corev1.Pod) { p.Spec.InitContainers = nil }), Given{}, false},
		{"a duration from a ConfigMap, which can change, is none", withAgent(func(p *corev1.Pod) {
			p.Spec.InitContainers[0].Env[1] = corev1.EnvVar{Name: contract.EnvLeaseDuration, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{Key: "d"}}}
		}), Given{}, false},
		{"a lease and several elections", agentPod("LEASEGATE_LEASE=orders", "LEASEGATE_LEASE_DURATION=15s", "LEASEGATE_ELECTIONS="+elections), Given{}, false},
		{"elections the agent refuses", agentPod(`LEASEGATE_ELECTIONS=[{"name":"a","lease":"orders","leaseDuration":"1.5s","renewDeadline":"1s","retryPeriod":"0.5s"}]`), Given{}, false},
		{"a duration that is not one", agentPod("LEASEGATE_LEASE=orders", "LEASEGATE_LEASE_DURATION=15"), Given{}, false},
		{"no duration", agentPod("LEASEGATE_LEASE=orders"), Given{}, false},
		{"an unknown lease kind", agentPod("LEASEGATE_LEASE=orders", "LEASEGATE_LEASE_DURATION=15s", "LEASEGATE_LEASE_KIND=ConfigMap"), Given{}, false},
		{"an unknown on-loss", agentPod("LEASEGATE_LEASE=orders", "LEASEGATE_LEASE_DURATION=15s", "LEASEGATE_ON_LOSS=reboot"), Given{}, false},
		{"restart on an election it does not run", agentPod("LEASEGATE_ELECTIONS="+elections, "LEASEGATE_ON_LOSS=restart", "LEASEGATE_ON_LOSS_ELECTION=c"), Given{}, false},
		{"restart without naming one of several elections", agentPod("LEASEGATE_ELECTIONS="+elections, "LEASEGATE_ON_LOSS=restart"), Given{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := GivenTo(tt.pod)
			if ok != tt.ok || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("GivenTo() = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

// The lease guard reads GivenTo on every lease write of a pod (each renewal).
func BenchmarkGivenTo(b *testing.B) {
	for _, file := range []string{"deployment-pod.yaml.injected", "elections.yaml.injected"} {
		pod := readPod(b, "testdata/"+file)
		b.Run(file, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := GivenTo(pod); !ok {
					b.Fatal("not read")
				}
			}
		})
	}
}
