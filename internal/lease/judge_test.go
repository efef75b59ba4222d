package lease

import (
	"testing"
	"time"
)

var renewed = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func spec(holder string, durationSeconds int32) *Spec {
	return &Spec{HolderIdentity: holder, LeaseDurationSeconds: durationSeconds, RenewTime: MicroTime{renewed}}
}

func TestJudge(t *testing.T) {
	tests := []struct {
		name   string
		spec   *Spec
		now    time.Time
		margin time.Duration
		want   Judgement
	}{
		{
			name: "renewed within the duration is held",
			spec: spec("pod-a_1", 15),
			now:  renewed.Add(14 * time.Second),
			want: Judgement{Holder: "pod-a_1", State: Held, ExpiresAt: renewed.Add(15 * time.Second)},
		},
		{
			name: "at exactly renewTime + duration it has expired",
			spec: spec("pod-a_1", 15),
			now:  renewed.Add(15 * time.Second),
			want: Judgement{Holder: "pod-a_1", State: Expired, ExpiresAt: renewed.Add(15 * time.Second)},
		},
		{
			name:   "the clock skew margin extends the holder's term",
			spec:   spec("pod-a_1", 15),
			now:    renewed.Add(15500 * time.Millisecond),
			margin: time.Second,
			want:   Judgement{Holder: "pod-a_1", State: Held, ExpiresAt: renewed.Add(16 * time.Second)},
		},
		{
			name:   "past duration + margin it has expired",
			spec:   spec("pod-a_1", 15),
			now:    renewed.Add(16 * time.Second),
			margin: time.Second,
			want:   Judgement{Holder: "pod-a_1", State: Expired, ExpiresAt: renewed.Add(16 * time.Second)},
		},
		{
			name: "a renewal stamped ahead of our clock is held (skew the other way)",
			spec: spec("pod-a_1", 15),
			now:  renewed.Add(-2 * time.Second),
			want: Judgement{Holder: "pod-a_1", State: Held, ExpiresAt: renewed.Add(15 * time.Second)},
		},
		{
			name: "an empty holder is released, held by nobody, however fresh",
			spec: spec("", 1),
			now:  renewed,
			want: Judgement{State: Released},
		},
		{
			name: "no holder at all is released",
			spec: &Spec{},
			now:  renewed,
			want: Judgement{State: Released},
		},
		{
			name: "a holder without a renew time never renewed: expired",
			spec: &Spec{HolderIdentity: "pod-a_1", LeaseDurationSeconds: 15},
			now:  renewed,
			want: Judgement{Holder: "pod-a_1", State: Expired},
		},
		{
			name: "a holder without a duration cannot be judged held: expired",
			spec: &Spec{HolderIdentity: "pod-a_1", RenewTime: MicroTime{renewed}},
			now:  renewed,
			want: Judgement{Holder: "pod-a_1", State: Expired},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Judge(tt.spec, tt.now, tt.margin); got != tt.want {
				t.Errorf("Judge() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestJudgementAcquirable(t *testing.T) {
	tests := []struct {
		name     string
		j        Judgement
		identity string
		want     bool
	}{
		{"someone else's held lease is not", Judgement{Holder: "b", State: Held}, "a", false},
		{"our own held lease is (a renewal)", Judgement{Holder: "a", State: Held}, "a", true},
		{"an expired lease is", Judgement{Holder: "b", State: Expired}, "a", true},
		{"a released lease is", Judgement{State: Released}, "a", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.j.Acquirable(tt.identity); got != tt.want {
				t.Errorf("Acquirable(%q) = %t, want %t", tt.identity, got, tt.want)
			}
		})
	}
}

func TestIdentity(t *testing.T) {
	if got, want := Identity("orders-7d9f-x2x", "4b1c-aa"), "orders-7d9f-x2x_4b1c-aa"; got != want {
		t.Errorf("Identity() = %q, want %q", got, want)
	}
}

func TestParseIdentity(t *testing.T) {
	tests := []struct {
		holder, pod, rest string
		ok                bool
	}{
		{"orders-7d9f-x2x_4b1c-aa", "orders-7d9f-x2x", "4b1c-aa", true},
		{"ctrl-0_7d1c2a3e-random_uuid", "ctrl-0", "7d1c2a3e-random_uuid", true},
		{"cm-0-external-cert-manager-controller", "", "", false},
		{"_4b1c", "", "", false},
		{"orders-0_", "", "", false},
		{"", "", "", false},
	}
	for _, tt := range tests {
		pod, rest, ok := ParseIdentity(tt.holder)
		if ok != tt.ok || (ok && (pod != tt.pod || rest != tt.rest)) {
			t.Errorf("ParseIdentity(%q) = %q, %q, %v; want %q, %q, %v", tt.holder, pod, rest, ok, tt.pod, tt.rest, tt.ok)
		}
	}
	if pod, uid, _ := ParseIdentity(Identity("orders-0", "4b1c")); pod != "orders-0" || uid != "4b1c" {
		t.Errorf("ParseIdentity does not read back Identity: %q %q", pod, uid)
	}
}

func TestTimingValidate(t *testing.T) {
	tests := []struct {
		name    string
		timing  Timing
		wantErr string
	}{
		{"the defaults are valid", DefaultTiming, ""},
		{"fast but ordered is valid", Timing{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond}, ""},
		{"renew deadline equal to lease duration", Timing{15 * time.Second, 15 * time.Second, 2 * time.Second},
			"renew deadline (15s) must be shorter than lease duration (15s)"},
		{"retry period longer than renew deadline", Timing{15 * time.Second, 10 * time.Second, 12 * time.Second},
			"retry period (12s) must be shorter than renew deadline (10s)"},
		{"sub-second lease duration", Timing{500 * time.Millisecond, 200 * time.Millisecond, 100 * time.Millisecond},
			"lease duration must be a whole number of seconds (a Lease stores seconds), got 500ms"},
		{"fractional lease duration", Timing{2500 * time.Millisecond, time.Second, 100 * time.Millisecond},
			"lease duration must be a whole number of seconds (a Lease stores seconds), got 2.5s"},
		{"zero retry period", Timing{15 * time.Second, 10 * time.Second, 0}, "retry period must be positive, got 0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.timing.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr):
				t.Errorf("Validate() = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func BenchmarkJudge(b *testing.B) {
	s := spec("pod-a_0f1e2d3c", 15)
	now := renewed.Add(5 * time.Second)
	b.ReportAllocs()
	for b.Loop() {
		if Judge(s, now, time.Second).State != Held {
			b.Fatal("want held")
		}
	}
}

func TestTimingFor(t *testing.T) {
	tests := []struct {
		name              string
		objective, margin time.Duration
		want              Timing
		wantErr           string
	}{
		{"client-go's default from a 16s objective and a 1s margin", 16 * time.Second, time.Second,
			Timing{15 * time.Second, 10 * time.Second, 2 * time.Second}, ""},
		{"a minute-long reconciler", 61 * time.Second, time.Second,
			Timing{60 * time.Second, 40 * time.Second, 8 * time.Second}, ""},
		{"a poller that must resume within 5s: rounded down to whole seconds", 5500 * time.Millisecond, time.Second,
			Timing{4 * time.Second, 2600 * time.Millisecond, 500 * time.Millisecond}, ""},
		{"the shortest objective", 2 * time.Second, time.Second,
			Timing{time.Second, 600 * time.Millisecond, 100 * time.Millisecond}, ""},
		{"an objective the margin eats", 1500 * time.Millisecond, time.Second, Timing{},
			"a takeover within 1.5s cannot be met: the lease duration would be under 1s after the clock skew margin (1s); the shortest objective is 2s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := TimingFor(tt.objective, tt.margin)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("TimingFor() error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("TimingFor() = %+v, %v; want %+v", got, err, tt.want)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("derived timing breaks a rule: %v", err)
			}
			if budget := TakeoverBudget(got.LeaseDuration, tt.margin); budget > tt.objective {
				t.Errorf("failover budget %s exceeds the objective %s", budget, tt.objective)
			}
		})
	}
}
