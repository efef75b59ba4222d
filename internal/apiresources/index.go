// Package apiresources is what the API server serves, as its discovery tells it: whether a resource is
// namespaced, and which of its subresources a write reaches. It is read when the configuration is checked
// and when the fence's rules are applied, and again when the APIs change (a CustomResourceDefinition is
// installed or edited), never per request.
package apiresources

import (
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// writeVerbs are the verbs whose requests reach admission webhooks as writes (CREATE, UPDATE, DELETE, or
// CONNECT for a subresource such as pods/exec, which discovery lists with "create").
var writeVerbs = []string{"create", "update", "patch", "delete", "deletecollection"}

// Resource is a resource as the API server serves it, over all the versions of its group.
type Resource struct {
	Namespaced bool
	// Subresources are those a write reaches (scale, status, ...), sorted.
	Subresources []string
	// served: discovery listed the resource itself, not only subresources of it.
	served bool
}

// Index is a snapshot of discovery. The zero value, and nil, know no resource.
type Index struct {
	resources map[schema.GroupResource]Resource
}

// NewIndex reads discovery's resource lists (every version of every group).
func NewIndex(lists []*metav1.APIResourceList) *Index {
	idx := &Index{resources: map[schema.GroupResource]Resource{}}
	for _, list := range lists {
		if list == nil {
			continue
		}
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range list.APIResources {
			name, sub, isSub := strings.Cut(r.Name, "/")
			key := schema.GroupResource{Group: gv.Group, Resource: name}
			res := idx.resources[key]
			switch {
			case !isSub:
				res.Namespaced, res.served = r.Namespaced, true
			case writes(r.Verbs) && !slices.Contains(res.Subresources, sub):
				res.Subresources = append(res.Subresources, sub)
				slices.Sort(res.Subresources)
			}
			idx.resources[key] = res
		}
	}
	return idx
}

func writes(verbs metav1.Verbs) bool {
	return slices.ContainsFunc(verbs, func(v string) bool { return slices.Contains(writeVerbs, v) })
}

// Lookup says how the API server serves group/resource; false when it does not (yet: a
// CustomResourceDefinition may be installed later).
func (i *Index) Lookup(group, resource string) (Resource, bool) {
	if i == nil {
		return Resource{}, false
	}
	r := i.resources[schema.GroupResource{Group: group, Resource: resource}]
	return r, r.served
}

// Equal reports whether two snapshots describe the same resources.
func (i *Index) Equal(other *Index) bool {
	var a, b map[schema.GroupResource]Resource
	if i != nil {
		a = i.resources
	}
	if other != nil {
		b = other.resources
	}
	if len(a) != len(b) {
		return false
	}
	for k, r := range a {
		o, ok := b[k]
		if !ok || o.Namespaced != r.Namespaced || o.served != r.served || !slices.Equal(o.Subresources, r.Subresources) {
			return false
		}
	}
	return true
}
