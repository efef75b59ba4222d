package process

import (
	"fmt"
	"net/http"
	"strings"

	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"

	"github.com/leasegate/leasegate/internal/kubeclient"
)

// PodClients makes the agent's own API clients (package kubeclient) that act as pods, each impersonating
// a service account with a pod-bound token's pod-name and pod-uid extras, all through one admin
// connection: thousands of in-process electors load the API server as thousands of agents would without
// holding thousands of connections on the test's side.
type PodClients struct {
	host      string
	transport http.RoundTripper
	// clientGo is client-go's own transport for admin, which the client-go clients share the same way.
	clientGo http.RoundTripper
}

// NewPodClients connects with admin's credentials.
func NewPodClients(admin *rest.Config) (*PodClients, error) {
	config := &kubeclient.Config{Host: admin.Host, CAData: admin.CAData, CertData: admin.CertData, KeyData: admin.KeyData, UserAgent: "leasegate-agent"}
	client, err := config.HTTPClient()
	if err != nil {
		return nil, err
	}
	clientGo, err := rest.TransportFor(admin)
	if err != nil {
		return nil, err
	}
	return &PodClients{host: admin.Host, transport: client.Transport, clientGo: clientGo}, nil
}

// ClientGoFor is a client-go Lease client acting as For's pod does, with client-go's defaults otherwise
// (its rate limit of 5 requests/s, burst 10, per client): what a controller built on client-go's
// leaderelection gets.
func (p *PodClients) ClientGoFor(namespace, serviceAccount, podName, podUID string) coordinationv1client.LeasesGetter {
	client, err := coordinationv1client.NewForConfigAndClient(&rest.Config{Host: p.host, UserAgent: "client-go-elector"},
		&http.Client{Transport: impersonation{next: p.clientGo, headers: impersonationHeaders(namespace, serviceAccount, podName, podUID)}})
	if err != nil {
		panic(err) // the host was a rest.Config's, which client-go already parsed
	}
	return client
}

// For is a client that authenticates as pod podName (UID podUID) of namespace, running as serviceAccount.
func (p *PodClients) For(namespace, serviceAccount, podName, podUID string) *kubeclient.Client {
	impersonate := impersonation{next: p.transport, headers: impersonationHeaders(namespace, serviceAccount, podName, podUID)}
	client, err := kubeclient.NewForHTTPClient(p.host, &http.Client{Transport: impersonate})
	if err != nil {
		panic(err) // the host was a rest.Config's, which client-go already parsed
	}
	return client
}

// impersonationHeaders make a request act as a pod-bound token of the pod would.
func impersonationHeaders(namespace, serviceAccount, podName, podUID string) http.Header {
	return http.Header{
		"Impersonate-User": {"system:serviceaccount:" + namespace + ":" + serviceAccount},
		"Impersonate-Extra-" + headerKeyEscape("authentication.kubernetes.io/pod-name"): {podName},
		"Impersonate-Extra-" + headerKeyEscape("authentication.kubernetes.io/pod-uid"):  {podUID},
	}
}

type impersonation struct {
	next    http.RoundTripper
	headers http.Header
}

func (i impersonation) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range i.headers {
		req.Header[k] = v
	}
	return i.next.RoundTrip(req)
}

// headerKeyEscape percent-encodes what a header name cannot hold, as client-go does for impersonated
// extras' keys ("/" becomes %2F; the API server decodes them).
func headerKeyEscape(key string) string {
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-!#$&'*+.^_`|~", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}
