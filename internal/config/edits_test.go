package config

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/leasegate/leasegate/internal/admissionfuzz"
	"github.com/leasegate/leasegate/internal/apiresources"
)

func editOf(t testing.TB, namespace, name, data string) admissionv1.AdmissionRequest {
	t.Helper()
	raw, err := json.Marshal(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Data:       map[string]string{Key: data},
	})
	if err != nil {
		t.Fatal(err)
	}
	return admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Update, Namespace: namespace, Name: name,
		Object: runtime.RawExtension{Raw: raw}}
}

func TestEditValidator(t *testing.T) {
	v := &EditValidator{Namespace: "leasegate-system", Name: "leasegate-config", APIs: &apiresources.Discoverer{}}
	tests := []struct {
		name    string
		req     admissionv1.AdmissionRequest
		allowed bool
		code    int32
		message string
	}{
		{"a valid edit is saved", editOf(t, "leasegate-system", "leasegate-config", "election: {leaseDuration: 15s, renewDeadline: 10s, retryPeriod: 2s}\n"), true, http.StatusOK, ""},
		{"an invalid edit is refused with the field at fault", editOf(t, "leasegate-system", "leasegate-config", "election: {leaseDuration: 5s, renewDeadline: 10s}\n"), false, http.StatusForbidden, "leasegate-config is invalid and was not saved: election.renewDeadline"},
		{"another ConfigMap is not judged", editOf(t, "leasegate-system", "other", "election: {leaseDuration: 5s, renewDeadline: 10s}\n"), true, http.StatusOK, "not leasegate's configuration"},
		{"the same name in another namespace is not judged", editOf(t, "shop", "leasegate-config", "guards: 3\n"), true, http.StatusOK, "not leasegate's configuration"},
		{"a body that does not decode is a bad request", admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Update, Namespace: "leasegate-system", Name: "leasegate-config",
			Object: runtime.RawExtension{Raw: []byte(`{"data": 3}`)}}, false, http.StatusBadRequest, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := v.Handle(context.Background(), admission.Request{AdmissionRequest: tt.req})
			if resp.Allowed != tt.allowed || resp.Result.Code != tt.code {
				t.Fatalf("allowed %v code %d (%s), want allowed %v code %d", resp.Allowed, resp.Result.Code, resp.Result.Message, tt.allowed, tt.code)
			}
			if !strings.Contains(resp.Result.Message, tt.message) {
				t.Errorf("message %q, want it to contain %q", resp.Result.Message, tt.message)
			}
		})
	}
}

// FuzzEditValidator drives the handler as the API server does: every body gets an AdmissionReview that
// allows or refuses with a reason.
func FuzzEditValidator(f *testing.F) {
	for _, data := range []string{
		"election: {leaseDuration: 15s, renewDeadline: 10s, retryPeriod: 2s}\n",
		"election: {leaseDuration: 5s, renewDeadline: 10s}\n",
		"guards: [{name: g, lease: l, resources: [{group: apps, resources: [deployments]}], enforcement: maybe}]\n",
	} {
		f.Add(admissionfuzz.Body(f, editOf(f, "leasegate-system", "leasegate-config", data)))
	}
	f.Add([]byte(`{"request":null}`))
	v := &EditValidator{Namespace: "leasegate-system", Name: "leasegate-config", APIs: &apiresources.Discoverer{}}
	f.Fuzz(func(t *testing.T, body []byte) {
		admissionfuzz.Check(t, v, body)
	})
}
