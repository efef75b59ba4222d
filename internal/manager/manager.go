// Package manager assembles the leasegate-webhook process: one controller-runtime manager that serves
// every admission webhook over TLS and runs the background controllers.
package manager

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/fields"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/leasegate/leasegate/internal/apiresources"
	"github.com/leasegate/leasegate/internal/clientauth"
	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/globalelection"
	"github.com/leasegate/leasegate/internal/inject"
	"github.com/leasegate/leasegate/internal/leaderless"
	"github.com/leasegate/leasegate/internal/leaderservice"
	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/internal/leasecache"
	"github.com/leasegate/leasegate/internal/provision"
	"github.com/leasegate/leasegate/internal/validate"
	"github.com/leasegate/leasegate/internal/version"
	"github.com/leasegate/leasegate/internal/webhookrules"
	"github.com/leasegate/leasegate/pkg/multicluster/v1alpha1"
)

// Paths of the admission webhooks this process serves.
const (
	MutatePodsPath             = "/mutate-pods"
	ValidateGuardedPath        = "/validate-guarded"
	ValidateLeasesPath         = "/validate-leases"
	ValidateEndpointSlicesPath = "/validate-endpointslices"
	// ValidateLeaderServicesPath keeps leasegate's <service>-leader Services its own.
	ValidateLeaderServicesPath = "/validate-leader-services"
	// ValidateEvictionsPath admits a pod's eviction of itself after it lost its lease (on-loss: restart).
	ValidateEvictionsPath = "/validate-evictions"
	ValidateConfigPath    = "/validate-config"
)

// Options are leasegate-webhook's flags.
type Options struct {
	WebhookPort          int
	CertDir              string
	WebhookConfiguration string
	Namespace            string
	ConfigName           string
	HealthProbeAddress   string
	MetricsAddress       string
	// MetricsSecure serves /metrics over TLS (the webhook's certificate) to callers the API server
	// authenticates (TokenReview) and authorizes for GET /metrics (SubjectAccessReview).
	MetricsSecure bool
	LeaderElect   bool
	// LeaderElection is the timing of the replicas' own election, validated as an agent's is.
	LeaderElection lease.Timing
	EnableHTTP2    bool
	// MultiCluster runs the MultiClusterLease election controller when its cluster name is set.
	MultiCluster globalelection.Options
	// ClientVerification refuses webhook connections without the API server's client certificate.
	ClientVerification clientauth.Options
}

// bodyReadTimeout bounds how long a webhook request's body may take to arrive. The API server sends an
// AdmissionReview at once; a client that trickles one would otherwise hold a connection and a goroutine
// for as long as it likes (controller-runtime's server bounds only the headers, at 32 s).
const bodyReadTimeout = 10 * time.Second

// withBodyDeadline gives each request's body bodyReadTimeout to arrive.
func withBodyDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(bodyReadTimeout))
		next.ServeHTTP(w, r)
	})
}

// metricsOptions serves /metrics as kubebuilder's secure default does when opts.MetricsSecure: over TLS,
// only to requesters allowed to GET /metrics.
func metricsOptions(opts Options, tlsOpts []func(*tls.Config)) metricsserver.Options {
	metrics := metricsserver.Options{BindAddress: opts.MetricsAddress, TLSOpts: tlsOpts}
	if opts.MetricsSecure {
		metrics.SecureServing = true
		metrics.CertDir, metrics.CertName, metrics.KeyName = opts.CertDir, "tls.crt", "tls.key"
		metrics.FilterProvider = metricsAccessFilter
	}
	return metrics
}

// The flags of the replicas' own election's timing, named as kube-controller-manager names its own.
const (
	FlagLeaseDuration = "leader-elect-lease-duration"
	FlagRenewDeadline = "leader-elect-renew-deadline"
	FlagRetryPeriod   = "leader-elect-retry-period"
)

// validateLeaderElection holds the replicas' election to the rules an agent's is held to (retry period <
// renew deadline < lease duration), naming the flag at fault.
func validateLeaderElection(t lease.Timing) error {
	var timingErr *lease.TimingError
	if err := t.Validate(); errors.As(err, &timingErr) {
		flag := map[lease.TimingField]string{lease.LeaseDurationField: FlagLeaseDuration, lease.RenewDeadlineField: FlagRenewDeadline, lease.RetryPeriodField: FlagRetryPeriod}[timingErr.Field]
		return fmt.Errorf("--%s=%s: %s (--%s=%s --%s=%s --%s=%s)", flag, timingErr.Value, timingErr.Reason,
			FlagLeaseDuration, t.LeaseDuration, FlagRenewDeadline, t.RenewDeadline, FlagRetryPeriod, t.RetryPeriod)
	}
	return nil
}

// Run serves until ctx ends.
func Run(ctx context.Context, restConfig *rest.Config, opts Options) error {
	log := ctrl.Log.WithName("setup")
	if opts.Namespace == "" {
		return fmt.Errorf("--namespace is required (or POD_NAMESPACE): leasegate's own namespace, where %s lives", opts.ConfigName)
	}
	if err := validateLeaderElection(opts.LeaderElection); err != nil {
		return err
	}
	var verifier *clientauth.Verifier
	if opts.ClientVerification.Enabled {
		var err error
		if verifier, err = clientauth.New(opts.ClientVerification, ctrl.Log.WithName("client-verification")); err != nil {
			return err
		}
	}
	dc, err := discovery.NewDiscoveryClientForConfig(restConfig)
	if err != nil {
		return fmt.Errorf("connecting to the API server for discovery: %w", err)
	}
	caps, err := inject.DiscoverCapabilities(dc)
	if err != nil {
		return fmt.Errorf("discovering what the API server serves (MultiClusterLeases): %w", err)
	}

	managed := k8slabels.SelectorFromSet(k8slabels.Set{contract.Managed: "true"})
	tlsOpts := []func(*tls.Config){func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 }}
	if !opts.EnableHTTP2 {
		// HTTP/2 stream multiplexing has had denial-of-service flaws (CVE-2023-44487, CVE-2023-39325);
		// the API server speaks HTTP/1.1 to webhooks just as well.
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	// Metrics keep their own authentication: the client certificate is asked of webhook calls only.
	webhookTLSOpts := slices.Clone(tlsOpts)
	if verifier != nil {
		webhookTLSOpts = append(webhookTLSOpts, verifier.Configure)
	}
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), v1alpha1.AddToScheme(scheme)); err != nil {
		return fmt.Errorf("building the scheme: %w", err)
	}
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                        scheme,
		WebhookServer:                 webhook.NewServer(webhook.Options{Port: opts.WebhookPort, CertDir: opts.CertDir, TLSOpts: webhookTLSOpts}),
		Metrics:                       metricsOptions(opts, tlsOpts),
		HealthProbeBindAddress:        opts.HealthProbeAddress,
		LeaderElection:                opts.LeaderElect,
		LeaderElectionID:              "leasegate-webhook",
		LeaderElectionNamespace:       opts.Namespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &opts.LeaderElection.LeaseDuration,
		RenewDeadline:                 &opts.LeaderElection.RenewDeadline,
		RetryPeriod:                   &opts.LeaderElection.RetryPeriod,
		// Cache only what leasegate looks at: injected pods, what it provisions, its own ConfigMap.
		Cache: cache.Options{
			// Nothing leasegate does reads managedFields, so the cache does not hold them
			// (docs/performance.md: about 6% of the webhook's memory with 18,000 injected pods).
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject: map[client.Object]cache.ByObject{
				&corev1.Pod{}:           {Label: k8slabels.SelectorFromSet(k8slabels.Set{contract.Injected: "true"}), Transform: slimPod},
				&rbacv1.Role{}:          {Label: managed, Transform: provision.KeepOwnManagedFields}, // leasegate's managedFields tell its own
				&rbacv1.RoleBinding{}:   {Label: managed, Transform: provision.KeepOwnManagedFields},
				&coordinationv1.Lease{}: {Label: managed},
				// Leader Services: those opted in, their companions, and the slices leasegate writes.
				&corev1.Service{}:            {Label: leaderservice.OptedIn()},
				&discoveryv1.EndpointSlice{}: {Label: leaderservice.Slices()},
				&corev1.ConfigMap{}: {
					Namespaces: map[string]cache.Config{opts.Namespace: {}},
					Field:      fields.OneTermEqualSelector("metadata.name", opts.ConfigName),
				},
			}},
	})
	if err != nil {
		return fmt.Errorf("creating the controller-runtime manager: %w", err)
	}

	apis := &apiresources.Discoverer{Client: dc}
	if _, err := apis.Refresh(ctx); err != nil {
		if apis.Current() == nil {
			return err
		}
		log.Error(err, "Starting with part of discovery")
	}
	if err := apis.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up API discovery: %w", err)
	}
	configKey := types.NamespacedName{Namespace: opts.Namespace, Name: opts.ConfigName}
	initial, err := config.LoadConfigMap(ctx, mgr.GetAPIReader(), configKey, apis.Current())
	if err != nil {
		return fmt.Errorf("loading the configuration to start with (--namespace, --config-name): %w", err)
	}
	for _, warning := range initial.Warnings {
		log.Info("Starting with a configuration that uses something deprecated", "configMap", configKey, "warning", warning)
	}
	store := config.NewStore(initial)
	if err := (&config.Reloader{
		Client: mgr.GetClient(), Store: store, Key: configKey, Recorder: mgr.GetEventRecorder("leasegate-webhook"), APIs: apis,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the config reloader: %w", err)
	}
	if err := (&provision.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("leasegate-provisioner"),
		MultiClusterLeases: caps.MultiClusterLeases, Config: store,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up Lease and RBAC provisioning: %w", err)
	}
	if err := mgr.Add(&leaderless.Reporter{Client: mgr.GetClient(), Config: store}); err != nil {
		return fmt.Errorf("setting up the leaderless-lease reporter: %w", err)
	}
	// Forged slices of leader Services may carry any labels, so they are found among the metadata of
	// every EndpointSlice: a cache of its own, because the manager's holds leasegate's slices only.
	// Only the elected replica's leader-Service controller starts its informer.
	sliceMetadata, err := cache.New(restConfig, cache.Options{
		HTTPClient: mgr.GetHTTPClient(), Scheme: scheme, Mapper: mgr.GetRESTMapper(), DefaultTransform: leaderservice.SlimSlice,
	})
	if err != nil {
		return fmt.Errorf("creating the cache of EndpointSlice metadata: %w", err)
	}
	if err := mgr.Add(sliceMetadata); err != nil {
		return fmt.Errorf("adding the cache of EndpointSlice metadata: %w", err)
	}
	if err := (&leaderservice.Reconciler{
		Client: mgr.GetClient(), Slices: sliceMetadata, Config: store, Recorder: mgr.GetEventRecorder("leasegate-leader-service"),
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the leader-Service controller: %w", err)
	}
	serve := func(path string, handler admission.Handler) {
		mgr.GetWebhookServer().Register(path, withBodyDeadline(closeWhenDraining(&webhook.Admission{Handler: handler})))
	}
	clientset, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return fmt.Errorf("building the client of the guarded-lease cache: %w", err)
	}
	leases := leasecache.NewLeaseCache(clientset, ctrl.Log.WithName("guarded-leases"))
	leases.MultiClusterLeases = mgr.GetCache()
	if err := mgr.Add(leases); err != nil {
		return fmt.Errorf("setting up the guarded-lease cache: %w", err)
	}
	serve(MutatePodsPath, &inject.Handler{
		Config: store, Namespaces: mgr.GetClient(), Caps: caps, OwnNamespace: opts.Namespace, Locks: leases,
		Version: version.Version,
	})
	fenceWebhooks := &validate.Webhooks{
		Leases: leases, Cluster: mgr.GetClient(), Recorder: mgr.GetEventRecorder("leasegate-fence"),
		Events:       validate.NewEventBudget(clock.RealClock{}),
		OwnNamespace: opts.Namespace,
	}
	fenceWebhooks.Follow(store)
	serve(ValidateGuardedPath, fenceWebhooks.Guarded())
	serve(ValidateLeasesPath, fenceWebhooks.LeaseWrites())
	serve(ValidateConfigPath, &config.EditValidator{Namespace: opts.Namespace, Name: opts.ConfigName, APIs: apis})
	serve(ValidateEndpointSlicesPath, fenceWebhooks.LeaderEndpoints())
	serve(ValidateLeaderServicesPath, fenceWebhooks.LeaderServices())
	serve(ValidateEvictionsPath, fenceWebhooks.Evictions())
	if err := (&webhookrules.RulesSyncer{
		Client: mgr.GetClient(), Store: store, Name: opts.WebhookConfiguration, OwnNamespace: opts.Namespace, APIs: apis,
		Version: version.Version,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the guarded rules syncer: %w", err)
	}

	if opts.MultiCluster.Enabled() {
		etcd, err := opts.MultiCluster.EtcdClient()
		if err != nil {
			return fmt.Errorf("setting up the multi-cluster election controller: %w", err)
		}
		defer etcd.Close()
		log := ctrl.Log.WithName("multicluster")
		if err := (&globalelection.Controller{
			Client: mgr.GetClient(), Backend: &globalelection.Etcd{Client: etcd, Log: log},
			Cluster: opts.MultiCluster.ClusterName, ClockSkewMargin: initial.Election.ClockSkewMargin.Duration, Log: log,
		}).SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the multi-cluster election controller: %w", err)
		}
	}

	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	webhookStarted := mgr.GetWebhookServer().StartedChecker()
	if verifier != nil {
		webhookStarted = verifier.StartedChecker(opts.WebhookPort)
	}
	if err := mgr.AddReadyzCheck("webhook", webhookStarted); err != nil {
		return fmt.Errorf("adding the webhook readiness check: %w", err)
	}
	if err := mgr.AddReadyzCheck("guarded-leases", func(*http.Request) error {
		if !leases.Synced() {
			return errors.New("the guarded leases are not cached yet")
		}
		return nil
	}); err != nil {
		return fmt.Errorf("adding the guarded-lease readiness check: %w", err)
	}
	log.Info("Starting", "namespace", opts.Namespace, "webhookPort", opts.WebhookPort,
		"nativeSidecar", initial.Agent.NativeSidecar, "multiClusterLeases", caps.MultiClusterLeases, "agentImage", initial.Agent.Image)
	return mgr.Start(ctx)
}
