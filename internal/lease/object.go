package lease

import (
	"encoding/json"
	"maps"
	"time"
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
	Spec            Spec
	// Global is a MultiClusterLease's status: the election controller's latest answer. Nil for a Lease.
	Global *GlobalAnswer

	// others and otherMetadata are the object's other fields and its metadata's, as they were read.
	// Shared between clones: nothing writes them after decoding.
	others, otherMetadata map[string]json.RawMessage
}

// Spec is a Lease's spec, the fields client-go's leaderelection reads and writes (a MultiClusterLease's
// spec has the same ones). Fields the elector never sets are dropped on its writes, as client-go's
// elector drops them: the holder rewrites the whole spec on every renewal, so that nobody else's edit can
// change the terms it holds the lease on.
type Spec struct {
	// HolderIdentity is "" when the lease is released (client-go writes an empty string, not null).
	HolderIdentity       string    `json:"holderIdentity"`
	LeaseDurationSeconds int32     `json:"leaseDurationSeconds,omitempty"`
	AcquireTime          MicroTime `json:"acquireTime,omitzero"`
	RenewTime            MicroTime `json:"renewTime,omitzero"`
	LeaseTransitions     int32     `json:"leaseTransitions"`
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

// MicroTime is a time with the API's microsecond precision, as metav1.MicroTime writes it.
type MicroTime struct{ time.Time }

const microTimeLayout = "2006-01-02T15:04:05.000000Z07:00"

// MarshalJSON writes UTC with six fractional digits, as the API server does.
func (t MicroTime) MarshalJSON() ([]byte, error) {
	if t.IsZero() {
		return []byte("null"), nil
	}
	return json.Marshal(t.UTC().Format(microTimeLayout))
}

// UnmarshalJSON reads RFC 3339 with any fractional digits; null is the zero time.
func (t *MicroTime) UnmarshalJSON(data []byte) error {
	var s *string
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	if s == nil {
		t.Time = time.Time{}
		return nil
	}
	parsed, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil {
		return err
	}
	t.Time = parsed.Local()
	return nil
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
	Spec     Spec            `json:"spec"`
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
