package process

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"

	"github.com/leasegate/leasegate/internal/kubeclient"
)

// PodClients makes the agent's own API clients (package kubeclient) that act as pods, each impersonating
// a service account with a pod-bound token's pod-name and pod-uid extras, over admin connections that
// podsPerConnection pods share: thousands of in-process electors load the API server as thousands of
// agents would without holding thousands of connections on the test's side.
type PodClients struct {
	host            string
	mu              sync.Mutex
	agent, clientGo connections
}

// podsPerConnection is how many pods' clients share one transport, and so one HTTP/2 connection: a real
// agent has a connection of its own, which carries its watch and its writes. Shared by 50, a connection
// carries at most 100 streams (a watch and a request for each), well under the 250 kube-apiserver allows
// one by default, so it never fills. A transport shared by every pod filled its connections with their
// watches, and each request that found them all full dialled another, dropped once it was no longer
// needed: at 5,000 leases, seconds of TLS handshakes a minute on both sides (run 63), on the CPUs the
// API server needs, which no agent, with its one connection, costs it.
const podsPerConnection = 50

// connsPerTransport caps each transport's connections that are being dialled or take new requests: the
// one its pods need, and one more while a connection the server ended (a restart) is being replaced.
// The process holds every elector's connections: uncapped, the redials of 30,000 electors after a
// restart opened more at once than this container's file limit (20,000, not raisable), which no agent,
// a process of its own, would meet; capped, 30,000 electors hold at most 1,200.
const connsPerTransport = 2

// connections hands out one transport to podsPerConnection pods, then a new one.
type connections struct {
	transport func() (http.RoundTripper, error)
	current   http.RoundTripper
	pods      int // that current was handed out to
}

func (c *connections) next() (http.RoundTripper, error) {
	if c.current == nil || c.pods == podsPerConnection {
		t, err := c.transport()
		if err != nil {
			return nil, err
		}
		c.current, c.pods = t, 0
	}
	c.pods++
	return c.current, nil
}

// NewPodClients connects with admin's credentials.
func NewPodClients(admin *rest.Config) (*PodClients, error) {
	// No UserAgent here: For's requests carry it with the pod's identity, so that the client is the bare
	// transport, whose connections can be capped.
	config := &kubeclient.Config{Host: admin.Host, CAData: admin.CAData, CertData: admin.CertData, KeyData: admin.KeyData}
	agent := func() (http.RoundTripper, error) {
		client, err := config.HTTPClient()
		if err != nil {
			return nil, err
		}
		transport, ok := client.Transport.(*http.Transport)
		if !ok {
			return nil, fmt.Errorf("the agent's client has a %T, not an *http.Transport whose connections can be capped", client.Transport)
		}
		transport.MaxConnsPerHost = connsPerTransport
		return transport, nil
	}
	clientGo := func() (http.RoundTripper, error) { return clientGoTransport(admin) }
	// The first of each is built here, so a bad admin config fails now rather than at a pod's client.
	p := &PodClients{host: admin.Host, agent: connections{transport: agent}, clientGo: connections{transport: clientGo}}
	var err error
	if p.agent.current, err = agent(); err != nil {
		return nil, err
	}
	if p.clientGo.current, err = clientGo(); err != nil {
		return nil, err
	}
	return p, nil
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
		MaxConnsPerHost:     connsPerTransport,
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	})
	return rest.HTTPWrappersForConfig(admin, transport)
}

// transport is the one the next pod's client of kind shares.
func (p *PodClients) transport(kind *connections) http.RoundTripper {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, err := kind.next()
	if err != nil {
		panic(err) // the same admin config built one in NewPodClients
	}
	return t
}

// ClientGoFor is a client-go Lease client acting as For's pod does, with client-go's defaults otherwise
// (its rate limit of 5 requests/s, burst 10, per client): what a controller built on client-go's
// leaderelection gets.
func (p *PodClients) ClientGoFor(namespace, serviceAccount, podName, podUID string) coordinationv1client.LeasesGetter {
	client, err := coordinationv1client.NewForConfigAndClient(&rest.Config{Host: p.host, UserAgent: "client-go-elector"},
		&http.Client{Transport: impersonation{next: p.transport(&p.clientGo), headers: impersonationHeaders(namespace, serviceAccount, podName, podUID)}})
	if err != nil {
		panic(err) // the host was a rest.Config's, which client-go already parsed
	}
	return client
}

// For is a client that authenticates as pod podName (UID podUID) of namespace, running as serviceAccount.
func (p *PodClients) For(namespace, serviceAccount, podName, podUID string) *kubeclient.Client {
	headers := impersonationHeaders(namespace, serviceAccount, podName, podUID)
	headers.Set("User-Agent", "leasegate-agent")
	impersonate := impersonation{next: p.transport(&p.agent), headers: headers}
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
