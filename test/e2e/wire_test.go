package e2e

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
)

// webhookTLS trusts the suite's webhook serving certificate (envtest's, for 127.0.0.1).
func webhookTLS() *tls.Config {
	roots := x509.NewCertPool()
	Expect(roots.AppendCertsFromPEM(webhook.CA)).To(BeTrue())
	return &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
}

var _ = Describe("The webhook server, given bad requests", func() {
	It("refuses an unknown path, a wrong content type, an oversized body and a trickled one cleanly, and admits pods all along", func(ctx SpecContext) {
		client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: webhookTLS()}}
		post := func(path, contentType string, body io.Reader) (int, *admissionv1.AdmissionResponse) {
			resp, err := client.Post(webhook.URL+path, contentType, body)
			Expect(err).NotTo(HaveOccurred())
			defer resp.Body.Close()
			data, err := io.ReadAll(resp.Body)
			Expect(err).NotTo(HaveOccurred())
			review := &admissionv1.AdmissionReview{}
			if json.Unmarshal(data, review) != nil {
				return resp.StatusCode, nil
			}
			return resp.StatusCode, review.Response
		}
		review := []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","operation":"CREATE","namespace":"default","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}}}`)

		By("an unknown path: 404")
		code, _ := post("/mutate-everything", "application/json", bytes.NewReader(review))
		Expect(code).To(Equal(http.StatusNotFound))

		By("a wrong content type: refused, naming the expected one")
		code, answer := post("/mutate-pods", "text/plain", bytes.NewReader(review))
		Expect(code).To(Equal(http.StatusOK))
		Expect(answer).NotTo(BeNil())
		Expect(answer.Allowed).To(BeFalse())
		Expect(answer.Result.Code).To(BeEquivalentTo(http.StatusBadRequest))
		Expect(answer.Result.Message).To(ContainSubstring("expected application/json"))

		By("a body over the 7 MiB limit: refused as too large")
		code, answer = post("/validate-guarded", "application/json", io.MultiReader(bytes.NewReader(review), bytes.NewReader(make([]byte, 8<<20))))
		Expect(code).To(Equal(http.StatusOK))
		Expect(answer).NotTo(BeNil())
		Expect(answer.Result.Code).To(BeEquivalentTo(http.StatusRequestEntityTooLarge))

		By("bodies trickled by 20 clients: each connection ends within the body deadline, while the API server's calls are answered")
		u, err := url.Parse(webhook.URL)
		Expect(err).NotTo(HaveOccurred())
		var wg sync.WaitGroup
		held := make([]time.Duration, 20)
		for i := range held {
			conn, err := tls.Dial("tcp", u.Host, webhookTLS())
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(conn.Close)
			_, err = fmt.Fprintf(conn, "POST /validate-guarded HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"request\":", u.Host)
			Expect(err).NotTo(HaveOccurred())
			opened := time.Now()
			wg.Go(func() {
				defer GinkgoRecover()
				_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
				// The server answers the failed read (an AdmissionReview refusing it) or just closes; either
				// way the connection ends, and not because this client gave up.
				_, _ = io.Copy(io.Discard, bufio.NewReader(conn))
				held[i] = time.Since(opened)
			})
		}
		ns := labelledNamespace(ctx, optedIn)
		pod, err := createPod(ctx, deploymentPod(ns), false)
		Expect(err).NotTo(HaveOccurred(), "the API server's call is answered while the trickling clients hold their connections")
		Expect(isInjected(pod)).To(BeTrue())
		wg.Wait()
		for i, d := range held {
			Expect(d).To(BeNumerically("<", 20*time.Second), "trickling client %d was cut off by the server's body deadline (10 s), not by its own (30 s)", i)
		}
		AddReportEntry("trickled bodies", fmt.Sprintf("connections ended after %s to %s", slices.Min(held), slices.Max(held)))
	})
})
