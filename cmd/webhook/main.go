// Command leasegate-webhook serves leasegate's admission webhooks and runs its background controllers.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/leasegate/leasegate/internal/clientauth"
	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/internal/manager"
	"github.com/leasegate/leasegate/internal/version"
)

func main() {
	var opts manager.Options
	flag.IntVar(&opts.WebhookPort, "webhook-port", 9443, "port of the TLS admission webhook server")
	flag.StringVar(&opts.CertDir, "cert-dir", "/tmp/k8s-webhook-server/serving-certs", "directory holding tls.crt and tls.key, reloaded when they change")
	flag.StringVar(&opts.WebhookConfiguration, "webhook-configuration", "leasegate", "name of the Mutating- and ValidatingWebhookConfiguration the installer created")
	flag.StringVar(&opts.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "leasegate's own namespace, where its ConfigMap lives (default $POD_NAMESPACE)")
	flag.StringVar(&opts.ConfigName, "config-name", "leasegate-config", "name of the ConfigMap holding config.yaml")
	flag.StringVar(&opts.HealthProbeAddress, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	flag.StringVar(&opts.MetricsAddress, "metrics-bind-address", ":8080", `address of /metrics ("0" disables it)`)
	flag.BoolVar(&opts.MetricsSecure, "metrics-secure", true, "serve /metrics over TLS with the webhook's certificate, only to callers the API server authorizes for GET /metrics (false: plain HTTP, open)")
	flag.BoolVar(&opts.LeaderElect, "leader-elect", true, "elect a leader among replicas for the background controllers (webhooks are served by every replica)")
	opts.LeaderElection = lease.DefaultTiming
	flag.DurationVar(&opts.LeaderElection.LeaseDuration, manager.FlagLeaseDuration, opts.LeaderElection.LeaseDuration, "how long the elected replica's lease lasts unrenewed: a crashed leader's controllers resume on another replica after it")
	flag.DurationVar(&opts.LeaderElection.RenewDeadline, manager.FlagRenewDeadline, opts.LeaderElection.RenewDeadline, "how long the elected replica keeps trying to renew before it gives up the lease and restarts")
	flag.DurationVar(&opts.LeaderElection.RetryPeriod, manager.FlagRetryPeriod, opts.LeaderElection.RetryPeriod, "how often the replicas try to acquire or renew the lease")
	flag.BoolVar(&opts.EnableHTTP2, "enable-http2", false, "serve webhooks and metrics over HTTP/2 as well")
	flag.StringVar(&opts.MultiCluster.ClusterName, "multicluster-cluster-name", "", "this cluster's name among the clusters electing through MultiClusterLeases; set, it runs the multi-cluster election controller")
	flag.Func("multicluster-etcd-endpoints", "comma-separated https:// client URLs of the global etcd", func(v string) error {
		opts.MultiCluster.EtcdEndpoints = strings.Split(v, ",")
		return nil
	})
	flag.StringVar(&opts.MultiCluster.EtcdCertDir, "multicluster-etcd-cert-dir", "/etc/leasegate/multicluster-etcd", "directory holding the global etcd's ca.crt and this cluster's client tls.crt and tls.key")
	flag.BoolVar(&opts.ClientVerification.Enabled, clientauth.FlagEnable, false, "refuse webhook connections without a client certificate that --"+clientauth.FlagCAPath+"'s CA signed: the one the API server presents from its AdmissionConfiguration")
	flag.StringVar(&opts.ClientVerification.CAPath, clientauth.FlagCAPath, "", "PEM file of the CA that signs the API server's client certificate, read again when it changes")
	flag.Func(clientauth.FlagSubjectNames, "comma-separated common or DNS names, one of which the client certificate must carry (default: any the CA signed)", func(v string) error {
		opts.ClientVerification.SubjectNames = strings.Split(v, ",")
		return nil
	})
	showVersion := flag.Bool("version", false, "print the version and exit")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	if *showVersion {
		fmt.Println("leasegate-webhook", version.String())
		return
	}

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	ctrl.Log.Info("Starting leasegate-webhook", "version", version.String())
	if err := manager.Run(manager.SignalHandler(), ctrl.GetConfigOrDie(), opts); err != nil {
		ctrl.Log.Error(err, "leasegate-webhook failed")
		os.Exit(1)
	}
}
