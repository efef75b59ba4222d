package apiresources

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestIndex(t *testing.T) {
	idx := NewIndex([]*metav1.APIResourceList{
		{GroupVersion: "autoscaling/v1", APIResources: []metav1.APIResource{
			// A subresource may be listed before its resource.
			{Name: "horizontalpodautoscalers/status", Namespaced: true, Verbs: metav1.Verbs{"get", "patch", "update"}},
			{Name: "horizontalpodautoscalers", Namespaced: true, Verbs: metav1.Verbs{"create", "get"}},
		}},
		{GroupVersion: "autoscaling/v2", APIResources: []metav1.APIResource{
			{Name: "horizontalpodautoscalers", Namespaced: true, Verbs: metav1.Verbs{"create", "get"}},
			{Name: "horizontalpodautoscalers/status", Namespaced: true, Verbs: metav1.Verbs{"get", "patch", "update"}},
			{Name: "horizontalpodautoscalers/made-up", Namespaced: true, Verbs: metav1.Verbs{"deletecollection"}},
		}},
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "pods", Namespaced: true, Verbs: metav1.Verbs{"create"}},
			{Name: "pods/log", Namespaced: true, Verbs: metav1.Verbs{"get"}},
			{Name: "pods/exec", Namespaced: true, Verbs: metav1.Verbs{"create", "get"}},
			{Name: "namespaces", Verbs: metav1.Verbs{"create"}},
			{Name: "orphans/status", Namespaced: true, Verbs: metav1.Verbs{"update"}},
		}},
		nil,
		{GroupVersion: "not/a/group/version"},
	})
	for _, tt := range []struct {
		name, group, resource string
		want                  Resource
		known                 bool
	}{
		{"subresources with a write verb, over every version", "autoscaling", "horizontalpodautoscalers",
			Resource{Namespaced: true, Subresources: []string{"made-up", "status"}, served: true}, true},
		{"a read-only subresource is left out; a connect one is in", "", "pods", Resource{Namespaced: true, Subresources: []string{"exec"}, served: true}, true},
		{"cluster-scoped", "", "namespaces", Resource{served: true}, true},
		{"a resource not served", "apps", "deployments", Resource{}, false},
		{"subresources alone are no resource", "", "orphans", Resource{Namespaced: false, Subresources: []string{"status"}}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, known := idx.Lookup(tt.group, tt.resource)
			if known != tt.known || got.Namespaced != tt.want.Namespaced || !slices.Equal(got.Subresources, tt.want.Subresources) {
				t.Errorf("Lookup() = %+v, %v; want %+v, %v", got, known, tt.want, tt.known)
			}
		})
	}
	var none *Index
	if _, known := none.Lookup("", "pods"); known {
		t.Error("a nil Index knows a resource")
	}
	if !none.Equal(NewIndex(nil)) || idx.Equal(none) || !idx.Equal(idx) {
		t.Error("Equal() does not compare what is served")
	}
}
