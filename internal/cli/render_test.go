package cli

import (
	"bytes"
	"flag"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/golden"
	"github.com/leasegate/leasegate/internal/lease"
)

// update rewrites the golden files from the current code: go test ./internal/cli -update
var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

var observedAt = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// exampleStatus covers every verdict and the columns' edge cases: a released lease, a lease another
// controller holds (no candidates), a guard on a managed lease with denials, several elections' timing.
func exampleStatus() *StatusList {
	at := func(ago time.Duration) *time.Time { return ptr.To(observedAt.Add(-ago)) }
	agent := func(holder string, leading bool) *lease.Status {
		return &lease.Status{Lease: "shop/orders", Holder: holder, IsLeader: leading}
	}
	return &StatusList{APIVersion: StatusAPIVersion, Kind: StatusKind, ObservedAt: observedAt, Items: []LeaseStatus{
		{
			Namespace: "kube-system", Name: "cert-manager-controller", Holder: "cm-0-external-cert-manager-controller", State: "held",
			Since: at(26 * time.Hour), RenewTime: at(3 * time.Second), Transitions: 4, LeaseDurationSeconds: 60, ClockSkewMarginSeconds: 1,
			CrashTakeoverSeconds: 61, Candidates: []Candidate{}, Verdict: VerdictNone, Guards: []string{"certificates"},
		},
		{
			Namespace: "shop", Name: "orders", Managed: true, Holder: "orders-5d8f7c9b4-x2x_4b1c", HolderPod: "orders-5d8f7c9b4-x2x", State: "held",
			Since: at(5 * time.Minute), RenewTime: at(1500 * time.Millisecond), Transitions: 3, LeaseDurationSeconds: 15, ClockSkewMarginSeconds: 1,
			CrashTakeoverSeconds: 16, RenewDeadline: "10s", RetryPeriod: "2s",
			Candidates: []Candidate{
				{Pod: "orders-5d8f7c9b4-x2x", Node: "node-a", Ready: true, Agent: agent("orders-5d8f7c9b4-x2x_4b1c", true)},
				{Pod: "orders-5d8f7c9b4-q7k", Node: "node-b", Ready: true, Agent: agent("orders-5d8f7c9b4-x2x_4b1c", false)},
				{Pod: "orders-5d8f7c9b4-zz1", Node: "node-c", Ready: false, AgentError: "the server is currently unable to handle the request"},
			},
			Verdict: VerdictAgrees, Guards: []string{"orders-controller", "orders-jobs"}, DenialsLastHour: 7,
		},
		{
			Namespace: "shop", Name: "reports", Managed: true, State: "released", Transitions: 9, LeaseDurationSeconds: 6,
			RenewTime: at(40 * time.Second), ClockSkewMarginSeconds: 1, CrashTakeoverSeconds: 7,
			Candidates: []Candidate{{Pod: "reports-0", Ready: true, AgentError: "not asked"}}, Verdict: VerdictUnknown, Guards: []string{},
		},
	}}
}

func TestRenderStatusGolden(t *testing.T) {
	for _, format := range Outputs {
		t.Run(format, func(t *testing.T) {
			var out bytes.Buffer
			if err := RenderStatus(&out, exampleStatus(), format); err != nil {
				t.Fatal(err)
			}
			compareGolden(t, filepath.Join("testdata", "status."+format+".golden"), out.Bytes())
		})
	}
	if err := RenderStatus(&bytes.Buffer{}, exampleStatus(), "xml"); err == nil {
		t.Error("-o xml was accepted")
	}
}

func TestRenderCheckGolden(t *testing.T) {
	report := &CheckReport{APIVersion: StatusAPIVersion, Kind: "CheckReport", ObservedAt: observedAt, Findings: []Finding{}}
	report.add(CodeWebhookConfigurationMissing, SeverityError, "MutatingWebhookConfiguration/leasegate", "pods are not injected: the mutating webhook configuration is missing", "helm upgrade --install leasegate charts/leasegate -n leasegate-system")
	report.add(CodeDisruptionBudgetBlocks, SeverityWarning, "PodDisruptionBudget/shop/orders", "it allows no disruption over 3 pod(s) that elect (orders-0)", "allow one disruption (maxUnavailable: 1)")
	for _, format := range []string{OutputTable, OutputJSON} {
		t.Run(format, func(t *testing.T) {
			var out bytes.Buffer
			if err := RenderCheck(&out, report, format); err != nil {
				t.Fatal(err)
			}
			compareGolden(t, filepath.Join("testdata", "check."+format+".golden"), out.Bytes())
		})
	}
	var out bytes.Buffer
	if err := RenderCheck(&out, &CheckReport{}, OutputTable); err != nil || out.String() != "No problems found.\n" {
		t.Errorf("a clean report renders %q (%v)", out.String(), err)
	}
}

func compareGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	golden.Compare(t, path, got, *update, "go test ./internal/cli -update")
}

func TestVerdict(t *testing.T) {
	holder := "orders-0_uid-0"
	answer := func(h string, leading bool) Candidate {
		return Candidate{Agent: &lease.Status{Holder: h, IsLeader: leading}}
	}
	tests := []struct {
		name       string
		state      string
		candidates []Candidate
		want       string
	}{
		{"no candidates: a lease another controller elects on", "held", nil, VerdictNone},
		{"the holder's agent leads and the others name it", "held", []Candidate{answer(holder, true), answer(holder, false)}, VerdictAgrees},
		{"two agents say they lead", "held", []Candidate{answer(holder, true), answer("orders-1_uid-1", true)}, VerdictTwoClaim},
		{"an agent names another holder than the lease", "held", []Candidate{answer(holder, true), answer("orders-1_uid-1", false)}, VerdictStale},
		{"an agent leads a lease that has expired", "expired", []Candidate{answer(holder, true)}, VerdictStale},
		{"no agent answered", "held", []Candidate{{AgentError: "timeout"}}, VerdictUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &LeaseStatus{Holder: holder, State: tt.state, Candidates: tt.candidates}
			if got := verdict(s); got != tt.want {
				t.Errorf("verdict() = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestPickElection(t *testing.T) {
	one := `{"lease":"shop/orders","holder":"orders-0_u","isLeader":true,"transitions":2}`
	several := `{"elections":[{"election":"fast","lease":"shop/orders-fast","holder":"a_u","isLeader":false},{"election":"slow","lease":"shop/orders-slow","holder":"b_u","isLeader":true}]}`
	tests := []struct {
		name, body, lease, wantHolder, wantErr string
	}{
		{"one election", one, "shop/orders", "orders-0_u", ""},
		{"the matching one of several", several, "shop/orders-slow", "b_u", ""},
		{"no election on the lease", several, "shop/billing", "", "runs no election on lease shop/billing"},
		{"not JSON", "<html>", "shop/orders", "", "not JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PickElection([]byte(tt.body), tt.lease)
			if tt.wantErr != "" {
				if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tt.wantErr)) {
					t.Fatalf("PickElection() error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got.Holder != tt.wantHolder {
				t.Fatalf("PickElection() = %+v, %v; want holder %s", got, err, tt.wantHolder)
			}
		})
	}
}

func TestPlanHandover(t *testing.T) {
	held := func(candidates ...Candidate) *LeaseStatus {
		return &LeaseStatus{Namespace: "shop", Name: "orders", Managed: true, State: "held", Holder: "orders-0_u0", HolderPod: "orders-0", Candidates: candidates}
	}
	ready := func(pod string) Candidate { return Candidate{Pod: pod, Ready: true} }
	tests := []struct {
		name    string
		status  *LeaseStatus
		to      string
		want    lease.Handover
		wantErr string
	}{
		{name: "to a named Ready candidate", status: held(ready("orders-0"), ready("orders-1")), to: "orders-1", want: lease.Handover{From: "orders-0_u0", To: "orders-1"}},
		{name: "to any other candidate", status: held(ready("orders-0"), ready("orders-1")), want: lease.Handover{From: "orders-0_u0"}},
		{name: "a target that is not Ready is refused, naming the Ready ones", status: held(ready("orders-0"), Candidate{Pod: "orders-1"}, ready("orders-2")), to: "orders-1",
			wantErr: "--to orders-1: that pod is not Ready; pick a Ready candidate: orders-2"},
		{name: "a pod that is not a candidate is refused", status: held(ready("orders-0"), ready("orders-1")), to: "billing-0",
			wantErr: "--to billing-0: that pod is not a candidate for lease shop/orders; pick a Ready candidate: orders-1"},
		{name: "the holder itself is refused", status: held(ready("orders-0"), ready("orders-1")), to: "orders-0", wantErr: "--to orders-0: that pod already holds lease shop/orders"},
		{name: "no other Ready candidate, no handover", status: held(ready("orders-0"), Candidate{Pod: "orders-1"}), wantErr: "no Ready candidate besides its holder orders-0"},
		{name: "a released lease has nothing to hand over", status: &LeaseStatus{Namespace: "shop", Name: "orders", Managed: true, State: "released"}, wantErr: "is released: nobody holds it"},
		{name: "a lease no agent elects on is refused", status: &LeaseStatus{Namespace: "kube-system", Name: "cert-manager-controller", State: "held"}, wantErr: "not managed by leasegate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PlanHandover(tt.status, tt.to)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("PlanHandover() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("PlanHandover() = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestLeaseStatusShowsAPendingHandover(t *testing.T) {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders",
		Annotations: map[string]string{contract.HandoverFrom: "orders-0_u0", contract.HandoverTo: "orders-1"}}}
	if got := leaseStatus(l, time.Second, time.Now()).Handover; got == nil || *got != (HandoverRequest{From: "orders-0_u0", To: "orders-1"}) {
		t.Errorf("Handover = %+v, want the request from orders-0_u0 to orders-1", got)
	}
	l.Annotations = nil
	if got := leaseStatus(l, time.Second, time.Now()).Handover; got != nil {
		t.Errorf("Handover = %+v without a request, want nil (omitted from JSON)", got)
	}
}
