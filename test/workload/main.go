// Command workload is the test cluster's replica: from inside a pod, with in-cluster config, it makes the
// guarded write every interval whether it leads or not, and reports each outcome on stdout as
// "write <n> allowed" or "write <n> denied: <message>", for the suite to count against the fence's Events
// and metrics. It leaves deciding who may write to leasegate.
//
// With --serve it is instead an HTTP and gRPC app that knows nothing of leadership: it answers every
// request, and for each mutation (and each gRPC call) it served asks its agent, at that moment, whether
// this pod leads, and says so in the response (X-Served-By, X-Leader), for the suite to prove the
// mutation gate never let a follower serve one.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/test/guardedwrite"
)

func main() {
	target := flag.String("configmap", "workload-output", "ConfigMap to write, in the pod's namespace")
	interval := flag.Duration("interval", 200*time.Millisecond, "time between writes")
	writes := flag.Int("writes", 0, "stop writing after this many (and idle until SIGTERM); 0: never stop")
	serve := flag.String("serve", "", "serve HTTP on this address instead of writing")
	flag.Parse()
	namespace, pod := os.Getenv("POD_NAMESPACE"), os.Getenv("POD_NAME")
	if namespace == "" || pod == "" {
		fmt.Fprintln(os.Stderr, "workload: POD_NAMESPACE and POD_NAME must be set (leasegate injects them)")
		os.Exit(2)
	}
	if *serve != "" {
		serveHTTP(*serve, pod, os.Getenv("LEASEGATE_AGENT_URL"))
		return
	}
	config, err := rest.InClusterConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "workload:", err)
		os.Exit(2)
	}
	// A write that gets no answer (its API server died with the connection open) fails after a while,
	// and the next one is tried, as a careful app's would be.
	config.Timeout = 5 * time.Second
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

// serveHTTP answers every request until SIGTERM; a mutation's answer says whether this pod led when it
// served it, as its agent said at that moment.
func serveHTTP(addr, pod, agentURL string) {
	client := &http.Client{Timeout: time.Second}
	leads := func() string {
		resp, err := client.Get(agentURL + contract.AgentLeaderPath)
		if err != nil {
			return "unknown"
		}
		defer resp.Body.Close()
		var status struct {
			IsLeader bool `json:"isLeader"`
		}
		if json.NewDecoder(resp.Body).Decode(&status) != nil {
			return "unknown"
		}
		return strconv.FormatBool(status.IsLeader)
	}
	// gRPC on the same port (h2c): the standard health service, each answer's header metadata saying
	// which pod served it and whether it led then.
	grpcServer := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-served-by", pod, "x-leader", leads()))
		return handler(ctx, req)
	}))
	healthpb.RegisterHealthServer(grpcServer, health.NewServer())
	server := &http.Server{Addr: addr, ReadHeaderTimeout: 5 * time.Second, Protocols: new(http.Protocols), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			grpcServer.ServeHTTP(w, r)
			return
		}
		w.Header().Set("X-Served-By", pod)
		if r.Method != http.MethodGet {
			w.Header().Set("X-Leader", leads())
		}
		fmt.Fprintf(w, "%s served %s %s\n", pod, r.Method, r.URL.Path)
	})}
	server.Protocols.SetHTTP1(true)
	server.Protocols.SetUnencryptedHTTP2(true)
	go func() {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		<-ctx.Done()
		_ = server.Close()
	}()
	if err := server.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "workload:", err)
		os.Exit(1)
	}
}
