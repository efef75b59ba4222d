package inject

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/internal/contract"
)

// Handler serves Inject as a mutating admission webhook. It makes no API call per request: namespace
// labels and the leases pods name come from informer caches, the configuration from the Store.
type Handler struct {
	Config       *config.Store
	Namespaces   client.Reader // cached, metadata only
	Caps         Capabilities
	OwnNamespace string
	// Version is this webhook's release, recorded in each injected pod's status.
	Version string
	// Locks finds the leases pods name, to refuse those of other controllers.
	Locks LockReader
}

var _ admission.Handler = (*Handler)(nil)

// Handle decodes the pod, decides, and answers with a patch, an allowance or a denial.
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	start := time.Now()
	resp, result := h.handle(ctx, req)
	admissions.WithLabelValues(result).Inc()
	admissionSeconds.Observe(time.Since(start).Seconds())
	return resp
}

func (h *Handler) handle(ctx context.Context, req admission.Request) (admission.Response, string) {
	pod := &corev1.Pod{}
	if err := json.Unmarshal(req.Object.Raw, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, err), "error"
	}
	if pod.Namespace == "" {
		pod.Namespace = req.Namespace // a pod in a create request may leave it to the URL
	}
	cfg := h.Config.Current()
	result, err := Inject(pod, h.namespace(ctx, pod.Namespace), Options{
		Config: cfg, Caps: h.Caps, OwnNamespace: h.OwnNamespace, Version: h.Version,
	})
	if err != nil {
		return admission.Denied(err.Error()), "denied"
	}
	if result.Pod == nil {
		if result.Skipped == alreadyInjected && AgentOf(pod) != nil {
			// What the agent elects on is read from its container (GivenTo): hold one that arrives with
			// the pod, this webhook's own on reinvocation or one written by hand, to the rules injection keeps.
			if err := h.checkAgent(pod, cfg); err != nil {
				return admission.Denied(err.Error()), "denied"
			}
		}
		return admission.Allowed(result.Skipped).WithWarnings(result.Warnings...), "skipped"
	}
	if err := h.checkAgent(result.Pod, cfg); err != nil {
		return admission.Denied(err.Error()), "denied"
	}
	return admission.Patched("", patch(pod, result.Pod)...), "injected"
}

// checkAgent refuses a pod whose agent container does not read as one injection makes, or that elects
// on another controller's lease (checkLocks).
func (h *Handler) checkAgent(pod *corev1.Pod, cfg *config.Config) error {
	given, ok := GivenTo(pod)
	if !ok {
		return fmt.Errorf("leasegate cannot admit this pod: its container %s is not one leasegate injects (the agent would refuse its %s settings, or it is an init container that does not restart Always); "+
			"remove the container and let leasegate inject it (%s)", AgentContainer, strings.Join(GivenEnv[:], ", "), contract.Inject)
	}
	return checkLocks(pod, given, cfg, h.Locks)
}

// namespace looks the pod's namespace up in the cache. A namespace the cache has not seen yet (created a
// moment ago) is taken as opted in: the webhook configuration's namespaceSelector only sends pods from
// opted-in namespaces, or pods that opted in themselves.
func (h *Handler) namespace(ctx context.Context, name string) Namespace {
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := h.Namespaces.Get(ctx, types.NamespacedName{Name: name}, ns); err != nil {
		return Namespace{Name: name, Labels: map[string]string{contract.Inject: contract.InjectEnabled}}
	}
	return Namespace{Name: name, Labels: ns.Labels}
}
