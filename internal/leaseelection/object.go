package leaseelection

import (
	"encoding/json"
	"maps"

	"github.com/leasegate/leasegate/internal/lease"
)

// Lease is a coordination.k8s.io/v1 Lease, or a MultiClusterLease, as an elector reads and writes it: the
// metadata it needs for a compare-and-swap, the annotations a handover is asked with, and the spec.
//
// It is this package's own type, not k8s.io/api's, so that the agent links none of the Kubernetes API
// machinery. An update writes the whole object (PUT), so every field the elector does not read (labels,
// owner references, managedFields, a MultiClusterLease's status) is kept as the API server sent it and
// written back unchanged, as client-go's typed objects do.
type Lease struct {
	Namespace       string
	Name            string
	ResourceVersion string
	Generation      int64
	Annotations     map[string]string
	Spec            lease.Spec
	// Global is a MultiClusterLease's status: the election controller's latest answer. Nil for a Lease.
	Global *GlobalAnswer

	// others and otherMetadata are the object's other fields and its metadata's, as they were read.
	// Shared between clones: nothing writes them after decoding.
	others, otherMetadata map[string]json.RawMessage
}

// GlobalAnswer is the part of a MultiClusterLease's status an elector reads.
type GlobalAnswer struct {
	// Holder is the candidate that leads across clusters, "" when nobody does.
	Holder string `json:"globalHolder,omitempty"`
	// ObservedGeneration is the generation of the spec (the candidates' heartbeats) the answer covers.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// FencingToken identifies the global leader's term (the create revision of its key in the backend).
	FencingToken int64 `json:"fencingToken,omitempty"`
}

// Clone is a copy whose annotations the caller may change.
func (l *Lease) Clone() *Lease {
	c := *l
	c.Annotations = maps.Clone(l.Annotations)
	if l.Global != nil {
		global := *l.Global
		c.Global = &global
	}
	return &c
}

// The fields Lease reads; everything else is kept as it came.
type leaseFields struct {
	Metadata json.RawMessage `json:"metadata"`
	Spec     lease.Spec      `json:"spec"`
	Status   *GlobalAnswer   `json:"status"`
}

type metadataFields struct {
	Name            string            `json:"name"`
	Namespace       string            `json:"namespace"`
	ResourceVersion string            `json:"resourceVersion"`
	Generation      int64             `json:"generation"`
	Annotations     map[string]string `json:"annotations"`
}

// UnmarshalJSON reads a Lease or MultiClusterLease and keeps the fields it does not read.
func (l *Lease) UnmarshalJSON(data []byte) error {
	var known leaseFields
	if err := json.Unmarshal(data, &known); err != nil {
		return err
	}
	var meta metadataFields
	if len(known.Metadata) > 0 {
		if err := json.Unmarshal(known.Metadata, &meta); err != nil {
			return err
		}
	}
	others, otherMetadata, err := unread(data, known.Metadata)
	if err != nil {
		return err
	}
	*l = Lease{
		Namespace: meta.Namespace, Name: meta.Name, ResourceVersion: meta.ResourceVersion, Generation: meta.Generation,
		Annotations: meta.Annotations, Spec: known.Spec, Global: known.Status,
		others: others, otherMetadata: otherMetadata,
	}
	return nil
}

// unread is the fields of an object and of its metadata that Lease does not read.
func unread(object, metadata json.RawMessage) (others, otherMetadata map[string]json.RawMessage, err error) {
	if err := json.Unmarshal(object, &others); err != nil {
		return nil, nil, err
	}
	delete(others, "metadata")
	delete(others, "spec")
	if len(metadata) > 0 && string(metadata) != "null" {
		if err := json.Unmarshal(metadata, &otherMetadata); err != nil {
			return nil, nil, err
		}
		for _, read := range []string{"name", "namespace", "resourceVersion", "generation", "annotations"} {
			delete(otherMetadata, read)
		}
	}
	return others, otherMetadata, nil
}

// MarshalJSON writes the object as read, with this Lease's metadata and spec. The status is written back
// as it came (the API server ignores a MultiClusterLease's status on an update of the object).
func (l *Lease) MarshalJSON() ([]byte, error) {
	metadata := make(map[string]any, len(l.otherMetadata)+5)
	for k, v := range l.otherMetadata {
		metadata[k] = v
	}
	metadata["name"] = l.Name
	metadata["namespace"] = l.Namespace
	if l.ResourceVersion != "" {
		metadata["resourceVersion"] = l.ResourceVersion
	}
	if len(l.Annotations) > 0 {
		metadata["annotations"] = l.Annotations
	}
	object := make(map[string]any, len(l.others)+2)
	for k, v := range l.others {
		object[k] = v
	}
	object["metadata"] = metadata
	object["spec"] = l.Spec
	return json.Marshal(object)
}

// typed is the object as written with apiVersion and kind set (a create has no fields read to keep).
func (l *Lease) typed(apiVersion, kind string) *Lease {
	c := *l
	c.others = maps.Clone(l.others)
	if c.others == nil {
		c.others = map[string]json.RawMessage{}
	}
	c.others["apiVersion"], _ = json.Marshal(apiVersion)
	c.others["kind"], _ = json.Marshal(kind)
	return &c
}
