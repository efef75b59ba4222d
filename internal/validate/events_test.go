package validate

import (
	"context"
	"fmt"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/leasegate/leasegate/internal/contract"
)

// step is one round of an EventBudget test: after advancing the clock, n Events for each key, of which
// allowed fit the budget.
type step struct {
	advance time.Duration
	keys    []EventKey
	n       int
	allowed int
}

func objectKey(object, requester, source string) EventKey {
	return EventKey{Object: object, Requester: requester, Source: source}
}

// manyObjects is one key per object for n objects of one requester and source.
func manyObjects(n int, requester, source string) []EventKey {
	keys := make([]EventKey, n)
	for i := range keys {
		keys[i] = objectKey(fmt.Sprintf("ConfigMap/shop/made-up-%d", i), requester, source)
	}
	return keys
}

func TestEventBudget(t *testing.T) {
	follower := objectKey("ConfigMap/shop/state", "pod follower-a", "pod follower-a")
	tests := []struct {
		name  string
		steps []step
	}{{
		name: "a requester repeating itself on one object: 25 Events, then one per 5 minutes",
		steps: []step{
			{keys: []EventKey{follower}, n: 60, allowed: objectEventBurst},
			{advance: 4 * time.Minute, keys: []EventKey{follower}, n: 10, allowed: 0},
			{advance: time.Minute, keys: []EventKey{follower}, n: 10, allowed: 1},
			{advance: 10 * time.Minute, keys: []EventKey{follower}, n: 10, allowed: 2},
		},
	}, {
		name: "a flood from one requester on one object leaves a new requester's first Event on it",
		steps: []step{
			{keys: []EventKey{follower}, n: 1000, allowed: objectEventBurst},
			{keys: []EventKey{objectKey("ConfigMap/shop/state", "pod follower-b", "pod follower-b")}, n: 1, allowed: 1},
		},
	}, {
		name: "a requester naming made-up objects: 100 Events across them, then one per 10 seconds",
		steps: []step{
			{keys: manyObjects(1000, "pod follower-a", "pod follower-a"), n: 1, allowed: sourceEventBurst},
			{advance: 9 * time.Second, keys: []EventKey{follower}, n: 1, allowed: 0},
			{advance: time.Second, keys: []EventKey{follower}, n: 1, allowed: 1},
		},
	}, {
		name: "a flood from one source leaves another source's first Event",
		steps: []step{
			{keys: manyObjects(1000, "pod follower-a", "pod follower-a"), n: 1, allowed: sourceEventBurst},
			{keys: []EventKey{objectKey("ConfigMap/shop/made-up-1", "pod follower-b", "pod follower-b")}, n: 1, allowed: 1},
			{keys: []EventKey{objectKey("ConfigMap/shop/made-up-1", "alice", "namespace shop")}, n: 1, allowed: 1},
		},
	}, {
		name: "unconfirmed requesters in one namespace share its budget, whatever names they give",
		steps: []step{
			{keys: func() []EventKey {
				keys := manyObjects(1000, "", "namespace kube-system")
				for i := range keys {
					keys[i].Requester = fmt.Sprintf("made-up-pod-%d", i)
				}
				return keys
			}(), n: 1, allowed: sourceEventBurst},
			{keys: []EventKey{objectKey("ConfigMap/kube-system/x", "bob", "namespace kube-system")}, n: 1, allowed: 0},
			{keys: []EventKey{objectKey("ConfigMap/shop/x", "bob", "namespace shop")}, n: 1, allowed: 1},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
			budget := NewEventBudget(clock)
			for i, s := range tt.steps {
				clock.SetTime(clock.Now().Add(s.advance))
				allowed := 0
				for range s.n {
					for _, key := range s.keys {
						if budget.Allow(key) {
							allowed++
						}
					}
				}
				if allowed != s.allowed {
					t.Errorf("step %d: %d Events allowed, want %d", i, allowed, s.allowed)
				}
			}
		})
	}
}

// TestForgedReviewsEvents sends the fence's Event path what a pod POSTing made-up AdmissionReviews
// sends: requesters that name pods which do not exist, objects it makes up, namespaces it picks.
func TestForgedReviewsEvents(t *testing.T) {
	injected := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: "shop", Name: "orders-b", UID: "uid-b", Labels: map[string]string{contract.Injected: "true"},
	}}
	namespaces := []*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, {ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}}}
	deny := Verdict{Outcome: Denied, Reason: HeldByAnother, Guard: "orders", LeaseNamespace: "shop", LeaseName: "orders", Holder: "orders-a_uid-a"}
	review := func(namespace, name string, user authenticationv1.UserInfo) *admission.Request {
		return &admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			UID: "1", Operation: admissionv1.Update, Namespace: namespace, Name: name, UserInfo: user,
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"},
			Kind:     metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
		}}
	}
	tests := []struct {
		name      string
		forged    func(i int) *admission.Request
		recorded  int
		thenFirst *admission.Request
	}{{
		name: "made-up pods in kube-system: the namespace's shared budget, and an injected pod's first denial after it",
		forged: func(i int) *admission.Request {
			return review("kube-system", fmt.Sprintf("cm-%d", i), podUser(fmt.Sprintf("ghost-%d", i), fmt.Sprintf("uid-%d", i)))
		},
		recorded:  sourceEventBurst,
		thenFirst: review("shop", "state", podUser("orders-b", "uid-b")),
	}, {
		name: "an injected pod's name with another UID is not that pod: the namespace's budget",
		forged: func(i int) *admission.Request {
			return review("shop", fmt.Sprintf("cm-%d", i), podUser("orders-b", fmt.Sprintf("uid-%d", i)))
		},
		recorded:  sourceEventBurst,
		thenFirst: review("shop", "state", podUser("orders-b", "uid-b")),
	}, {
		name: "namespaces that do not exist: no Event",
		forged: func(i int) *admission.Request {
			return review(fmt.Sprintf("made-up-%d", i), "cm", podUser("ghost", "uid-ghost"))
		},
		recorded: 0,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objects := []client.Object{injected}
			for _, ns := range namespaces {
				objects = append(objects, ns)
			}
			recorder := events.NewFakeRecorder(2000)
			fence := &Webhooks{
				Cluster: fake.NewClientBuilder().WithObjects(objects...).Build(), Recorder: recorder,
				Events: NewEventBudget(clocktesting.NewFakePassiveClock(time.Now())),
			}
			for i := range 1000 {
				fence.respond(context.Background(), tt.forged(i), deny)
			}
			if got := len(recorder.Events); got != tt.recorded {
				t.Errorf("%d forged reviews recorded %d Events, want %d", 1000, got, tt.recorded)
			}
			if tt.thenFirst == nil {
				return
			}
			for len(recorder.Events) > 0 {
				<-recorder.Events
			}
			fence.respond(context.Background(), tt.thenFirst, deny)
			if len(recorder.Events) != 1 {
				t.Errorf("the injected pod's first denial after the flood was not recorded")
			}
		})
	}
}
