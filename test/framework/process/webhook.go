package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/leasegate/leasegate/test/framework/checkout"
	"github.com/leasegate/leasegate/test/framework/observe"
)

// Webhook is a running leasegate-webhook process that the API server calls over real TLS: envtest
// generates a CA and a serving certificate, the process serves it from --cert-dir, and the webhook
// configurations from config/webhook carry the CA bundle and point at the process.
type Webhook struct {
	*Process
	Namespace  string
	MetricsURL string
	// URL is the TLS webhook server, https://127.0.0.1:<port>; CA signs its certificate.
	URL string
	CA  []byte
}

// WebhookManifests is the webhook configuration users install, which the tests install too.
func WebhookManifests() string {
	return filepath.Join(checkout.RepoRoot(), "config", "webhook", "webhooks.yaml")
}

// StartWebhook runs binary as leasegate-webhook in namespace, with args after the flags it always gets,
// and installs the webhook configurations once it is ready (replacing those of a webhook started before
// on this control plane), then waits until the API server actually calls it.
func (c *ControlPlane) StartWebhook(ctx context.Context, binary, dir, namespace string, args ...string) (*Webhook, error) {
	if err := c.ensureNamespace(ctx, namespace, nil); err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "admin.kubeconfig")
	if err := c.AdminKubeconfig(kubeconfig); err != nil {
		return nil, err
	}
	var (
		w       *Webhook
		install *envtest.WebhookInstallOptions
		err     error
	)
	// A free port can be taken between choosing it and binding it (an outgoing connection's ephemeral
	// port, say): then start again on new ports.
	for attempt := 1; ; attempt++ {
		w, install, err = startWebhookProcess(ctx, binary, kubeconfig, namespace, args)
		if err == nil {
			break
		}
		if attempt == 3 || !errors.Is(err, errPortTaken) {
			return nil, err
		}
	}
	// Installed only now that the server answers, as an installer would after the rollout.
	if err := c.installWebhookConfigurations(ctx, install); err != nil {
		w.Stop()
		return nil, err
	}
	if err := c.waitInjecting(ctx); err != nil {
		w.Stop()
		return nil, fmt.Errorf("%w\n%s", err, w.Logs())
	}
	return w, nil
}

var errPortTaken = errors.New("a port leasegate-webhook was given was taken before it could bind it")

// startWebhookProcess runs leasegate-webhook on free loopback ports and waits until it is ready.
func startWebhookProcess(ctx context.Context, binary, kubeconfig, namespace string, args []string) (*Webhook, *envtest.WebhookInstallOptions, error) {
	install := &envtest.WebhookInstallOptions{Paths: []string{WebhookManifests()}, LocalServingHost: "127.0.0.1"}
	if err := install.PrepWithoutInstalling(); err != nil {
		return nil, nil, err
	}
	healthPort, err := FreePort()
	if err != nil {
		return nil, nil, err
	}
	metricsPort, err := FreePort()
	if err != nil {
		return nil, nil, err
	}
	process, err := StartProcess(exec.Command(binary, append([]string{
		"--kubeconfig", kubeconfig,
		"--namespace", namespace,
		"--cert-dir", install.LocalServingCertDir,
		"--webhook-port", strconv.Itoa(install.LocalServingPort),
		"--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", healthPort),
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", metricsPort),
		// Plain metrics on loopback, for the specs to read; the chart's secure metrics have a spec of their own.
		"--metrics-secure=false",
	}, args...)...))
	if err != nil {
		return nil, nil, err
	}
	w := &Webhook{
		Process: process, Namespace: namespace, MetricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort),
		URL: fmt.Sprintf("https://127.0.0.1:%d", install.LocalServingPort), CA: install.LocalServingCAData,
	}
	if err := w.waitReady(ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", healthPort)); err != nil {
		w.Stop()
		if strings.Contains(w.Logs(), "address already in use") {
			return nil, nil, fmt.Errorf("%w: %w", errPortTaken, err)
		}
		return nil, nil, err
	}
	return w, install, nil
}

// installWebhookConfigurations creates the configurations, or points existing ones at this webhook: one
// left by a webhook that has stopped would otherwise fail every call (failurePolicy Fail).
func (c *ControlPlane) installWebhookConfigurations(ctx context.Context, install *envtest.WebhookInstallOptions) error {
	admission := c.Client.AdmissionregistrationV1()
	for _, config := range install.MutatingWebhooks {
		for i := range config.Webhooks {
			fixURL(&config.Webhooks[i].ClientConfig)
		}
		if err := createOrReplace(ctx, admission.MutatingWebhookConfigurations(), config); err != nil {
			return err
		}
	}
	for _, config := range install.ValidatingWebhooks {
		for i := range config.Webhooks {
			fixURL(&config.Webhooks[i].ClientConfig)
		}
		if err := createOrReplace(ctx, admission.ValidatingWebhookConfigurations(), config); err != nil {
			return err
		}
	}
	return nil
}

// configurations is what createOrReplace needs of a typed client of webhook configurations.
type configurations[T any] interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
	Get(context.Context, string, metav1.GetOptions) (T, error)
	Update(context.Context, T, metav1.UpdateOptions) (T, error)
}

// createOrReplace creates obj, or replaces the object of its name.
func createOrReplace[T metav1.Object](ctx context.Context, api configurations[T], obj T) error {
	_, err := api.Create(ctx, obj, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	old, err := api.Get(ctx, obj.GetName(), metav1.GetOptions{})
	if err != nil {
		return err
	}
	obj.SetResourceVersion(old.GetResourceVersion())
	_, err = api.Update(ctx, obj, metav1.UpdateOptions{})
	return err
}

// fixURL cleans the path envtest builds as "https://host:port//mutate-pods"; Go's ServeMux would answer
// the double slash with a redirect, which the API server does not follow.
func fixURL(cc *admissionregistrationv1.WebhookClientConfig) {
	if cc.URL == nil {
		return
	}
	if u, err := url.Parse(*cc.URL); err == nil {
		u.Path = path.Clean(u.Path)
		cc.URL = ptr.To(u.String())
	}
}

func (w *Webhook) waitReady(ctx context.Context, url string) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-w.exited:
			return fmt.Errorf("leasegate-webhook exited before it was ready:\n%s", w.Logs())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	return fmt.Errorf("leasegate-webhook not ready after 60s:\n%s", w.Logs())
}

// waitInjecting dry-runs a pod in an opted-in namespace until the API server calls the webhook: the
// API server picks up new webhook configurations asynchronously.
func (c *ControlPlane) waitInjecting(ctx context.Context) error {
	const probe = "leasegate-probe"
	if err := c.ensureNamespace(ctx, probe, map[string]string{"leasegate.io/inject": "enabled"}); err != nil {
		return err
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: probe},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}},
	}
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		got, err := c.Client.CoreV1().Pods(probe).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil && got.Annotations["leasegate.io/status"] != "" {
			return nil
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("the API server did not call leasegate-webhook within 30s (last error: %v)", last)
}

func (c *ControlPlane) ensureNamespace(ctx context.Context, name string, labels map[string]string) error {
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// Metrics scrapes the webhook's /metrics. When it cannot be reached because the webhook exited, the error
// says so, with the exit code and the end of its log.
func (w *Webhook) Metrics() (observe.Metrics, error) {
	resp, err := http.Get(w.MetricsURL)
	if err != nil {
		select {
		case <-w.Exited():
			logs := strings.Split(strings.TrimSpace(w.Logs()), "\n")
			return nil, fmt.Errorf("%w: leasegate-webhook exited with code %d; the end of its log:\n%s",
				err, w.ExitCode(), strings.Join(logs[max(0, len(logs)-40):], "\n"))
		default:
			return nil, err
		}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return observe.ParseMetrics(body)
}

// Stop terminates the webhook gracefully, so it releases its leader election, and waits for it.
func (w *Webhook) Stop() { w.Terminate(10 * time.Second) }
