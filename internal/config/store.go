package config

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/leasegate/leasegate/internal/apiresources"
)

// EventReasonInvalid is the reason of the Warning Event on a ConfigMap whose edit was not applied;
// EventReasonDeprecated of one applied with a warning (no apiVersion and kind, say).
const (
	EventReasonInvalid    = "InvalidConfig"
	EventReasonDeprecated = "DeprecatedConfig"
)

var (
	reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasegate_config_reloads_total",
		Help: "Loads of the leasegate-config ConfigMap, by outcome (applied or rejected).",
	}, []string{"outcome"})
	lastReloadOK = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "leasegate_config_last_reload_successful",
		Help: "1 if the last edit of leasegate-config is in force, 0 if it was rejected and the previous configuration still is.",
	})
)

func init() { metrics.Registry.MustRegister(reloads, lastReloadOK) }

// Store holds the configuration in force. Readers get an immutable snapshot; a reload swaps it whole.
type Store struct {
	current atomic.Pointer[Config]

	mu        sync.Mutex
	listeners []func(*Config)
}

// OnChange calls fn with the configuration in force now and after every change, from the reloader's
// goroutine. For work that must follow the configuration, such as which leases to watch.
func (s *Store) OnChange(fn func(*Config)) {
	s.mu.Lock()
	s.listeners = append(s.listeners, fn)
	s.mu.Unlock()
	fn(s.Current())
}

func (s *Store) set(cfg *Config) {
	s.current.Store(cfg)
	s.mu.Lock()
	listeners := slices.Clone(s.listeners)
	s.mu.Unlock()
	for _, fn := range listeners {
		fn(cfg)
	}
}

// NewStore starts with initial.
func NewStore(initial *Config) *Store {
	s := &Store{}
	s.current.Store(initial)
	lastReloadOK.Set(1)
	return s
}

// Current is the configuration in force. Callers must not modify it.
func (s *Store) Current() *Config { return s.current.Load() }

// LoadConfigMap reads the ConfigMap once, at start-up, before anything is served: a missing ConfigMap
// means the defaults, an invalid one (also against what api says the API server serves) is an error, since
// there is no last good configuration to keep.
func LoadConfigMap(ctx context.Context, c client.Reader, key types.NamespacedName, api *apiresources.Index) (*Config, error) {
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, key, cm); apierrors.IsNotFound(err) {
		return DefaultConfig(), nil
	} else if err != nil {
		return nil, fmt.Errorf("reading ConfigMap %s: %w", key, err)
	}
	cfg, err := LoadServed([]byte(cm.Data[Key]), api)
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s: %w", key, err)
	}
	return cfg, nil
}

// Reloader keeps a Store in step with the ConfigMap. Every replica runs it (no leader election): each
// serves admission requests with its own copy.
type Reloader struct {
	Client   client.Reader
	Store    *Store
	Key      types.NamespacedName
	Recorder events.EventRecorder
	// APIs is what the API server serves, which an edit is checked against as at admission.
	APIs interface{ Current() *apiresources.Index }
}

// SetupWithManager registers the reloader for the one ConfigMap it watches.
func (r *Reloader) SetupWithManager(mgr ctrl.Manager) error {
	isOurs := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetNamespace() == r.Key.Namespace && o.GetName() == r.Key.Name
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("config-reloader").
		For(&corev1.ConfigMap{}, builder.WithPredicates(isOurs)).
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false)}).
		Complete(r)
}

// Reconcile applies the ConfigMap's content if it is valid, and reports it if it is not.
func (r *Reloader) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	log := logr.FromContextOrDiscard(ctx)
	cm := &corev1.ConfigMap{}
	if err := r.Client.Get(ctx, r.Key, cm); apierrors.IsNotFound(err) {
		log.Info("ConfigMap is gone; the configuration in force stays", "configMap", r.Key)
		return reconcile.Result{}, nil
	} else if err != nil {
		return reconcile.Result{}, err
	}
	cfg, err := LoadServed([]byte(cm.Data[Key]), r.APIs.Current())
	if err != nil {
		reloads.WithLabelValues("rejected").Inc()
		lastReloadOK.Set(0)
		log.Error(err, "Rejected an invalid configuration; the previous one stays in force", "configMap", r.Key)
		r.Recorder.Eventf(cm, nil, corev1.EventTypeWarning, EventReasonInvalid, "Reload",
			"Not applied, the previous configuration stays in force: %s", truncate(err.Error()))
		return reconcile.Result{}, nil
	}
	r.Store.set(cfg)
	reloads.WithLabelValues("applied").Inc()
	lastReloadOK.Set(1)
	log.Info("Applied configuration", "configMap", r.Key, "resourceVersion", cm.ResourceVersion)
	for _, warning := range cfg.Warnings {
		log.Info("Applied a configuration that uses something deprecated", "configMap", r.Key, "warning", warning)
		r.Recorder.Eventf(cm, nil, corev1.EventTypeWarning, EventReasonDeprecated, "Reload", "%s", truncate(warning))
	}
	return reconcile.Result{}, nil
}

// maxEventNote is how much of a message an Event's note carries: the Events API refuses notes over 1 KiB,
// and the prefix written before it needs room.
const maxEventNote = 900

func truncate(s string) string {
	if len(s) <= maxEventNote {
		return s
	}
	return s[:maxEventNote] + "..."
}
