package config

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/leasegate/leasegate/internal/apiresources"
)

// LoadServed is Load, then CheckServed against what the API server serves: the one check that both the
// admission of leasegate-config and the live Store make (a ConfigMap created before the webhook answered
// never met the admission).
func LoadServed(data []byte, api *apiresources.Index) (*Config, error) {
	c, err := Load(data)
	if err != nil {
		return nil, err
	}
	if errs := CheckServed(c, api); len(errs) > 0 {
		return nil, fmt.Errorf("%s: %w", Key, errs.ToAggregate())
	}
	return c, nil
}

// CheckServed checks a loaded configuration against discovery: a guard may not name a cluster-scoped
// resource (its writes have no namespace to find the lease in, and are the control plane's: a guard on
// namespaces would fence kube-system's namespace controller), and may exclude only subresources its
// resources serve. A resource discovery does not know (a CustomResourceDefinition installed later) passes;
// the rules' Namespaced scope keeps its cluster-scoped writes away from the fence should it be one.
func CheckServed(c *Config, api *apiresources.Index) field.ErrorList {
	var errs field.ErrorList
	for i, g := range c.Guards {
		for j, r := range g.Resources {
			path := field.NewPath("guards").Index(i).Child("resources").Index(j)
			served, known := map[string]bool{}, false
			for k, name := range r.Resources {
				res, ok := api.Lookup(r.Group, name)
				if !ok {
					continue
				}
				known = true
				for _, sub := range res.Subresources {
					served[sub] = true
				}
				if !res.Namespaced {
					errs = append(errs, field.Invalid(path.Child("resources").Index(k), name, fmt.Sprintf(
						"%s is cluster-scoped, and a guard fences namespaced resources only (its writes have no namespace to find the lease in, and cluster-scoped objects are the control plane's to write): remove it, and control who writes %s with RBAC",
						qualified(r.Group, name), name)))
				}
			}
			if !known {
				continue
			}
			for k, sub := range r.ExcludeSubresources {
				if !served[sub] {
					errs = append(errs, field.Invalid(path.Child("excludeSubresources").Index(k), sub, fmt.Sprintf(
						"no resource of this entry serves a subresource %q that a write reaches; they serve %s", sub, orNone(served))))
				}
			}
		}
	}
	return errs
}

func qualified(group, resource string) string {
	if group == "" {
		return resource
	}
	return resource + "." + group
}

func orNone(set map[string]bool) string {
	if len(set) == 0 {
		return "none"
	}
	names := make([]string, 0, len(set))
	for name := range set {
		names = append(names, name)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
