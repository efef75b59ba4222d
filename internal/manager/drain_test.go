package manager

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestDrainingClosesEachConnectionAfterItsRequest serves over keep-alive connections: before draining a
// client reuses its connection, after it the server closes each one after its answer.
func TestDrainingClosesEachConnectionAfterItsRequest(t *testing.T) {
	server := httptest.NewServer(closeWhenDraining(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})))
	defer server.Close()
	t.Cleanup(func() { draining.Store(false) })
	for _, tc := range []struct {
		name     string
		draining bool
		wantOpen bool
	}{
		{"serving: the connection stays open for the next request", false, true},
		{"draining: the server closes the connection after its answer", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			draining.Store(tc.draining)
			resp, err := server.Client().Get(server.URL)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if open := !resp.Close; open != tc.wantOpen {
				t.Errorf("connection left open = %v, want %v (Connection: %q)", open, tc.wantOpen, resp.Header.Get("Connection"))
			}
		})
	}
}
