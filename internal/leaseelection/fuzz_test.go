package leaseelection

import (
	"encoding/json"
	"testing"
	"time"
)

// FuzzLeaseJSON: whatever an API server (or something posing as one) sends, decoding fails cleanly or
// yields a Lease that encodes, and encodes to the same Lease again.
func FuzzLeaseJSON(f *testing.F) {
	f.Add([]byte(servedLease))
	f.Add([]byte(`{"metadata":{"name":"a"},"spec":{"holderIdentity":null,"renewTime":null},"status":{"globalHolder":"x"}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var l Lease
		if json.Unmarshal(data, &l) != nil {
			return
		}
		encoded, err := json.Marshal(&l)
		if err != nil {
			t.Fatalf("a decoded lease does not encode: %v", err)
		}
		var again Lease
		if err := json.Unmarshal(encoded, &again); err != nil {
			t.Fatalf("the encoding of a decoded lease does not decode: %v\n%s", err, encoded)
		}
		if again.Name != l.Name || again.ResourceVersion != l.ResourceVersion || again.Spec.HolderIdentity != l.Spec.HolderIdentity ||
			!again.Spec.RenewTime.Equal(l.Spec.RenewTime.Truncate(time.Microsecond)) {
			t.Fatalf("round trip changed the lease: %+v -> %+v", l, again)
		}
	})
}
