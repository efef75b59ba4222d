package inject

import (
	"fmt"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"

	"github.com/leasegate/leasegate/pkg/multicluster/v1alpha1"
)

// nativeSidecarsSince is the Kubernetes 1.x minor version from which init containers may have
// restartPolicy Always (native sidecars, on by default since 1.29).
const nativeSidecarsSince = 29

// DiscoverCapabilities asks the API server what injection depends on: its version (native sidecars) and
// whether it serves MultiClusterLeases. The webhook asks once at start-up; kubectl leasegate check asks
// too, so both judge alike.
func DiscoverCapabilities(dc discovery.DiscoveryInterface) (Capabilities, error) {
	v, err := dc.ServerVersion()
	if err != nil {
		return Capabilities{}, fmt.Errorf("asking the API server its version: %w", err)
	}
	major, _ := strconv.Atoi(v.Major)
	minor, _ := strconv.Atoi(strings.TrimSuffix(v.Minor, "+"))
	caps := Capabilities{NativeSidecars: major > 1 || (major == 1 && minor >= nativeSidecarsSince)}
	_, err = dc.ServerResourcesForGroupVersion(v1alpha1.GroupVersion.String())
	switch {
	case err == nil:
		caps.MultiClusterLeases = true
	case !apierrors.IsNotFound(err):
		return Capabilities{}, fmt.Errorf("asking the API server whether it serves %s: %w", v1alpha1.GroupVersion, err)
	}
	return caps, nil
}
