package lease

import (
	"encoding/json"
	"time"
)

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
