// Command workload is the test cluster's replica: from inside a pod, with in-cluster config, it makes the
// guarded write every interval whether it leads or not, and reports each outcome on stdout as
// "write <n> allowed" or "write <n> denied: <message>", for the suite to count against the fence's Events
// and metrics. It leaves deciding who may write to leasegate.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/leasegate/leasegate/test/guardedwrite"
)

func main() {
	target := flag.String("configmap", "workload-output", "ConfigMap to write, in the pod's namespace")
	interval := flag.Duration("interval", 200*time.Millisecond, "time between writes")
	writes := flag.Int("writes", 0, "stop writing after this many (and idle until SIGTERM); 0: never stop")
	flag.Parse()
	namespace, pod := os.Getenv("POD_NAMESPACE"), os.Getenv("POD_NAME")
	if namespace == "" || pod == "" {
		fmt.Fprintln(os.Stderr, "workload: POD_NAMESPACE and POD_NAME must be set (leasegate injects them)")
		os.Exit(2)
	}
	config, err := rest.InClusterConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "workload:", err)
		os.Exit(2)
	}
	client := kubernetes.NewForConfigOrDie(config)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	for n := 1; *writes == 0 || n <= *writes; n++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(*interval):
		}
		if err := guardedwrite.ConfigMap(ctx, client, namespace, *target, pod); err != nil {
			fmt.Printf("write %d denied: %v\n", n, err)
		} else {
			fmt.Printf("write %d allowed\n", n)
		}
	}
	<-ctx.Done()
}
