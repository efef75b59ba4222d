package manager

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
)

// fakeReviewer knows tokens and who may GET which path, and counts the questions it is asked.
type fakeReviewer struct {
	users   map[string]string          // token -> user
	allowed map[string]map[string]bool // user -> path -> allowed
	err     error
	asked   int
}

func (f *fakeReviewer) authenticate(_ context.Context, token string) (*authenticationv1.UserInfo, error) {
	f.asked++
	if f.err != nil {
		return nil, f.err
	}
	user, ok := f.users[token]
	if !ok {
		return nil, nil
	}
	return &authenticationv1.UserInfo{Username: user}, nil
}

func (f *fakeReviewer) authorize(_ context.Context, user *authenticationv1.UserInfo, verb, path string) (bool, error) {
	return verb == "get" && f.allowed[user.Username][path], nil
}

func newAccess(r reviewer, now *time.Time) *metricsAccess {
	return &metricsAccess{reviewer: r, now: func() time.Time { return *now }, verdicts: map[[sha256.Size]byte]verdict{}}
}

func TestMetricsAccess(t *testing.T) {
	reviewer := &fakeReviewer{
		users:   map[string]string{"prometheus-token": "system:serviceaccount:monitoring:prometheus", "app-token": "system:serviceaccount:shop:orders"},
		allowed: map[string]map[string]bool{"system:serviceaccount:monitoring:prometheus": {"/metrics": true}},
	}
	for _, tc := range []struct {
		name          string
		authorization string
		verb, path    string
		want          int
	}{
		{"no Authorization header", "", "get", "/metrics", http.StatusUnauthorized},
		{"not a bearer token", "Basic cHJvbWV0aGV1czpzZWNyZXQ=", "get", "/metrics", http.StatusUnauthorized},
		{"an empty bearer token", "Bearer  ", "get", "/metrics", http.StatusUnauthorized},
		{"a token the API server does not know", "Bearer stolen", "get", "/metrics", http.StatusUnauthorized},
		{"a caller without GET /metrics", "Bearer app-token", "get", "/metrics", http.StatusForbidden},
		{"a caller with GET /metrics", "Bearer prometheus-token", "get", "/metrics", http.StatusOK},
		{"the same caller, another verb", "Bearer prometheus-token", "post", "/metrics", http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Now()
			got, err := newAccess(reviewer, &now).check(context.Background(), tc.authorization, tc.verb, tc.path)
			if got != tc.want || err != nil {
				t.Errorf("check = %d, %v; want %d, nil", got, err, tc.want)
			}
		})
	}
}

func TestMetricsAccessReusesVerdicts(t *testing.T) {
	reviewer := &fakeReviewer{
		users:   map[string]string{"prometheus-token": "prometheus", "app-token": "app"},
		allowed: map[string]map[string]bool{"prometheus": {"/metrics": true}},
	}
	now := time.Now()
	access := newAccess(reviewer, &now)
	ask := func(token string) int {
		code, _ := access.check(context.Background(), "Bearer "+token, "get", "/metrics")
		return code
	}

	ask("prometheus-token")
	ask("app-token")
	if reviewer.asked != 2 {
		t.Fatalf("asked the API server %d times for 2 callers, want 2", reviewer.asked)
	}
	now = now.Add(refusedFor - time.Second)
	if ask("prometheus-token") != http.StatusOK || ask("app-token") != http.StatusForbidden || reviewer.asked != 2 {
		t.Errorf("verdicts within their time were not reused: asked %d times", reviewer.asked)
	}
	now = now.Add(2 * time.Second) // the refusal has expired, the admission has not
	ask("prometheus-token")
	ask("app-token")
	if reviewer.asked != 3 {
		t.Errorf("asked %d times, want 3: only the expired refusal is asked again", reviewer.asked)
	}
	now = now.Add(allowedFor)
	ask("prometheus-token")
	if reviewer.asked != 4 {
		t.Errorf("asked %d times, want 4: an expired admission is asked again", reviewer.asked)
	}
}

func TestMetricsAccessDoesNotCacheFailures(t *testing.T) {
	reviewer := &fakeReviewer{users: map[string]string{"prometheus-token": "prometheus"}, err: errors.New("connection refused")}
	now := time.Now()
	access := newAccess(reviewer, &now)
	for range 2 {
		if got, err := access.check(context.Background(), "Bearer prometheus-token", "get", "/metrics"); got != http.StatusInternalServerError || err == nil {
			t.Errorf("check = %d, %v while the API server cannot be asked, want 500 and the error", got, err)
		}
	}
	if reviewer.asked != 2 {
		t.Errorf("asked %d times, want 2: a failure to ask is not a verdict", reviewer.asked)
	}
}

func TestMetricsAccessCacheIsBounded(t *testing.T) {
	reviewer := &fakeReviewer{users: map[string]string{}}
	now := time.Now()
	access := newAccess(reviewer, &now)
	for i := range 3 * maxCachedCallers {
		_, _ = access.check(context.Background(), fmt.Sprintf("Bearer token-%d", i), "get", "/metrics")
	}
	if n := len(access.verdicts); n > maxCachedCallers {
		t.Errorf("%d cached verdicts, want at most %d", n, maxCachedCallers)
	}
}
