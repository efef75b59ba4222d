package inject

import (
	"errors"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasegate/leasegate/internal/contract"
)

// cronJobSuffix is what the CronJob controller appends to a Job's name: the scheduled time in minutes
// since the epoch (8 digits since 1989).
var cronJobSuffix = regexp.MustCompile(`-[0-9]{8,}$`)

// leaseName is the pod's lease: the leasegate.io/lease annotation, else the name of the workload that owns
// the pod, else its app.kubernetes.io/name label, else the pod's own name. It is derived from the pod
// alone, with no API call: replicas of one workload must agree on it, and admission must stay fast.
func leaseName(pod *corev1.Pod) (string, error) {
	if name := pod.Annotations[contract.Lease]; name != "" {
		return name, nil
	}
	if owner := metav1.GetControllerOf(pod); owner != nil {
		return workloadName(pod, owner), nil
	}
	if name := pod.Labels["app.kubernetes.io/name"]; name != "" {
		return name, nil
	}
	if pod.Name != "" {
		return pod.Name, nil
	}
	return "", errors.New("no lease name: the pod has no owner, no app.kubernetes.io/name label and no name yet (generateName); set the annotation")
}

// workloadName walks up from the pod's controller to the workload a user named, using only what the pod
// carries: a Deployment's ReplicaSet is "<deployment>-<pod-template-hash>", a CronJob's Job is
// "<cronjob>-<scheduled minute>".
func workloadName(pod *corev1.Pod, owner *metav1.OwnerReference) string {
	switch owner.Kind {
	case "ReplicaSet":
		if hash := pod.Labels["pod-template-hash"]; hash != "" {
			if deployment, ok := strings.CutSuffix(owner.Name, "-"+hash); ok {
				return deployment
			}
		}
	case "Job":
		if loc := cronJobSuffix.FindStringIndex(owner.Name); loc != nil {
			return owner.Name[:loc[0]]
		}
	}
	return owner.Name
}
