package cli

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/inject"
)

// olderAgents finds the workloads whose pods run an agent injected by an older leasegate than the
// webhook's (the leasegate.io/webhook-version its elected replica writes on the validating
// configuration): one finding per workload, naming its oldest pod. A pod injected before releases
// recorded their version in leasegate.io/status is older than any webhook that records it.
//
// Both versions are annotations anyone who may update the object can rewrite; a forged one can only hide
// or add this warning, and no admission decision reads either. Versions that are not semantic versions
// (a development build) cannot be ordered and are left alone.
func olderAgents(pods []corev1.Pod, webhookVersion string) []Finding {
	webhook, err := version.ParseSemantic(webhookVersion)
	if err != nil {
		return nil
	}
	type workload struct {
		object, fix      string
		pods             int
		oldestPod        string
		oldest           *version.Version
		unrecordedOldest bool
	}
	found := map[string]*workload{}
	for i := range pods {
		pod := &pods[i]
		var status inject.Status
		if json.Unmarshal([]byte(pod.Annotations[contract.Status]), &status) != nil {
			continue // not a status injection wrote
		}
		var injected *version.Version
		if status.Version != "" {
			if injected, err = version.ParseSemantic(status.Version); err != nil || !injected.LessThan(webhook) {
				continue
			}
		}
		object, fix := workloadOf(pod)
		w := found[object]
		if w == nil {
			w = &workload{object: object, fix: fix}
			found[object] = w
		}
		w.pods++
		switch {
		case w.unrecordedOldest:
		case injected == nil:
			w.unrecordedOldest, w.oldestPod = true, pod.Name
		case w.oldest == nil || injected.LessThan(w.oldest):
			w.oldest, w.oldestPod = injected, pod.Name
		}
	}
	findings := make([]Finding, 0, len(found))
	for _, w := range found {
		injectedBy := "a leasegate release that did not record its version"
		if !w.unrecordedOldest {
			injectedBy = "leasegate v" + strings.TrimPrefix(w.oldest.String(), "v")
		}
		findings = append(findings, Finding{
			Code: CodeAgentOlderThanWebhook, Severity: SeverityWarning, Object: w.object,
			Message: fmt.Sprintf("%d pod(s) run an agent injected by %s (oldest: %s), older than the webhook's %s: they keep that release's agent until they are created again",
				w.pods, injectedBy, w.oldestPod, webhookVersion),
			Fix: w.fix,
		})
	}
	slices.SortFunc(findings, func(a, b Finding) int { return strings.Compare(a.Object, b.Object) })
	return findings
}

// workloadOf names what created pod, as kind/namespace/name, and how to have it create the pod again:
// a Deployment through its ReplicaSet, by the pod-template-hash the ReplicaSet's name ends with.
func workloadOf(pod *corev1.Pod) (object, fix string) {
	var kind, name string
	for _, ref := range pod.OwnerReferences {
		if ref.Controller != nil && *ref.Controller {
			kind, name = ref.Kind, ref.Name
		}
	}
	if hash := pod.Labels[appsv1.DefaultDeploymentUniqueLabelKey]; kind == "ReplicaSet" && hash != "" && strings.HasSuffix(name, "-"+hash) {
		kind, name = "Deployment", strings.TrimSuffix(name, "-"+hash)
	}
	switch kind {
	case "Deployment", "StatefulSet", "DaemonSet":
		return kind + "/" + pod.Namespace + "/" + name,
			"roll the workload so its pods are injected anew: kubectl rollout restart -n " + pod.Namespace + " " + strings.ToLower(kind) + "/" + name
	case "":
		return "Pod/" + pod.Namespace + "/" + pod.Name,
			"create the pod again so it is injected anew (kubectl delete pod -n " + pod.Namespace + " " + pod.Name + ", then create it as you did)"
	default:
		return kind + "/" + pod.Namespace + "/" + name,
			"delete the pods so that " + kind + " " + name + " creates them again, injected anew (a Job's next pods get the current agent by themselves)"
	}
}
