package process

import (
	"net/http"
	"testing"
)

func TestPodsShareATransportByPodsPerConnection(t *testing.T) {
	built := 0
	c := connections{transport: func() (http.RoundTripper, error) {
		built++
		return &http.Transport{}, nil
	}}
	seen := map[http.RoundTripper]int{}
	for range 2*podsPerConnection + 1 {
		transport, err := c.next()
		if err != nil {
			t.Fatal(err)
		}
		seen[transport]++
	}
	if built != 3 || len(seen) != 3 {
		t.Fatalf("%d pods: built %d transports, handed out %d; want 3", 2*podsPerConnection+1, built, len(seen))
	}
	for _, pods := range seen {
		if pods > podsPerConnection {
			t.Errorf("a transport went to %d pods, want at most %d", pods, podsPerConnection)
		}
	}
}
