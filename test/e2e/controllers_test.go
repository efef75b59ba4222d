package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/leasegate/leasegate/test/framework/checkout"
	"github.com/leasegate/leasegate/test/framework/process"
)

// replica is one replica of a controller that runs its own election: a pod object, and a process that
// authenticates with a token bound to it. Like a pod with restartPolicy Always, the process is started
// again when it exits, until the spec stops it: a controller that crashes at startup (cert-manager's
// cert-manager/cert-manager#6822) comes back as a follower, and the spec finds the leader again.
type replica struct {
	pod *process.Pod

	mu       sync.Mutex
	runs     []*process.Process // every run so far, the current one last
	stopping bool
}

// startReplicas runs a controller as pods ctrl-0 and ctrl-1 of namespace, with no agent. Each process
// authenticates with a token bound to its pod and, as in a pod, has the pod's name as its hostname (a UTS
// namespace of its own) and in POD_NAME. args gives the command line for a pod.
func startReplicas(ctx context.Context, namespace string, args func(pod *process.Pod) []string) []*replica {
	dir := GinkgoT().TempDir()
	var replicas []*replica
	for i := range 2 {
		pod, err := controlPlane.CreatePod(ctx, namespace, fmt.Sprintf("ctrl-%d", i), dir, "")
		Expect(err).NotTo(HaveOccurred())
		r := &replica{pod: pod}
		Expect(r.run(args(pod))).To(Succeed())
		DeferCleanup(func() {
			r.stop(syscall.SIGTERM).Terminate(5 * time.Second)
			if CurrentSpecReport().Failed() {
				AddReportEntry("logs of "+pod.Name, r.logs())
			}
		})
		replicas = append(replicas, r)
	}
	return replicas
}

// unshareUTS is the unshare flags that give a replica a UTS namespace of its own, where it sets its pod's
// name as hostname: `--uts` as root; as another user, in a user namespace of its own too, where the kernel
// lets unprivileged users make one. An error when neither works here: the specs that run replicas skip.
var unshareUTS = sync.OnceValues(func() ([]string, error) {
	var tried []string
	for _, flags := range [][]string{{"--uts"}, {"--user", "--map-root-user", "--uts"}} {
		out, err := exec.Command("unshare", append(flags, "hostname", "ctrl-probe")...).CombinedOutput()
		if err == nil {
			return flags, nil
		}
		why := err.Error()
		if said := strings.TrimSpace(string(out)); said != "" {
			why += ": " + said
		}
		tried = append(tried, fmt.Sprintf("`unshare %s`: %s", strings.Join(flags, " "), why))
	}
	return nil, fmt.Errorf("needs root, or unprivileged user namespaces, for a UTS namespace per replica (its hostname is its pod's "+
		"name, as in a pod); as uid %d here: %s", os.Geteuid(), strings.Join(tried, "; "))
})

// run starts the replica's process, and starts it again each time it exits until stop is called.
func (r *replica) run(args []string) error {
	start := func() (*process.Process, error) {
		unshare, err := unshareUTS()
		if err != nil {
			return nil, err
		}
		cmd := exec.Command("unshare", append(append(unshare, "sh", "-c", `hostname "$0" && exec "$@"`, r.pod.Name), args...)...)
		cmd.Env = []string{"KUBECONFIG=" + r.pod.Kubeconfig, "POD_NAME=" + r.pod.Name, "PATH=/usr/bin:/bin:/usr/sbin:/sbin"}
		return process.StartProcess(cmd)
	}
	p, err := start()
	if err != nil {
		return err
	}
	r.runs = append(r.runs, p)
	go func() {
		for {
			<-p.Exited()
			time.Sleep(time.Second) // a kubelet's first restart back-off is 10 s; the spec's leases are shorter
			r.mu.Lock()
			if r.stopping {
				r.mu.Unlock()
				return
			}
			next, err := start()
			if err != nil { // the spec then fails waiting for a holder, with this in its output
				r.mu.Unlock()
				fmt.Fprintf(GinkgoWriter, "starting %s again: %v\n", r.pod.Name, err)
				return
			}
			r.runs = append(r.runs, next)
			r.mu.Unlock()
			p = next
		}
	}()
	return nil
}

// stop sends sig to the current process, which is not started again, and returns it.
func (r *replica) stop(sig syscall.Signal) *process.Process {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopping = true
	p := r.runs[len(r.runs)-1]
	_ = p.Signal(sig)
	return p
}

// logs is the output of every run, each restart marked with the exit code that caused it.
func (r *replica) logs() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for i, p := range r.runs {
		if i > 0 {
			fmt.Fprintf(&b, "\n--- started again after exit code %d ---\n", r.runs[i-1].ExitCode())
		}
		b.WriteString(p.Logs())
	}
	return b.String()
}

// leaseHolder is the holder lease namespace/name names now.
func leaseHolder(ctx context.Context, namespace, name string) (string, error) {
	l, err := controlPlane.Client.CoordinationV1().Leases(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return ptr.Deref(l.Spec.HolderIdentity, ""), nil
}

// holding is the replica holder names (its pod name is the holder's prefix) and the other one.
func holding(holder string, replicas []*replica) (leader, other *replica) {
	if strings.HasPrefix(holder, replicas[1].pod.Name) {
		return replicas[1], replicas[0]
	}
	return replicas[0], replicas[1]
}

// holderOf waits until lease namespace/name names a holder matching pattern, and returns the holder and
// the replica it names (ctrl-0 or ctrl-1) and the other one.
func holderOf(ctx context.Context, namespace, name string, pattern *regexp.Regexp, replicas []*replica) (holder string, leader, other *replica) {
	Eventually(func(g Gomega) {
		var err error
		holder, err = leaseHolder(ctx, namespace, name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(holder).To(MatchRegexp(pattern.String()))
	}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	leader, other = holding(holder, replicas)
	return holder, leader, other
}

// withHolderFormat adds holderFormat to the single guard of guardConfig's configuration.
func withHolderFormat(config, holderFormat string) string {
	return config + "  holderFormat: " + holderFormat + "\n"
}

var _ = Describe("The fence on controllers that elect themselves", Serial, func() {
	BeforeEach(func() {
		if _, err := unshareUTS(); err != nil {
			Skip(err.Error())
		}
	})

	DescribeTable("fences the replica that does not hold the lease, reading the holder in the controller's own format",
		func(ctx SpecContext, pkg, holderFormat, holderPattern string) {
			ns := newNamespace(ctx)
			guard := strings.Replace(guardConfig(ns, "deny", "deny"), "lease: worker", "lease: controller", 1)
			if holderFormat != "" {
				guard = withHolderFormat(guard, holderFormat)
			}
			setConfig(ctx, guard)
			binary := filepath.Join(GinkgoT().TempDir(), filepath.Base(pkg))
			build := exec.Command("go", "build", "-o", binary, pkg)
			build.Dir = checkout.RepoRoot()
			out, err := build.CombinedOutput()
			Expect(err).NotTo(HaveOccurred(), string(out))
			replicas := startReplicas(ctx, ns, func(*process.Pod) []string {
				return []string{binary, "--namespace", ns, "--lease", "controller"}
			})

			holder, leader, follower := holderOf(ctx, ns, "controller", regexp.MustCompile(holderPattern), replicas)
			Eventually(func() string { return leader.logs() + follower.logs() }).WithTimeout(10 * time.Second).Should(And(
				ContainSubstring("leader leader-output allowed"),
				ContainSubstring("any any-"+leader.pod.Name+" allowed"),
				ContainSubstring(fmt.Sprintf(`any any-%s denied: admission webhook "guarded.leasegate.io" denied the request: `+
					`leasegate: pod %s/%s (system:serviceaccount:%s:worker) may not create configmaps %s/any-%s: `+
					`lease %s/controller is held by %s (guard "worker"): another pod holds the lease`,
					follower.pod.Name, ns, follower.pod.Name, ns, ns, follower.pod.Name, ns, holder)),
			))
			Expect(follower.logs()).NotTo(ContainSubstring("allowed"), "nothing the follower wrote passed")
			Expect(leader.logs()).NotTo(ContainSubstring("denied"), "nothing the leader wrote was refused")

			By("stopping the leader: the other replica takes over, and its writes pass")
			leader.stop(syscall.SIGTERM)
			holderOf(ctx, ns, "controller", regexp.MustCompile("^"+follower.pod.Name), replicas)
			Eventually(follower.logs).WithTimeout(10 * time.Second).Should(And(
				ContainSubstring("leader leader-output allowed"), ContainSubstring("any any-"+follower.pod.Name+" allowed")))
		},
		Entry("a controller-runtime manager: <hostname>_<uuid>, read by the default format", "./test/fixtures/crcontroller", "", `^ctrl-[01]_[0-9a-f-]{36}$`),
		Entry("a client-go controller whose identity is its pod name: holderFormat pod-name", "./test/fixtures/clientgocontroller", "pod-name", `^ctrl-[01]$`),
	)

	It("fences cert-manager's controller, unmodified, by the lease it keeps in kube-system", func(ctx SpecContext) {
		tools, err := checkout.FindTools()
		Expect(err).NotTo(HaveOccurred())
		_, err = envtest.InstallCRDs(controlPlane.Config, envtest.CRDInstallOptions{Paths: []string{tools.CertManagerCRDs}, ErrorIfPathMissing: true})
		Expect(err).NotTo(HaveOccurred())
		cmNamespace, appNamespace := newNamespace(ctx), newNamespace(ctx)
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "cert-manager-" + cmNamespace},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: cmNamespace, Name: process.ServiceAccountName}},
		}
		_, err = controlPlane.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx context.Context) {
			Expect(controlPlane.Client.RbacV1().ClusterRoleBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})).To(Succeed())
			err := controlPlane.Client.CoordinationV1().Leases("kube-system").Delete(ctx, "cert-manager-controller", metav1.DeleteOptions{})
			Expect(err == nil || apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)
		})
		cmGuard := func(holderFormat string) string {
			guard := fmt.Sprintf(`election: {clockSkewMargin: 0s}
guards:
- name: cert-manager
  lease: kube-system/cert-manager-controller
  serviceAccounts: [%s/worker]
  resources:
  - {group: "", resources: [secrets]}
  - {group: cert-manager.io, resources: [certificaterequests]}
  namespaces: [%s]
`, cmNamespace, appNamespace)
			if holderFormat != "" {
				guard = withHolderFormat(guard, holderFormat)
			}
			return guard
		}

		By("starting two replicas of cert-manager's controller, as pods ctrl-0 and ctrl-1")
		setConfig(ctx, cmGuard(""))
		replicas := startReplicas(ctx, cmNamespace, func(pod *process.Pod) []string {
			return []string{tools.CertManagerController, "--kubeconfig=" + pod.Kubeconfig,
				"--leader-election-namespace=kube-system", "--cluster-resource-namespace=" + cmNamespace,
				"--leader-election-lease-duration=4s", "--leader-election-renew-deadline=3s", "--leader-election-retry-period=500ms",
				"--metrics-listen-address=127.0.0.1:0"}
		})
		// Each step finds the holder again: a replica that crashed at startup came back as a follower.
		const cmLease = "cert-manager-controller"
		cmIdentity := regexp.MustCompile(`^ctrl-[01]-external-cert-manager-controller$`)
		holderOf(ctx, "kube-system", cmLease, cmIdentity, replicas)
		// writeAs reads the holder, writes the probe Secret with the token of the replica pick chooses (the
		// holder's or the other's), and matches the answer with what expect makes of both.
		writeAs := func(pick func(leader, other *replica) *replica, expect func(holder string, writer *replica) OmegaMatcher) func(Gomega) {
			return func(g Gomega) {
				holder, err := leaseHolder(ctx, "kube-system", cmLease)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(holder).To(MatchRegexp(cmIdentity.String()))
				writer := pick(holding(holder, replicas))
				client, _ := clientFor(writer.pod.Kubeconfig)
				g.Expect(writeSecret(ctx, client, appNamespace, "probe")).To(expect(holder, writer))
			}
		}
		theLeader := func(leader, _ *replica) *replica { return leader }
		theFollower := func(_, follower *replica) *replica { return follower }

		By("with the default holder format, the leader is refused, and told which format reads its lease")
		Eventually(writeAs(theLeader, func(holder string, _ *replica) OmegaMatcher {
			return MatchError(ContainSubstring(fmt.Sprintf(
				`lease kube-system/cert-manager-controller is held by %s (guard "cert-manager"): `+
					`the holder contains this pod's name, but not in the holder format the guard reads (holderFormat "client-go"); `+
					`if the holder is this pod, set the guard's holderFormat to "cert-manager"`, holder)))
		})).WithTimeout(30 * time.Second).Should(Succeed())

		By("with holderFormat cert-manager, the leader issues a Certificate: its Secret and CertificateRequest writes pass")
		setConfig(ctx, cmGuard("cert-manager"))
		Eventually(writeAs(theLeader, func(string, *replica) OmegaMatcher { return Succeed() })).WithTimeout(30 * time.Second).Should(Succeed())
		certManager := dynamic.NewForConfigOrDie(controlPlane.Config)
		createCertManagerObject(ctx, certManager, appNamespace, "Issuer", "selfsigned", map[string]any{"selfSigned": map[string]any{}})
		expectCertificateIssued(ctx, certManager, appNamespace, "first")

		By("a write with the follower's token is denied, naming the holder")
		Eventually(writeAs(theFollower, func(holder string, follower *replica) OmegaMatcher {
			return MatchError(ContainSubstring(fmt.Sprintf(
				`leasegate: pod %s/%s (system:serviceaccount:%s:worker) may not update secrets %s/probe: `+
					`lease kube-system/cert-manager-controller is held by %s (guard "cert-manager"): another pod holds the lease`,
				appNamespace, follower.pod.Name, cmNamespace, appNamespace, holder)))
		})).WithTimeout(30 * time.Second).Should(Succeed())

		By("stopping the leader: the other replica takes over once the lease expires, and issues the next Certificate")
		_, leader, follower := holderOf(ctx, "kube-system", cmLease, cmIdentity, replicas)
		leader.stop(syscall.SIGTERM)
		holderOf(ctx, "kube-system", cmLease, regexp.MustCompile("^"+follower.pod.Name+"-external-cert-manager-controller$"), replicas)
		expectCertificateIssued(ctx, certManager, appNamespace, "second")
		followerClient, _ := clientFor(follower.pod.Kubeconfig)
		leaderClient, _ := clientFor(leader.pod.Kubeconfig)
		Expect(writeSecret(ctx, followerClient, appNamespace, "probe")).To(Succeed(), "the new leader's own token")
		Expect(writeSecret(ctx, leaderClient, appNamespace, "probe")).To(MatchError(ContainSubstring("another pod holds the lease")),
			"the old leader's token")
	})
})

// writeSecret creates or updates Secret namespace/name: a write the cert-manager guard fences.
func writeSecret(ctx context.Context, c kubernetes.Interface, namespace, name string) error {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: map[string]string{"at": time.Now().String()}}
	_, err := c.CoreV1().Secrets(namespace).Update(ctx, secret, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		_, err = c.CoreV1().Secrets(namespace).Create(ctx, secret, metav1.CreateOptions{})
	}
	return err
}

// createCertManagerObject creates a cert-manager.io/v1 object with spec.
func createCertManagerObject(ctx context.Context, c dynamic.Interface, namespace, kind, name string, spec map[string]any) {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cert-manager.io/v1", "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"spec":     spec,
	}}
	resource := certificatesResource.GroupResource().WithVersion("v1")
	resource.Resource = strings.ToLower(kind) + "s"
	_, err := c.Resource(resource).Namespace(namespace).Create(ctx, obj, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
}

// expectCertificateIssued creates a Certificate from the selfsigned Issuer and waits until cert-manager
// reports it Ready with its Secret written.
func expectCertificateIssued(ctx context.Context, c dynamic.Interface, namespace, name string) {
	createCertManagerObject(ctx, c, namespace, "Certificate", name, map[string]any{
		"secretName": name + "-tls", "commonName": name + ".example", "dnsNames": []any{name + ".example"},
		"issuerRef": map[string]any{"name": "selfsigned", "kind": "Issuer"},
	})
	Eventually(func() (string, error) {
		cert, err := c.Resource(certificatesResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return readyCondition(cert), nil
	}).WithTimeout(60*time.Second).WithPolling(250*time.Millisecond).Should(Equal("True"), "Certificate %s Ready", name)
	secret, err := controlPlane.Client.CoreV1().Secrets(namespace).Get(ctx, name+"-tls", metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	Expect(parseCertificate(secret.Data["tls.crt"]).DNSNames).To(ConsistOf(name + ".example"))
}
