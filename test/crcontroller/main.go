// Command crcontroller is a controller-runtime manager with its own leader election and no leasegate
// agent: the kind of controller the fence protects without any change to it. Run with the pod's name as
// hostname (the e2e suite gives it a UTS namespace), its identity is "<pod name>_<random UUID>".
//
// Every replica writes a ConfigMap of its own (any-<hostname>) every 200 ms whether it leads or not, as a
// replica that wrongly believes it leads would; the leader also writes leader-output through a
// leader-elected runnable. Each outcome is printed as guardedwrite.Every prints it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/leasegate/leasegate/test/guardedwrite"
)

func main() {
	namespace := flag.String("namespace", "", "namespace of the lease and the ConfigMaps")
	leaseName := flag.String("lease", "cr-controller", "leader election lease")
	flag.Parse()
	hostname, _ := os.Hostname()

	config := ctrl.GetConfigOrDie()
	leaseDuration, renewDeadline, retryPeriod := 3*time.Second, 2*time.Second, 500*time.Millisecond
	mgr, err := ctrl.NewManager(config, ctrl.Options{
		LeaderElection:                true,
		LeaderElectionID:              *leaseName,
		LeaderElectionNamespace:       *namespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &leaseDuration,
		RenewDeadline:                 &renewDeadline,
		RetryPeriod:                   &retryPeriod,
		Metrics:                       metricsserver.Options{BindAddress: "0"},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	client := kubernetes.NewForConfigOrDie(config)
	_ = mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		guardedwrite.Every(ctx, client, *namespace, "leader-output", hostname, "leader")
		return nil
	}))
	ctx := ctrl.SetupSignalHandler()
	go guardedwrite.Every(ctx, client, *namespace, "any-"+hostname, hostname, "any")
	if err := mgr.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
