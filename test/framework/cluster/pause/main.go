// Command pause is the pod sandbox's process in the test cluster: containerd 1.6 expects an image named
// registry.k8s.io/pause:3.6, and none can be pulled here. It waits for SIGTERM or SIGINT and exits 0.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
