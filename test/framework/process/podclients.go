package process

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
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

// connsAtOnce caps each shared transport's connections that are being dialled or take new requests.
// The process holds every elector's connections: unbounded, the redials of 30,000 electors after an API
// server restart opened more at once than this container's file limit (20,000, not raisable), and the
// electors' requests failed with "too many open files", which no real agent, a process of its own,
// would meet. It is far above what the electors need: kube-apiserver allows 100 streams per HTTP/2
// connection, so 30,000 watches ride on 300.
const connsAtOnce = 1000

// NewPodClients connects with admin's credentials.
func NewPodClients(admin *rest.Config) (*PodClients, error) {
	// No UserAgent here: For's requests carry it with the pod's identity, so that the client is the bare
	// transport, whose connections can be capped.
	config := &kubeclient.Config{Host: admin.Host, CAData: admin.CAData, CertData: admin.CertData, KeyData: admin.KeyData}
	client, err := config.HTTPClient()
	if err != nil {
		return nil, err
	}
	transport, ok := client.Transport.(*http.Transport)
	if !ok {
		return nil, fmt.Errorf("the agent's client has a %T, not an *http.Transport whose connections can be capped", client.Transport)
	}
	transport.MaxConnsPerHost = connsAtOnce
	clientGo, err := clientGoTransport(admin)
	if err != nil {
		return nil, err
	}
	return &PodClients{host: admin.Host, transport: transport, clientGo: clientGo}, nil
}

// clientGoTransport is the transport rest.TransportFor(admin) makes (client-go's transport cache's,
// with its dialer, timeouts and HTTP/2 health checks), with its connections capped as the agent's are.
// It is built here rather than taken from the cache, which shares it with every other client of admin.
func clientGoTransport(admin *rest.Config) (http.RoundTripper, error) {
	tlsConfig, err := rest.TLSConfigFor(admin)
	if err != nil {
		return nil, err
	}
	transport := utilnet.SetTransportDefaults(&http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     tlsConfig,
		MaxIdleConnsPerHost: 25,
		MaxConnsPerHost:     connsAtOnce,
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	})
	return rest.HTTPWrappersForConfig(admin, transport)
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
	headers := impersonationHeaders(namespace, serviceAccount, podName, podUID)
	headers.Set("User-Agent", "leasegate-agent")
	impersonate := impersonation{next: p.transport, headers: headers}
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
