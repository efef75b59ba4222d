package inject

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"

	"github.com/leasegate/leasegate/pkg/multicluster/v1alpha1"
)

// DiscoverCapabilities asks the API server what injection depends on: whether it serves
// MultiClusterLeases. The webhook asks once at start-up; kubectl leasegate check asks too, so both judge
// alike. Native sidecars are not asked about: every supported Kubernetes (1.30+, Chart.yaml kubeVersion)
// has them on by default.
func DiscoverCapabilities(dc discovery.DiscoveryInterface) (Capabilities, error) {
	var caps Capabilities
	_, err := dc.ServerResourcesForGroupVersion(v1alpha1.GroupVersion.String())
	switch {
	case err == nil:
		caps.MultiClusterLeases = true
	case !apierrors.IsNotFound(err):
		return Capabilities{}, fmt.Errorf("asking the API server whether it serves %s: %w", v1alpha1.GroupVersion, err)
	}
	return caps, nil
}
