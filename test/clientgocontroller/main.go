// Command clientgocontroller elects itself with client-go's leaderelection package and names itself by its
// pod name alone (POD_NAME), as many controllers do: the holder format "pod-name". It has no leasegate
// agent; the fence protects it without any change to it.
//
// Like test/crcontroller, every replica writes a ConfigMap of its own (any-<pod>) every 200 ms whether
// it leads or not, and the leader also writes leader-output; each outcome is printed as
// guardedwrite.Every prints it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/leasegate/leasegate/test/guardedwrite"
)

func main() {
	namespace := flag.String("namespace", "", "namespace of the lease and the ConfigMaps")
	leaseName := flag.String("lease", "cg-controller", "leader election lease")
	flag.Parse()
	identity := os.Getenv("POD_NAME")
	config, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil || identity == "" {
		fmt.Fprintln(os.Stderr, "POD_NAME and KUBECONFIG are required:", err)
		os.Exit(2)
	}
	client := kubernetes.NewForConfigOrDie(config)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go guardedwrite.Every(ctx, client, *namespace, "any-"+identity, identity, "any")
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: *namespace, Name: *leaseName},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
		},
		LeaseDuration:   3 * time.Second,
		RenewDeadline:   2 * time.Second,
		RetryPeriod:     500 * time.Millisecond,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				guardedwrite.Every(ctx, client, *namespace, "leader-output", identity, "leader")
			},
			OnStoppedLeading: func() {},
		},
	})
}
