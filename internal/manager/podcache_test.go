package manager

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/inject"
	"github.com/leasegate/leasegate/internal/leaderservice"
	"github.com/leasegate/leasegate/internal/lease"
)

// injectedPods are the injector's golden outputs that are pods, as the API server would then store and
// run them: scheduled, addressed, Ready, with container statuses and the annotations kubectl adds.
func injectedPods(t *testing.T) map[string]*corev1.Pod {
	t.Helper()
	files, err := filepath.Glob("../inject/testdata/*.injected")
	if err != nil {
		t.Fatal(err)
	}
	pods := map[string]*corev1.Pod{}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{}
		if strings.HasPrefix(string(data), "# denied") || yaml.Unmarshal(data, pod) != nil || pod.Annotations[contract.Status] == "" {
			continue
		}
		if pod.Name == "" {
			pod.Name = pod.GenerateName + "x2x9k"
		}
		pod.UID, pod.ResourceVersion = types.UID("uid-"+filepath.Base(file)), "42"
		pod.Spec.NodeName, pod.Spec.ServiceAccountName = "node-a", "orders"
		pod.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = strings.Repeat("x", 2000)
		pod.Status = corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "10.1.0.7", PodIPs: []corev1.PodIP{{IP: "10.1.0.7"}, {IP: "fd00::7"}},
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()},
			},
		}
		for _, c := range pod.Spec.Containers {
			pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: true})
		}
		pods[filepath.Base(file)] = pod
	}
	if len(pods) < 10 {
		t.Fatalf("found %d injected pods among the goldens: the glob or the filter is wrong", len(pods))
	}
	return pods
}

// TestSlimPodKeepsWhatReadersRead runs each reader of the pod cache (provisioning, the leader Service,
// evictions) on every injected golden pod and on its slimmed copy: the answers must be the same.
func TestSlimPodKeepsWhatReadersRead(t *testing.T) {
	now := time.Now()
	for name, full := range injectedPods(t) {
		t.Run(name, func(t *testing.T) {
			before := full.DeepCopy()
			transformed, err := slimPod(full)
			if err != nil {
				t.Fatal(err)
			}
			slim := transformed.(*corev1.Pod)
			if !reflect.DeepEqual(full, before) {
				t.Error("the transform changed the pod it was given")
			}

			// Provisioning, evictions and the lease guard: what injection gave the pod (from its spec),
			// the service account, name and UID.
			got, gotOK := inject.GivenTo(slim)
			want, wantOK := inject.GivenTo(full)
			if !wantOK || gotOK != wantOK || !reflect.DeepEqual(got, want) {
				t.Errorf("injected read as %+v, %v; want %+v, true", got, gotOK, want)
			}
			if slim.Name != full.Name || slim.Namespace != full.Namespace || slim.UID != full.UID ||
				slim.ResourceVersion != full.ResourceVersion || slim.Spec.ServiceAccountName != full.Spec.ServiceAccountName {
				t.Errorf("identity or service account lost: %+v", slim.ObjectMeta)
			}

			// The leader Service: the holder and its slice, for a Service targeting every named port the
			// pod declares (containers and native sidecars), by number and by nothing, in both families.
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Namespace: full.Namespace, Name: "orders", UID: "svc", Labels: map[string]string{contract.LeaderLease: "orders"}},
				Spec:       corev1.ServiceSpec{Selector: full.Labels, Ports: []corev1.ServicePort{{Name: "plain", Protocol: corev1.ProtocolTCP, Port: 81}}},
			}
			for _, c := range append(full.Spec.Containers, full.Spec.InitContainers...) {
				for _, p := range c.Ports {
					if p.Name != "" {
						svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: p.Name, Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromString(p.Name)})
					}
				}
			}
			l := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Namespace: full.Namespace, Name: "orders", Labels: map[string]string{contract.Managed: "true"}},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(lease.Identity(full.Name, string(full.UID))),
					LeaseDurationSeconds: ptr.To[int32](15), RenewTime: &metav1.MicroTime{Time: now}},
			}
			for _, family := range [][]corev1.IPFamily{nil, {corev1.IPv6Protocol}} {
				svc.Spec.IPFamilies = family
				companion, err := leaderservice.Companion(svc)
				if err != nil {
					t.Fatal(err)
				}
				holderOf := func(pod *corev1.Pod) *corev1.Pod {
					holder, _, why := leaderservice.Holder(l, func(string) *corev1.Pod { return pod }, svc, now, time.Second)
					if holder == nil {
						t.Fatalf("no holder: %s", why)
					}
					return holder
				}
				if got, want := leaderservice.Slice(svc, companion, holderOf(slim)), leaderservice.Slice(svc, companion, holderOf(full)); !reflect.DeepEqual(got, want) {
					t.Errorf("leader slice from the slim pod\n%+v\nwant\n%+v", got, want)
				}
			}
			terminating := full.DeepCopy()
			terminating.DeletionTimestamp = &metav1.Time{Time: now}
			if gone, _ := slimPod(terminating); gone.(*corev1.Pod).DeletionTimestamp == nil {
				t.Error("a terminating pod's deletion timestamp was dropped")
			}

			fullSize, slimSize := jsonSize(t, full), jsonSize(t, slim)
			if slimSize*4 > fullSize {
				t.Errorf("slim pod %d bytes against %d: want a quarter or less", slimSize, fullSize)
			}
		})
	}
}

func TestSlimPodPassesTombstones(t *testing.T) {
	tombstone := cache.DeletedFinalStateUnknown{Key: "shop/orders-a", Obj: &corev1.Pod{}}
	if got, err := slimPod(tombstone); err != nil || got != any(tombstone) {
		t.Errorf("slimPod(tombstone) = %v, %v: want it unchanged", got, err)
	}
}

func jsonSize(t *testing.T, pod *corev1.Pod) int {
	t.Helper()
	data, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return len(data)
}
