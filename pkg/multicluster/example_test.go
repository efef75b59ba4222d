package multicluster_test

import (
	"os"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/leasegate/leasegate/pkg/multicluster"
)

// A controller-runtime manager that leads across clusters: the same manager in every cluster, its
// reconcilers running in one cluster at a time. Install leasegate with multicluster.clusterName set in each
// cluster, bind the leasegate-multicluster-candidate ClusterRole to the manager's service account, and
// swap the lock.
func Example_controllerRuntime() {
	cfg := ctrl.GetConfigOrDie()
	identity := os.Getenv("POD_NAME") // unique among every cluster's candidates: prefix it if pod names repeat
	const (
		leaseDuration = 15 * time.Second // also the global backend's TTL: a crashed leader is replaced after about this long
		renewDeadline = 10 * time.Second
		retryPeriod   = 2 * time.Second // retryPeriod + renewDeadline must fit in 90% of leaseDuration
	)
	lock, err := multicluster.NewLock(cfg, "shop", "orders-controller", multicluster.LockConfig{
		Identity: identity, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
	})
	if err != nil {
		panic(err)
	}
	leaseDurationValue, renewDeadlineValue, retryPeriodValue := leaseDuration, renewDeadline, retryPeriod
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		LeaderElection:                      true,
		LeaderElectionResourceLockInterface: lock,
		LeaseDuration:                       &leaseDurationValue,
		RenewDeadline:                       &renewDeadlineValue,
		RetryPeriod:                         &retryPeriodValue,
		LeaderElectionReleaseOnCancel:       true, // hands over across clusters in well under a second
	})
	if err != nil {
		panic(err)
	}
	// ... register reconcilers with mgr; they start only while this candidate leads globally.
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		panic(err)
	}
}
