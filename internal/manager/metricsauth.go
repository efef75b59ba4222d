package manager

import (
	"context"
	"crypto/sha256"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// How long a metrics caller's verdict is reused. Prometheus scrapes every 30 s by default, so an allowed
// scraper costs a TokenReview and a SubjectAccessReview a minute; a refused one is asked again sooner, so
// a new RoleBinding takes effect quickly.
const (
	allowedFor       = time.Minute
	refusedFor       = 10 * time.Second
	maxCachedCallers = 1024
)

// reviewer asks the API server who a token belongs to and what it may do.
type reviewer interface {
	authenticate(ctx context.Context, token string) (*authenticationv1.UserInfo, error)
	authorize(ctx context.Context, user *authenticationv1.UserInfo, verb, path string) (bool, error)
}

// metricsAccess admits a /metrics request only from a caller the API server authenticates and authorizes
// for the request's verb on its path (a nonResourceURL), as kubebuilder's secure metrics do. It is ours,
// not controller-runtime's filters package, because that one links k8s.io/apiserver and nearly doubles
// leasegate-webhook's binary for two API calls.
type metricsAccess struct {
	reviewer reviewer
	now      func() time.Time

	mu       sync.Mutex
	verdicts map[[sha256.Size]byte]verdict
}

type verdict struct {
	code    int // http.StatusOK, http.StatusUnauthorized or http.StatusForbidden
	expires time.Time
}

// check answers with the HTTP status a request with this Authorization header gets: 200, 401 (no or an
// unknown token), 403 (not allowed) or 500 with the error (the API server could not be asked).
func (m *metricsAccess) check(ctx context.Context, authorization, verb, path string) (int, error) {
	token, ok := strings.CutPrefix(authorization, "Bearer ")
	if !ok || strings.TrimSpace(token) == "" {
		return http.StatusUnauthorized, nil
	}
	key := sha256.Sum256([]byte(verb + " " + path + " " + token))
	now := m.now()
	m.mu.Lock()
	v, cached := m.verdicts[key]
	m.mu.Unlock()
	if cached && now.Before(v.expires) {
		return v.code, nil
	}

	code, err := m.review(ctx, token, verb, path)
	if err != nil {
		return http.StatusInternalServerError, err // not cached: the next scrape asks again
	}
	v = verdict{code: code, expires: now.Add(refusedFor)}
	if code == http.StatusOK {
		v.expires = now.Add(allowedFor)
	}
	m.mu.Lock()
	if len(m.verdicts) >= maxCachedCallers {
		clear(m.verdicts) // a flood of distinct tokens must not grow the cache without bound
	}
	m.verdicts[key] = v
	m.mu.Unlock()
	return v.code, nil
}

func (m *metricsAccess) review(ctx context.Context, token, verb, path string) (int, error) {
	user, err := m.reviewer.authenticate(ctx, token)
	if err != nil || user == nil {
		return http.StatusUnauthorized, err
	}
	allowed, err := m.reviewer.authorize(ctx, user, verb, path)
	if err != nil || !allowed {
		return http.StatusForbidden, err
	}
	return http.StatusOK, nil
}

// metricsAccessFilter is the metrics server's FilterProvider.
func metricsAccessFilter(config *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	clientset, err := kubernetes.NewForConfigAndClient(config, httpClient)
	if err != nil {
		return nil, err
	}
	access := &metricsAccess{reviewer: apiReviewer{clientset}, now: time.Now, verdicts: map[[sha256.Size]byte]verdict{}}
	return func(log logr.Logger, handler http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			code, err := access.check(r.Context(), r.Header.Get("Authorization"), strings.ToLower(r.Method), r.URL.Path)
			if code == http.StatusOK {
				handler.ServeHTTP(w, r)
				return
			}
			if err != nil {
				log.Error(err, "Could not ask the API server whether a metrics caller may scrape; check leasegate-webhook's RBAC for tokenreviews and subjectaccessreviews")
			}
			http.Error(w, http.StatusText(code), code)
		}), nil
	}, nil
}

// apiReviewer asks with TokenReview and SubjectAccessReview.
type apiReviewer struct{ clientset kubernetes.Interface }

func (a apiReviewer) authenticate(ctx context.Context, token string) (*authenticationv1.UserInfo, error) {
	review, err := a.clientset.AuthenticationV1().TokenReviews().Create(ctx,
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	if !review.Status.Authenticated {
		return nil, nil
	}
	return &review.Status.User, nil
}

func (a apiReviewer) authorize(ctx context.Context, user *authenticationv1.UserInfo, verb, path string) (bool, error) {
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	review, err := a.clientset.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return review.Status.Allowed, nil
}
