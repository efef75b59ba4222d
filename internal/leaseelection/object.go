package leaseelection

import (
	"bytes"
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

	// served is the object as the API server sent it, nil for one made here: an update writes back every
	// field of it the elector does not read. Those are found when it writes (unread), not at every decode:
	// a follower decodes each renewal of its lease that its watch brings and writes the lease only to take
	// it. Shared between clones: nothing writes it after decoding.
	served []byte
	// apiVersion and kind, when set, are written in place of the served ones.
	apiVersion, kind string
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
	Metadata metadataFields `json:"metadata"`
	Spec     lease.Spec     `json:"spec"`
	Status   *GlobalAnswer  `json:"status"`
}

type metadataFields struct {
	Name            string            `json:"name"`
	Namespace       string            `json:"namespace"`
	ResourceVersion string            `json:"resourceVersion"`
	Generation      int64             `json:"generation"`
	Annotations     map[string]string `json:"annotations"`
}

// UnmarshalJSON reads a Lease or MultiClusterLease and keeps the object as it came for MarshalJSON.
func (l *Lease) UnmarshalJSON(data []byte) error {
	var known leaseFields
	if err := json.Unmarshal(data, &known); err != nil {
		return err
	}
	meta := known.Metadata
	*l = Lease{
		Namespace: meta.Namespace, Name: meta.Name, ResourceVersion: meta.ResourceVersion, Generation: meta.Generation,
		Annotations: meta.Annotations, Spec: known.Spec, Global: known.Status,
		served: bytes.Clone(data), // data is the decoder's, not ours to keep
	}
	return nil
}

// unread is the fields of an object and of its metadata that Lease does not read.
func unread(object []byte) (others, otherMetadata map[string]json.RawMessage, err error) {
	if len(object) == 0 {
		return nil, nil, nil
	}
	if err := json.Unmarshal(object, &others); err != nil {
		return nil, nil, err
	}
	metadata := others["metadata"]
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
	others, otherMetadata, err := unread(l.served)
	if err != nil {
		return nil, err
	}
	metadata := make(map[string]any, len(otherMetadata)+5)
	for k, v := range otherMetadata {
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
	object := make(map[string]any, len(others)+4)
	for k, v := range others {
		object[k] = v
	}
	if l.apiVersion != "" {
		object["apiVersion"], object["kind"] = l.apiVersion, l.kind
	}
	object["metadata"] = metadata
	object["spec"] = l.Spec
	return json.Marshal(object)
}

// typed is the object as written with apiVersion and kind set (a create has no fields read to keep).
func (l *Lease) typed(apiVersion, kind string) *Lease {
	c := *l
	c.apiVersion, c.kind = apiVersion, kind
	return &c
}
