package config

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/leasegate/leasegate/internal/apiresources"
)

// EditValidator is the admission handler that refuses an invalid leasegate-config with every error and
// its field path, so that a bad edit is never saved (an edit the store then rejected would leave the
// previous configuration in force, and the user none the wiser). It judges with Load and the API
// server's discovery, as the store applies it.
type EditValidator struct {
	// Namespace and Name are the ConfigMap's; an edit of any other is allowed unjudged.
	Namespace, Name string
	// APIs is what the API server serves, which the guards' resources are checked against.
	APIs interface{ Current() *apiresources.Index }
}

var _ admission.Handler = &EditValidator{}

func (v *EditValidator) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Namespace != v.Namespace || req.Name != v.Name {
		return admission.Allowed("not leasegate's configuration")
	}
	cm := &corev1.ConfigMap{}
	if err := json.Unmarshal(req.Object.Raw, cm); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	cfg, err := LoadServed([]byte(cm.Data[Key]), v.APIs.Current())
	if err != nil {
		return admission.Denied(fmt.Sprintf("%s is invalid and was not saved: %v", v.Name, err))
	}
	return admission.Allowed("").WithWarnings(cfg.Warnings...)
}
