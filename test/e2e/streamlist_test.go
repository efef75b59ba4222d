package e2e

import (
	"fmt"
	"net/http"
	"strconv"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/leasegate/leasegate/test/framework/process"
)

// streamsLists reports whether the control plane's kube-apiserver serves streamed lists by default (its
// WatchList feature gate: on in 1.32 and from 1.34, off in 1.30, 1.31 and 1.33).
func streamsLists() bool {
	v, err := controlPlane.Client.Discovery().ServerVersion()
	Expect(err).NotTo(HaveOccurred())
	minor, err := strconv.Atoi(v.Minor)
	Expect(err).NotTo(HaveOccurred(), "server minor %q", v.Minor)
	return minor == 32 || minor >= 34
}

// leaseReads are an agent's reads of its lease's collection, in order: "streamed list", "list" or
// "watch from <resourceVersion>".
func leaseReads(arrivals []arrival) []string {
	var reads []string
	for _, a := range arrivals {
		q := a.url.Query()
		switch {
		case a.method != http.MethodGet || q.Get("fieldSelector") != "metadata.name="+leaseName:
		case q.Get("sendInitialEvents") == "true":
			reads = append(reads, "streamed list")
		case q.Get("watch") == "true":
			reads = append(reads, "watch from "+q.Get("resourceVersion"))
		default:
			reads = append(reads, "list")
		}
	}
	return reads
}

var _ = Describe("An agent reading its lease", func() {
	It("lists it in its watch where the API server streams lists, and lists then watches where it refuses", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		proxy := startSheddingProxy() // sheds nothing: it records the agent's requests
		agent := startAgents(ctx, ns, 1, process.AgentOptions{}, proxy.URL)[0]
		Eventually(agent.IsLeader).WithContext(ctx).Should(BeTrue())

		reads := leaseReads(proxy.seen())
		Expect(reads).NotTo(BeEmpty())
		streams := streamsLists()
		By(fmt.Sprintf("the agent read its lease with %q (the API server streams lists: %t)", reads, streams))
		if streams {
			Expect(reads).To(Equal([]string{"streamed list"}), "one request to list and watch the lease")
			return
		}
		Expect(len(reads)).To(BeNumerically(">=", 3), "reads: %v", reads)
		Expect(reads[:2]).To(Equal([]string{"streamed list", "list"}), "a refused streamed list, then a list")
		Expect(reads[2]).To(HavePrefix("watch from "))
		Expect(reads[2]).NotTo(Equal("watch from "), "the watch starts from the list's resourceVersion")
		Expect(reads[1:]).NotTo(ContainElement("streamed list"), "the refused streamed list was asked again")
	})
})
