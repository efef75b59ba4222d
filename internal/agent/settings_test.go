package agent

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/internal/lease"
)

// podEnv is what the webhook injects and the downward API fills in.
var podEnv = map[string]string{
	"POD_NAME": "orders-7d9f-x2x", "POD_NAMESPACE": "shop", "POD_UID": "4b1c-aa", "LEASEGATE_LEASE": "orders",
}

func envWith(overrides map[string]string) func(string) string {
	return func(key string) string {
		if v, ok := overrides[key]; ok {
			return v
		}
		return podEnv[key]
	}
}

func TestLoadSettings(t *testing.T) {
	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		want     func(*Settings)
		wantErrs []string
	}{
		{
			name: "the pod's environment alone is enough; everything else defaults",
			want: func(s *Settings) {},
		},
		{
			name: "environment sets every optional setting",
			env: map[string]string{
				"LEASEGATE_LEASE_DURATION": "6s", "LEASEGATE_RENEW_DEADLINE": "4s", "LEASEGATE_RETRY_PERIOD": "1s",
				"LEASEGATE_CLOCK_SKEW_MARGIN": "2500ms", "LEASEGATE_READINESS": "leader", "LEASEGATE_LISTEN": "127.0.0.1:19440",
				"LEASEGATE_STATUS_FILE": "/run/leasegate/status.json", "KUBECONFIG": "/etc/kubeconfig",
			},
			want: func(s *Settings) {
				s.Timing = lease.Timing{LeaseDuration: 6 * time.Second, RenewDeadline: 4 * time.Second, RetryPeriod: time.Second}
				s.ClockSkewMargin, s.Readiness, s.Listen = 2500*time.Millisecond, ReadinessLeader, "127.0.0.1:19440"
				s.StatusFile, s.Kubeconfig = "/run/leasegate/status.json", "/etc/kubeconfig"
			},
		},
		{
			name: "a flag wins over its environment variable",
			env:  map[string]string{"LEASEGATE_LEASE": "from-env", "LEASEGATE_READINESS": "leader"},
			args: []string{"--lease=from-flag", "--readiness", "health"},
			want: func(s *Settings) { s.Lease = "from-flag" },
		},
		{
			name:     "a flag repairs a bad environment value's setting but the bad value is still reported",
			env:      map[string]string{"LEASEGATE_RETRY_PERIOD": "soon"},
			args:     []string{"--retry-period=1s"},
			wantErrs: []string{`LEASEGATE_RETRY_PERIOD="soon": not a duration`},
		},
		{
			name: "every missing identity setting is reported at once, with its flag",
			env:  map[string]string{"POD_NAME": "", "POD_UID": "", "POD_NAMESPACE": "", "LEASEGATE_LEASE": ""},
			wantErrs: []string{
				"POD_NAME (--pod-name) is required", "POD_NAMESPACE (--pod-namespace) is required",
				"POD_UID (--pod-uid) is required", "LEASEGATE_LEASE (--lease) is required",
			},
		},
		{
			name:     "timing out of order names the setting at fault, both values and the rule",
			env:      map[string]string{"LEASEGATE_RENEW_DEADLINE": "20s"},
			wantErrs: []string{"LEASEGATE_RENEW_DEADLINE=20s (--renew-deadline): renew deadline (20s) must be shorter than lease duration (15s); the rule is retry period < renew deadline < lease duration"},
		},
		{
			name:     "a retry period too long for the renew deadline is the retry period's fault",
			args:     []string{"--retry-period=10s"},
			wantErrs: []string{"LEASEGATE_RETRY_PERIOD=10s (--retry-period): retry period (10s) must be shorter than renew deadline (10s)"},
		},
		{
			name:     "a negative clock skew margin is refused",
			args:     []string{"--clock-skew-margin=-1s"},
			wantErrs: []string{"LEASEGATE_CLOCK_SKEW_MARGIN=-1s: must not be negative"},
		},
		{
			name:     "readiness must be one of the two modes",
			env:      map[string]string{"LEASEGATE_READINESS": "sometimes"},
			wantErrs: []string{`LEASEGATE_READINESS="sometimes": must be "health" or "leader"`},
		},
		{
			name:     "a bad flag value names the flag",
			args:     []string{"--lease-duration=long"},
			wantErrs: []string{`invalid value "long" for flag -lease-duration`},
		},
		{
			name: "several elections instead of one lease",
			env: map[string]string{"LEASEGATE_LEASE": "", "LEASEGATE_ELECTIONS": `[{"name":"reconciler","lease":"orders-reconciler","leaseDuration":"60s","renewDeadline":"40s","retryPeriod":"8s"},` +
				`{"name":"poller","lease":"orders-poller","leaseDuration":"4s","renewDeadline":"2s","retryPeriod":"500ms","readiness":"leader"}]`},
			want: func(s *Settings) {
				s.Lease = ""
				s.Elections = `[{"name":"reconciler","lease":"orders-reconciler","leaseDuration":"60s","renewDeadline":"40s","retryPeriod":"8s"},` +
					`{"name":"poller","lease":"orders-poller","leaseDuration":"4s","renewDeadline":"2s","retryPeriod":"500ms","readiness":"leader"}]`
			},
		},
		{
			name:     "a lease and elections at once are refused",
			env:      map[string]string{"LEASEGATE_ELECTIONS": `[{"name":"a","lease":"a","leaseDuration":"15s","renewDeadline":"10s","retryPeriod":"2s"}]`},
			wantErrs: []string{"LEASEGATE_LEASE (--lease) and LEASEGATE_ELECTIONS (--elections) are both set: use one"},
		},
		{
			name: "every problem of the elections, each at its index and field",
			env: map[string]string{"LEASEGATE_LEASE": "", "LEASEGATE_ELECTIONS": `[{"name":"a","lease":"x","leaseDuration":"15s","renewDeadline":"20s","retryPeriod":"2s","readiness":"leader"},` +
				`{"name":"a","lease":"x","leaseDuration":"15s","renewDeadline":"10s","retryPeriod":"2s","readiness":"leader"},` +
				`{"name":"B","lease":"y","leaseDuration":"15s","renewDeadline":"10s","retryPeriod":"2s","readiness":"often"}]`},
			wantErrs: []string{
				"LEASEGATE_ELECTIONS (--elections): [0].renewDeadline: renew deadline (20s) must be shorter than lease duration (15s); the rule is retryPeriod < renewDeadline < leaseDuration",
				`[1].name "a": two elections have this name`, `[1].lease "x": two elections use this lease`,
				"[1].readiness: elections a and a both set readiness leader; a pod has one readiness",
				`[2].name "B": a lowercase RFC 1123 label`, `[2].readiness "often": must be health or leader`,
			},
		},
		{
			name:     "elections that are not the JSON list say what is expected",
			env:      map[string]string{"LEASEGATE_LEASE": "", "LEASEGATE_ELECTIONS": `{"name":"a"}`},
			wantErrs: []string{`LEASEGATE_ELECTIONS (--elections): not a JSON list of {"name", "lease", "leaseDuration", "renewDeadline", "retryPeriod", "readiness"}`},
		},
		{
			name: "the mutation gate, its methods and the election it follows",
			env: map[string]string{"LEASEGATE_GATE_UPSTREAM": "127.0.0.1:8080", "LEASEGATE_GATE_METHODS": "POST,DELETE",
				"LEASEGATE_GATE_GRPC_METHODS": "/orders.Orders/*", "LEASEGATE_GATE_LISTEN": ":9500"},
			want: func(s *Settings) {
				s.Gate = GateSettings{Upstream: "127.0.0.1:8080", Listen: ":9500", Methods: "POST,DELETE", GRPCMethods: "/orders.Orders/*", BodyTimeout: 10 * time.Second}
			},
		},
		{
			name: "gate methods in any case, the one election by name and a body timeout",
			env: map[string]string{"LEASEGATE_GATE_UPSTREAM": "localhost:8080", "LEASEGATE_GATE_METHODS": "post,Delete",
				"LEASEGATE_GATE_ELECTION": "orders", "LEASEGATE_GATE_BODY_TIMEOUT": "30s"},
			want: func(s *Settings) {
				s.Gate.Upstream, s.Gate.Methods, s.Gate.Election, s.Gate.BodyTimeout = "localhost:8080", "post,Delete", "orders", 30*time.Second
			},
		},
		{
			name: "every gate problem, naming the variable, its flag and its value",
			env: map[string]string{
				"LEASEGATE_GATE_UPSTREAM": "127.0.0.1:99999", "LEASEGATE_GATE_METHODS": "POST;DELETE", "LEASEGATE_GATE_GRPC_METHODS": "Create",
				"LEASEGATE_GATE_LISTEN": "127.0.0.1:notaport", "LEASEGATE_GATE_ELECTION": "writer", "LEASEGATE_GATE_BODY_TIMEOUT": "0s",
			},
			wantErrs: []string{
				`LEASEGATE_GATE_UPSTREAM="127.0.0.1:99999" (--gate-upstream): port "99999": want a number from 1 to 65535`,
				`LEASEGATE_GATE_LISTEN="127.0.0.1:notaport" (--gate-listen): port "notaport": want a number from 0 to 65535, such as :9441`,
				`LEASEGATE_GATE_METHODS="POST;DELETE" (--gate-methods): HTTP method "POST;DELETE": separate methods with commas, e.g. POST,PUT,PATCH,DELETE`,
				`LEASEGATE_GATE_GRPC_METHODS="Create" (--gate-grpc-methods): gRPC method "Create": write /package.Service/Method`,
				`LEASEGATE_GATE_ELECTION="writer" (--gate-election): no election "writer": the pod runs orders`,
				`LEASEGATE_GATE_BODY_TIMEOUT="0s" (--gate-body-timeout): 0s: want a duration above 0 and at most 10m0s`,
			},
		},
		{
			name:     "a misspelt gate method",
			args:     []string{"--gate-upstream=127.0.0.1:8080", "--gate-methods=POST,PUT,PATCH,DELET"},
			wantErrs: []string{`LEASEGATE_GATE_METHODS="POST,PUT,PATCH,DELET" (--gate-methods): HTTP method "DELET": not a registered HTTP method`},
		},
		{
			name: "with several elections the gate must name the one it follows",
			env: map[string]string{"LEASEGATE_LEASE": "", "LEASEGATE_GATE_UPSTREAM": "127.0.0.1:8080", "LEASEGATE_ELECTIONS": `[{"name":"a","lease":"a","leaseDuration":"15s","renewDeadline":"10s","retryPeriod":"2s"},` +
				`{"name":"b","lease":"b","leaseDuration":"15s","renewDeadline":"10s","retryPeriod":"2s"}]`},
			wantErrs: []string{`LEASEGATE_GATE_ELECTION="" (--gate-election): required: the pod runs several elections; name the one whose leader may mutate (one of a, b)`},
		},
		{
			name: "on-loss restart with several elections must name an election the pod runs",
			env: map[string]string{"LEASEGATE_LEASE": "", "LEASEGATE_ON_LOSS": "restart", "LEASEGATE_ON_LOSS_ELECTION": "c",
				"LEASEGATE_ELECTIONS": `[{"name":"a","lease":"a","leaseDuration":"15s","renewDeadline":"10s","retryPeriod":"2s"},` +
					`{"name":"b","lease":"b","leaseDuration":"15s","renewDeadline":"10s","retryPeriod":"2s"}]`},
			wantErrs: []string{`LEASEGATE_ON_LOSS_ELECTION="c" (--on-loss-election): no election "c": the pod runs a, b`},
		},
		{
			name:     "on-loss must be keep or restart",
			env:      map[string]string{"LEASEGATE_ON_LOSS": "exit"},
			wantErrs: []string{"LEASEGATE_ON_LOSS=exit (--on-loss): must be keep or restart"},
		},
		{
			name:     "positional arguments are refused",
			args:     []string{"run"},
			wantErrs: []string{`unexpected arguments ["run"]`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LoadSettings(tt.args, envWith(tt.env))
			if len(tt.wantErrs) > 0 {
				if err == nil {
					t.Fatalf("LoadSettings() succeeded, want errors %q", tt.wantErrs)
				}
				for _, want := range tt.wantErrs {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("LoadSettings() error = %q, want it to contain %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("LoadSettings() = %v", err)
			}
			want := defaultSettings()
			want.PodName, want.PodNamespace, want.PodUID, want.Lease = "orders-7d9f-x2x", "shop", "4b1c-aa", "orders"
			tt.want(&want)
			if got != want {
				t.Errorf("LoadSettings() = %+v\nwant %+v", got, want)
			}
		})
	}
}

// An agent run by hand judges expiry as the fence does by default, as injected ones do.
func TestDefaultClockSkewMarginIsTheFences(t *testing.T) {
	fence, err := config.Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := defaultSettings().ClockSkewMargin, fence.Election.ClockSkewMargin.Duration; got != want || got == 0 {
		t.Errorf("an agent's default clock skew margin is %s, the fence's %s: they must agree (and not be 0)", got, want)
	}
}

func TestLoadSettingsHelp(t *testing.T) {
	if _, err := LoadSettings([]string{"-h"}, envWith(nil)); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("LoadSettings(-h) = %v, want flag.ErrHelp", err)
	}
	var usage strings.Builder
	Usage(&usage)
	for _, want := range []string{"-lease-duration", "env LEASEGATE_LEASE_DURATION", "(default 15s)", "-readiness", "(default health)"} {
		if !strings.Contains(usage.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, usage.String())
		}
	}
}

func TestSettingsIdentity(t *testing.T) {
	s, err := LoadSettings(nil, envWith(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Identity(), "orders-7d9f-x2x_4b1c-aa"; got != want {
		t.Errorf("Identity() = %q, want %q", got, want)
	}
}

func TestElectionSpecs(t *testing.T) {
	single, err := LoadSettings(nil, envWith(map[string]string{"LEASEGATE_READINESS": "leader"}))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := single.ElectionSpecs(), []lease.ElectionSpec{lease.NewElectionSpec("orders", "orders", lease.DefaultTiming, "leader")}; len(got) != 1 || got[0] != want[0] {
		t.Errorf("one lease: %+v, want %+v (the election is named after its lease)", got, want)
	}
	several, err := LoadSettings(nil, envWith(map[string]string{"LEASEGATE_LEASE": "", "LEASEGATE_ELECTIONS": lease.EncodeElections([]lease.ElectionSpec{
		lease.NewElectionSpec("reconciler", "orders-reconciler", lease.Timing{LeaseDuration: time.Minute, RenewDeadline: 40 * time.Second, RetryPeriod: 8 * time.Second}, ""),
		lease.NewElectionSpec("poller", "orders-poller", lease.Timing{LeaseDuration: 4 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: time.Second}, "leader"),
	})}))
	if err != nil {
		t.Fatal(err)
	}
	specs := several.ElectionSpecs()
	if len(specs) != 2 || specs[0].Lease != "orders-reconciler" || specs[1].Timing().RetryPeriod != time.Second || specs[1].Readiness != "leader" {
		t.Errorf("several: %+v", specs)
	}
}
