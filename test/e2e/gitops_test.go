package e2e

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/leasegate/leasegate/test/framework/process"
)

const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// renderedGuardedConfiguration is the ValidatingWebhookConfiguration as the chart renders it without a
// cluster (`helm template`, which config/webhook holds), pointed where the live one points: what a GitOps
// controller applies.
func renderedGuardedConfiguration(live *admissionregistrationv1.ValidatingWebhookConfiguration) *admissionregistrationv1.ValidatingWebhookConfiguration {
	data, err := os.ReadFile(process.WebhookManifests())
	Expect(err).NotTo(HaveOccurred())
	for _, doc := range strings.Split(string(data), "\n---\n") {
		rendered := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if yaml.Unmarshal([]byte(doc), rendered) != nil || rendered.Kind != "ValidatingWebhookConfiguration" {
			continue
		}
		for i := range rendered.Webhooks {
			for _, w := range live.Webhooks {
				if w.Name == rendered.Webhooks[i].Name {
					rendered.Webhooks[i].ClientConfig = w.ClientConfig
				}
			}
		}
		return rendered
	}
	Fail("config/webhook renders no ValidatingWebhookConfiguration")
	return nil
}

// clientSideApply applies desired (a manifest decoded from JSON or YAML, as kubectl reads it) as `kubectl
// apply` does for a built-in type: a three-way strategic merge patch from the last applied configuration
// (none on the first apply), the desired one and the live one, recording the desired one as the last
// applied.
func clientSideApply(ctx context.Context, desired map[string]any) {
	admission := controlPlane.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	name := desired["metadata"].(map[string]any)["name"].(string)
	live, err := admission.Get(ctx, name, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	modified, err := json.Marshal(desired)
	Expect(err).NotTo(HaveOccurred())
	annotated := map[string]any{}
	Expect(json.Unmarshal(modified, &annotated)).To(Succeed())
	metadata := annotated["metadata"].(map[string]any)
	annotations, _ := metadata["annotations"].(map[string]any)
	if annotations == nil {
		annotations = map[string]any{}
	}
	annotations[lastApplied] = string(modified)
	metadata["annotations"] = annotations
	modified, err = json.Marshal(annotated)
	Expect(err).NotTo(HaveOccurred())
	var original []byte
	if last, ok := live.Annotations[lastApplied]; ok {
		original = []byte(last)
	}
	current, err := json.Marshal(live)
	Expect(err).NotTo(HaveOccurred())
	meta, err := strategicpatch.NewPatchMetaFromStruct(live)
	Expect(err).NotTo(HaveOccurred())
	patch, err := strategicpatch.CreateThreeWayMergePatch(original, modified, current, meta, true)
	Expect(err).NotTo(HaveOccurred())
	_, err = admission.Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: "kubectl-client-side-apply"})
	Expect(err).NotTo(HaveOccurred(), "patch %s", patch)
}

// manifest is obj as the JSON a manifest file would hold.
func manifest(obj any) map[string]any {
	data, err := json.Marshal(obj)
	Expect(err).NotTo(HaveOccurred())
	m := map[string]any{}
	Expect(json.Unmarshal(data, &m)).To(Succeed())
	return m
}

// serverSideApply applies desired as Argo CD's server-side sync does: `kubectl apply --server-side
// --force-conflicts` with a field manager of its own.
func serverSideApply(ctx context.Context, desired *admissionregistrationv1.ValidatingWebhookConfiguration) {
	desired = desired.DeepCopy()
	desired.TypeMeta = metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"}
	data, err := json.Marshal(desired)
	Expect(err).NotTo(HaveOccurred())
	_, err = controlPlane.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Patch(ctx, desired.Name, types.ApplyPatchType, data,
		metav1.PatchOptions{FieldManager: "argocd-controller", Force: ptr.To(true)})
	Expect(err).NotTo(HaveOccurred())
}

// guardedVersions records every version of the ValidatingWebhookConfiguration the API server stores
// from now on, and how many of them left the guarded entry without rules or matchConditions.
type guardedVersions struct {
	mu       sync.Mutex
	versions int
	unruled  []string
	watcher  watch.Interface
}

func watchGuardedEntry(ctx context.Context) *guardedVersions {
	admission := controlPlane.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	live, err := admission.Get(ctx, "leasegate", metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	w, err := admission.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=leasegate", ResourceVersion: live.ResourceVersion})
	Expect(err).NotTo(HaveOccurred())
	g := &guardedVersions{watcher: w}
	go func() {
		for event := range w.ResultChan() {
			vwc, ok := event.Object.(*admissionregistrationv1.ValidatingWebhookConfiguration)
			if !ok {
				continue
			}
			g.mu.Lock()
			g.versions++
			for _, entry := range vwc.Webhooks {
				if entry.Name == "guarded.leasegate.io" && (len(entry.Rules) == 0 || len(entry.MatchConditions) == 0) {
					g.unruled = append(g.unruled, vwc.ResourceVersion)
				}
			}
			g.mu.Unlock()
		}
	}()
	return g
}

// take returns how many versions were stored, and those that left the guarded entry unruled, since the
// last take.
func (g *guardedVersions) take() (versions int, unruled []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	versions, unruled = g.versions, g.unruled
	g.versions, g.unruled = 0, nil
	return versions, unruled
}

var _ = Describe("A GitOps sync of the chart", Serial, func() {
	It("never changes the guarded entry's live rules, client-side or server-side with force, and a follower's write is refused at every moment", func(ctx SpecContext) {
		ns, _, _, follower := fencedAgents(ctx, 2)
		followerClient, _ := clientFor(follower.Pod.Kubeconfig)
		admission := controlPlane.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
		live, err := admission.Get(ctx, "leasegate", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		rules := live.Webhooks[0].Rules
		Expect(rules).NotTo(BeEmpty())
		rendered := renderedGuardedConfiguration(live)

		// A follower's guarded write every 20 ms, all along: each must be refused.
		var (
			mu       sync.Mutex
			attempts int
			admitted []string
		)
		sampling, stopSampling := context.WithCancel(ctx)
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			for sampling.Err() == nil {
				err := writeConfigMap(sampling, followerClient, ns, "state", follower.Pod.Name)
				mu.Lock()
				if sampling.Err() == nil {
					attempts++
					if err == nil {
						admitted = append(admitted, time.Now().Format(time.StampMilli))
					}
				}
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		}()
		versions := watchGuardedEntry(ctx)
		DeferCleanup(func() { stopSampling(); <-sampled; versions.watcher.Stop() })

		for _, sync := range []struct {
			name  string
			apply func()
		}{
			{"kubectl apply of helm template's output, the first (no last-applied configuration)", func() { clientSideApply(ctx, manifest(rendered)) }},
			{"kubectl apply of helm template's output, again", func() { clientSideApply(ctx, manifest(rendered)) }},
			{"kubectl apply --server-side --force-conflicts, as Argo CD's server-side sync", func() { serverSideApply(ctx, rendered) }},
			{"the same server-side apply, again", func() { serverSideApply(ctx, rendered) }},
		} {
			By(sync.name)
			sync.apply()
			time.Sleep(300 * time.Millisecond) // writes sampled after the apply, too
			n, unruled := versions.take()
			Expect(unruled).To(BeEmpty(), "versions of the configuration that left the guarded entry without rules or matchConditions (of %d stored)", n)
			live, err := admission.Get(ctx, "leasegate", metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			Expect(live.Webhooks[0].Rules).To(Equal(rules), "the live rules after the sync")
		}
		mu.Lock()
		Expect(admitted).To(BeEmpty(), "follower writes admitted during the syncs, of %d", attempts)
		Expect(attempts).To(BeNumerically(">", 20))
		GinkgoWriter.Printf("%d follower writes during 4 syncs, all refused\n", attempts)
		mu.Unlock()

		By("for contrast, the manifest of a chart that rendered the rules as []: its sync leaves the entry unruled until the elected replica applies them again")
		unsafe := manifest(rendered)
		unsafe["webhooks"].([]any)[0].(map[string]any)["rules"] = []any{}
		clientSideApply(ctx, unsafe)
		Eventually(func(g Gomega) {
			live, err := admission.Get(ctx, "leasegate", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(live.Webhooks[0].Rules).To(Equal(rules))
		}).WithTimeout(10*time.Second).Should(Succeed(), "leasegate-webhook restores the rules")
		_, unruled := versions.take()
		Expect(unruled).NotTo(BeEmpty(), "the apply of rules: [] is stored before leasegate-webhook restores them")
	})
})
