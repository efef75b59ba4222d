package inject

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/lease/leaseapi"
	"github.com/leasegate/leasegate/pkg/multicluster/v1alpha1"
)

// LockReader reads Leases and MultiClusterLeases from an informer cache (the fence's cache of every
// Lease outside kube-node-lease): admission makes no API call.
type LockReader interface {
	Get(namespace, name string) (*leaseapi.Kept, bool)
	MultiClusterLease(namespace, name string) (*v1alpha1.MultiClusterLease, bool)
}

// checkLocks refuses an injected pod whose elections name a lock that exists and that leasegate does not
// manage, another controller's election (cert-manager's lease, say): provisioning would give the pod's
// service account the right to take it, and nothing but that controller's own election would stand in
// the way. adoptLeases lets a cluster admin hand such a lease over to leasegate on purpose.
func checkLocks(pod *corev1.Pod, given Given, cfg *config.Config, locks LockReader) error {
	var errs field.ErrorList
	for _, name := range given.LeaseNames() {
		kind, managed, holder, found := readLock(locks, pod.Namespace, name, given.LeaseKind == contract.LeaseKindMultiClusterLease)
		if !found || managed || cfg.Adopts(pod.Namespace, name) {
			continue
		}
		if holder == "" {
			holder = "nobody"
		}
		path := annotationsPath.Key(contract.Lease)
		if given.Lease == "" {
			path = annotationsPath.Key(contract.Elections)
		}
		errs = append(errs, field.Invalid(path, name, fmt.Sprintf(
			"%s %s/%s is not leasegate's (held by %s): another controller elects on it, and this pod's agent would get the right to take it; "+
				"name a lease of its own, or add %q to adoptLeases in leasegate-config to let leasegate take it over",
			kind, pod.Namespace, name, holder, pod.Namespace+"/"+name)))
	}
	if len(errs) > 0 {
		return fmt.Errorf("leasegate cannot inject this pod: %w", errs.ToAggregate())
	}
	return nil
}

// readLock reads one lock from the cache: its kind, whether leasegate manages it, its holder, and whether
// it exists at all.
func readLock(locks LockReader, namespace, name string, multiCluster bool) (kind string, managed bool, holder string, found bool) {
	if multiCluster {
		m, ok := locks.MultiClusterLease(namespace, name)
		if !ok {
			return contract.LeaseKindMultiClusterLease, false, "", false
		}
		return contract.LeaseKindMultiClusterLease, m.Labels[contract.Managed] == "true", ptr.Deref(m.Spec.HolderIdentity, ""), true
	}
	l, ok := locks.Get(namespace, name)
	if !ok {
		return contract.LeaseKindLease, false, "", false
	}
	return contract.LeaseKindLease, l.Managed, l.Judged.HolderIdentity, true
}
