// Package admissionfuzz drives an admission handler the way the API server does, for the fuzz targets of
// every webhook endpoint: a request body in, and a check that the answer is one the API server can use.
package admissionfuzz

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// answerWithin bounds one decision: far above any real one (microseconds), far below the API server's
// webhook timeout.
const answerWithin = 5 * time.Second

// Body is the AdmissionReview the API server would post for req: a seed for a fuzz target.
func Body(t testing.TB, req admissionv1.AdmissionRequest) []byte {
	t.Helper()
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  &req,
	})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// Check posts body to handler through controller-runtime's webhook, as the API server would, and fails
// unless the answer comes within answerWithin as HTTP 200 with an AdmissionReview whose response either
// allows or refuses with a reason (a refusal without one is what a user cannot act on). A panic fails the
// fuzz target by itself.
func Check(t *testing.T, handler admission.Handler, body []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	// A panic must reach the fuzzer, not become a refusal (the manager's webhooks recover, and would).
	webhook := (&admission.Webhook{Handler: handler}).WithRecoverPanic(false)
	recorder := httptest.NewRecorder()
	request := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	request.Header.Set("Content-Type", "application/json")
	done := make(chan any)
	go func() {
		defer func() { done <- recover() }()
		webhook.ServeHTTP(recorder, request)
	}()
	select {
	case p := <-done:
		if p != nil {
			t.Fatalf("the handler panicked: %v\nbody: %q", p, body)
		}
	case <-time.After(answerWithin):
		t.Fatalf("no answer within %s\nbody: %q", answerWithin, body)
	}
	if recorder.Code != http.StatusOK {
		t.Fatalf("HTTP %d, want 200 with an AdmissionReview: %s", recorder.Code, recorder.Body)
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(recorder.Body.Bytes(), &review); err != nil || review.Response == nil {
		t.Fatalf("the answer is no AdmissionReview with a response (%v): %s", err, recorder.Body)
	}
	if r := review.Response; !r.Allowed && (r.Result == nil || r.Result.Message == "") {
		t.Fatalf("refused without a reason: %s\nbody: %q", recorder.Body, body)
	}
	return review.Response
}
