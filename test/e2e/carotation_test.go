package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/leasegate/leasegate/test/framework/certs"
	"github.com/leasegate/leasegate/test/framework/process"
	"github.com/leasegate/leasegate/test/framework/relay"
)

var _ = Describe("The agent's API client", func() {
	It("keeps its leadership through a CA rotation: once ca.crt gains the new CA, the first new connection trusts it, and cut watches resume at once", func(ctx SpecContext) {
		oldCA, err := certs.NewCA("cluster CA before the rotation")
		Expect(err).NotTo(HaveOccurred())
		newCA, err := certs.NewCA("cluster CA after the rotation")
		Expect(err).NotTo(HaveOccurred())
		oldCert, err := oldCA.ServingCertificate()
		Expect(err).NotTo(HaveOccurred())
		newCert, err := newCA.ServingCertificate()
		Expect(err).NotTo(HaveOccurred())
		// The API server, as the agents reach it: serving a certificate of the cluster CA of the moment.
		apiServer, err := relay.StartTLSProxy(controlPlane.Address(), controlPlane.Config.CAData, oldCert)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(apiServer.Close)

		dir := GinkgoT().TempDir()
		caFile := filepath.Join(dir, "ca.crt")
		replaceFile(caFile, oldCA.PEM)
		ns := newNamespace(ctx)
		var agents []*process.Agent
		for i := range 2 {
			pod, err := controlPlane.CreatePod(ctx, ns, fmt.Sprintf("worker-%d", i), dir, "https://"+apiServer.Addr)
			Expect(err).NotTo(HaveOccurred())
			// The kubeconfig names the CA by its file, as a pod's in-cluster config names ca.crt.
			Expect(useCAFile(pod.Kubeconfig, caFile)).To(Succeed())
			agents = append(agents, startAgent(pod, process.AgentOptions{Timing: fastTiming}))
		}
		leader := soleLeader(agents)
		// A steady state first: every watch older than a second. A watch cut sooner without an event
		// counts as failed, as client-go's reflector counts it ("very short watch").
		steady := time.Now().Add(time.Second)
		Eventually(func() time.Time { return getLease(ctx, ns).Spec.RenewTime.Time }).WithTimeout(10 * time.Second).Should(BeTemporally(">", steady))
		before := getLease(ctx, ns)
		transitions, err := leader.Metric("leasegate_agent_leader_transitions_total")
		Expect(err).NotTo(HaveOccurred())

		logged := make([]int, len(agents))
		for i, a := range agents {
			logged[i] = len(a.Logs())
		}

		By("rotating: ca.crt gains the new CA, then the API server serves a certificate the new CA signed, and every connection is cut")
		replaceFile(caFile, append(append([]byte{}, oldCA.PEM...), newCA.PEM...))
		apiServer.Serve(newCert)
		apiServer.CutConnections()
		rotated := time.Now()

		By("the leader leads throughout: its renew deadline passes twice over on new connections")
		Consistently(leader.IsLeader).WithTimeout(2 * fastTiming.RenewDeadline).WithPolling(10 * time.Millisecond).Should(BeTrue())
		after := getLease(ctx, ns)
		Expect(after.Spec.HolderIdentity).To(HaveValue(Equal(leader.Pod.Identity())))
		Expect(after.Spec.RenewTime.Time).To(BeTemporally(">", rotated), "renewed through a connection made after the rotation")
		Expect(after.Spec.LeaseTransitions).To(Equal(before.Spec.LeaseTransitions))
		Expect(leader.Metric("leasegate_agent_leader_transitions_total")).To(Equal(transitions))

		By("the watches cut with their connections resumed at once, logging no failure, as client-go's do")
		for i, a := range agents {
			Expect(a.Logs()[logged[i]:]).NotTo(ContainSubstring("Watching the lease failed"), "agent %s", a.Pod.Name)
		}
	})
})

// replaceFile replaces path's content in one step, as the kubelet updates a projected ca.crt.
func replaceFile(path string, data []byte) {
	tmp := path + ".tmp"
	Expect(os.WriteFile(tmp, data, 0o644)).To(Succeed())
	Expect(os.Rename(tmp, path)).To(Succeed())
}

// useCAFile points every cluster of the kubeconfig at caFile instead of inline CA data.
func useCAFile(kubeconfig, caFile string) error {
	config, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		return err
	}
	for _, cluster := range config.Clusters {
		cluster.CertificateAuthorityData = nil
		cluster.CertificateAuthority = caFile
	}
	return clientcmd.WriteToFile(*config, kubeconfig)
}
