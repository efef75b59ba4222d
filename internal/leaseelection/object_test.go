package leaseelection

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/lease"
)

// A Lease as the API server sends it, with fields the elector does not read.
const servedLease = `{
  "kind": "Lease", "apiVersion": "coordination.k8s.io/v1",
  "metadata": {
    "name": "orders", "namespace": "shop", "uid": "5d0c", "resourceVersion": "42", "generation": 3,
    "creationTimestamp": "2026-11-24T10:00:00Z",
    "labels": {"leasegate.io/managed": "true"},
    "annotations": {"team": "shop", "leasegate.io/handover-from": "a-0_ua"},
    "ownerReferences": [{"apiVersion": "v1", "kind": "Namespace", "name": "shop", "uid": "77"}],
    "managedFields": [{"manager": "leasegate-agent", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]
  },
  "spec": {
    "holderIdentity": "a-0_ua", "leaseDurationSeconds": 15,
    "acquireTime": "2026-11-24T10:00:00.000000Z", "renewTime": "2026-11-24T10:05:00.123456Z",
    "leaseTransitions": 7, "preferredHolder": "b-0"
  }
}`

func TestLeaseReadsWhatTheElectorNeeds(t *testing.T) {
	l := decodeLease(t, []byte(servedLease))
	want := lease.Spec{
		HolderIdentity: "a-0_ua", LeaseDurationSeconds: 15, LeaseTransitions: 7,
		AcquireTime: lease.MicroTime{Time: time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)},
		RenewTime:   lease.MicroTime{Time: time.Date(2026, 11, 24, 10, 5, 0, 123456000, time.UTC)},
	}
	if l.Name != "orders" || l.Namespace != "shop" || l.ResourceVersion != "42" || l.Generation != 3 {
		t.Errorf("metadata: %s/%s at %s generation %d", l.Namespace, l.Name, l.ResourceVersion, l.Generation)
	}
	if !l.Spec.AcquireTime.Equal(want.AcquireTime.Time) || !l.Spec.RenewTime.Equal(want.RenewTime.Time) {
		t.Errorf("times: %s, %s; want %s, %s", l.Spec.AcquireTime, l.Spec.RenewTime, want.AcquireTime, want.RenewTime)
	}
	l.Spec.AcquireTime, l.Spec.RenewTime = want.AcquireTime, want.RenewTime
	if l.Spec != want {
		t.Errorf("spec %+v, want %+v", l.Spec, want)
	}
	if h, ok := lease.HandoverOf(l.Annotations); !ok || h.From != "a-0_ua" {
		t.Errorf("the handover request was not read: %v", l.Annotations)
	}
	if l.Global != nil {
		t.Errorf("a Lease carries no global answer, got %+v", l.Global)
	}
}

// An update writes the whole object, so what the elector does not read must go back as it came, and
// what it changed must go out as it set it.
func TestLeaseWritesBackWhatItDoesNotRead(t *testing.T) {
	l := decodeLease(t, []byte(servedLease))
	renewal := time.Date(2026, 11, 24, 10, 5, 2, 987654321, time.UTC)
	next := l.Clone()
	next.Spec = lease.Spec{HolderIdentity: "a-0_ua", LeaseDurationSeconds: 15, AcquireTime: l.Spec.AcquireTime, RenewTime: lease.MicroTime{Time: renewal}, LeaseTransitions: 7}
	lease.ClearHandover(next.Annotations)
	if _, ok := lease.HandoverOf(l.Annotations); !ok {
		t.Fatal("changing a clone's annotations changed the original's")
	}
	data, err := json.Marshal(next)
	if err != nil {
		t.Fatal(err)
	}
	var written, served map[string]any
	if err := json.Unmarshal(data, &written); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal([]byte(servedLease), &served)

	meta, servedMeta := written["metadata"].(map[string]any), served["metadata"].(map[string]any)
	for _, kept := range []string{"uid", "creationTimestamp", "labels", "ownerReferences", "managedFields", "resourceVersion", "name", "namespace"} {
		if !reflect.DeepEqual(meta[kept], servedMeta[kept]) {
			t.Errorf("metadata.%s = %v, want it kept: %v", kept, meta[kept], servedMeta[kept])
		}
	}
	if !reflect.DeepEqual(meta["annotations"], map[string]any{"team": "shop"}) {
		t.Errorf("annotations %v: want the handover request removed and the rest kept", meta["annotations"])
	}
	if written["kind"] != "Lease" || written["apiVersion"] != "coordination.k8s.io/v1" {
		t.Errorf("kind %v, apiVersion %v: want them kept", written["kind"], written["apiVersion"])
	}
	spec := written["spec"].(map[string]any)
	if spec["renewTime"] != "2026-11-24T10:05:02.987654Z" {
		t.Errorf("renewTime %v: want UTC with microseconds, as the API server writes it", spec["renewTime"])
	}
	if _, ok := spec["preferredHolder"]; ok {
		t.Error("the holder rewrites the whole spec, as client-go's elector does; preferredHolder was kept")
	}
}

func TestReleasedLeaseWritesAnEmptyHolder(t *testing.T) {
	data, err := json.Marshal(&Lease{Namespace: "shop", Name: "orders", Spec: lease.Spec{LeaseDurationSeconds: 1, RenewTime: lease.MicroTime{Time: time.Unix(1, 0)}}})
	if err != nil {
		t.Fatal(err)
	}
	// client-go writes holderIdentity "" on release; readers that tell null from "" see the same.
	if !strings.Contains(string(data), `"holderIdentity":""`) || !strings.Contains(string(data), `"leaseTransitions":0`) || strings.Contains(string(data), "acquireTime") {
		t.Errorf("released lease %s: want holderIdentity \"\", leaseTransitions 0 and no acquireTime", data)
	}
}

func TestMultiClusterLeaseCarriesTheControllersAnswer(t *testing.T) {
	served := `{"apiVersion":"leasegate.io/v1alpha1","kind":"MultiClusterLease",
		"metadata":{"name":"orders","namespace":"shop","resourceVersion":"9","generation":12},
		"spec":{"holderIdentity":"a-0_ua","leaseDurationSeconds":5},
		"status":{"globalHolder":"b-0_ub","holderCluster":"west","observedGeneration":11,"conditions":[{"type":"Leading","status":"True"}]}}`
	l := decodeLease(t, []byte(served))
	if l.Global == nil || l.Global.Holder != "b-0_ub" || l.Global.ObservedGeneration != 11 {
		t.Fatalf("Global = %+v, want b-0_ub at generation 11", l.Global)
	}
	if holder, observed, ok := globalAnswer(l); !ok || holder != "b-0_ub" || observed != 11 {
		t.Errorf("globalAnswer() = %q, %d, %v", holder, observed, ok)
	}
	data, err := json.Marshal(l.typed(multiClusterLeaseAPIVersion, contract.LeaseKindMultiClusterLease))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"holderCluster":"west"`) || !strings.Contains(string(data), `"kind":"MultiClusterLease"`) {
		t.Errorf("written %s: want the status as it came (the API server ignores it on an update) and the kind", data)
	}
}

func TestMicroTimeRejectsWhatIsNotATime(t *testing.T) {
	for _, bad := range []string{`{"spec":{"renewTime":"yesterday"}}`, `{"spec":{"renewTime":12}}`, `{"metadata":[]}`, `[]`} {
		if err := json.Unmarshal([]byte(bad), &Lease{}); err == nil {
			t.Errorf("%s: decoded without an error", bad)
		}
	}
}

// A renewed Lease as a watch event carries it: every follower decodes one each retry period, and every
// leader one more for its own write's answer.
const renewedLease = `{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"orders","namespace":"shop",` +
	`"uid":"6f1c7d2e-0b7a-4f7e-9a43-2f7d0c1e5b11","resourceVersion":"1839204","creationTimestamp":"2026-11-24T10:00:00Z",` +
	`"managedFields":[{"manager":"leasegate-agent","operation":"Update","apiVersion":"coordination.k8s.io/v1","time":"2026-11-24T10:05:00Z",` +
	`"fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:acquireTime":{},"f:holderIdentity":{},"f:leaseDurationSeconds":{},"f:leaseTransitions":{},"f:renewTime":{}}}}]},` +
	`"spec":{"holderIdentity":"orders-7d9f8b6c5-x2x9k_6b0e2c1a-3d4f-4a5b-8c9d-0e1f2a3b4c5d","leaseDurationSeconds":15,` +
	`"acquireTime":"2026-11-24T10:00:00.000000Z","renewTime":"2026-11-24T10:05:00.123456Z","leaseTransitions":7}}`

func BenchmarkLeaseDecode(b *testing.B) {
	data := []byte(renewedLease)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		var l Lease
		if err := json.Unmarshal(data, &l); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLeaseEncode is a renewal's body: the lease as decoded, with a new spec.
func BenchmarkLeaseEncode(b *testing.B) {
	l := decodeLease(b, []byte(renewedLease))
	l.Spec.RenewTime = lease.MicroTime{Time: time.Date(2026, 11, 24, 10, 5, 2, 0, time.UTC)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := json.Marshal(l); err != nil {
			b.Fatal(err)
		}
	}
}

// A Lease keeps the object it was decoded from for its next write, and the decoder's buffer is not its
// to keep: a watch decodes the next event into the same one.
func TestLeaseKeepsItsOwnCopyOfTheServedObject(t *testing.T) {
	buf := []byte(servedLease)
	l := decodeLease(t, buf)
	want, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	for i := range buf {
		buf[i] = ' '
	}
	got, err := json.Marshal(l)
	if err != nil {
		t.Fatalf("after the decoder's buffer was reused: %v", err)
	}
	if string(got) != string(want) {
		t.Errorf("after the decoder's buffer was reused the lease writes\n%s\nwant\n%s", got, want)
	}
}
