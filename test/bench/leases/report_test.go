package main

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/leasegate/leasegate/internal/kubeclient"
	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/test/framework/observe"
	"github.com/leasegate/leasegate/test/framework/process"
)

func TestThrottle(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for _, tc := range []struct {
		name      string
		samples   []sample
		answering time.Time
		want      throttling
	}{
		{"no samples, nothing throttled", nil, t0, throttling{}},
		{"one sample has no interval", []sample{{at: at(0), requests: 100, throttled: 5}}, t0, throttling{}},
		{
			name:      "429s settle: the last second over 1% ends 2 s after answering",
			samples:   []sample{{at: at(0), requests: 0, throttled: 0}, {at: at(1), requests: 100, throttled: 50}, {at: at(2), requests: 300, throttled: 60}, {at: at(3), requests: 500, throttled: 60}},
			answering: at(0),
			want:      throttling{peak: 50, total: 60, requests: 500, lastOver: 2 * time.Second},
		},
		{
			name:      "a share just under 1% is settled",
			samples:   []sample{{at: at(0), requests: 0, throttled: 0}, {at: at(1), requests: 1000, throttled: 9}},
			answering: at(0),
			want:      throttling{peak: 9, total: 9, requests: 1000},
		},
		{
			name:      "429s still over 1% in the last interval have not settled",
			samples:   []sample{{at: at(0), requests: 0, throttled: 0}, {at: at(1), requests: 100, throttled: 0}, {at: at(2), requests: 200, throttled: 10}},
			answering: at(0),
			want:      throttling{peak: 10, total: 10, requests: 200, lastOver: 2 * time.Second, overAtEnd: true},
		},
		{
			name:      "counters reset by a restart count what the new API server answered",
			samples:   []sample{{at: at(0), requests: 5000, throttled: 100}, {at: at(4), requests: 400, throttled: 40}, {at: at(5), requests: 800, throttled: 40}},
			answering: at(3),
			want:      throttling{peak: 10, total: 40, requests: 800, lastOver: time.Second},
		},
		{
			name:      "429s before the API server answered again do not count against settling",
			samples:   []sample{{at: at(0), requests: 0, throttled: 0}, {at: at(1), requests: 100, throttled: 100}, {at: at(2), requests: 1100, throttled: 100}},
			answering: at(1),
			want:      throttling{peak: 100, total: 100, requests: 1100},
		},
		{
			name: "each priority level's rejections add up across a restart's reset, and its peak queue is the longest scraped",
			samples: []sample{
				{at: at(0), requests: 0, writes: levelSample{rejected: 10, queued: 5}, reads: levelSample{rejected: 0, queued: 0}},
				{at: at(1), requests: 100, writes: levelSample{rejected: 30, queued: 40}, reads: levelSample{rejected: 7, queued: 90}},
				{at: at(2), requests: 50, writes: levelSample{rejected: 4, queued: 0}, reads: levelSample{rejected: 1, queued: 2}},
			},
			answering: at(0),
			want: throttling{requests: 150,
				writes: levelThrottling{rejected: 24, peakQueued: 40}, reads: levelThrottling{rejected: 8, peakQueued: 90}},
		},
		{
			name:      "the peak is per second over an interval longer than one",
			samples:   []sample{{at: at(0), requests: 0, throttled: 0}, {at: at(4), requests: 1000, throttled: 400}},
			answering: at(0),
			want:      throttling{peak: 100, total: 400, requests: 1000, lastOver: 4 * time.Second, overAtEnd: true},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := throttle(tc.samples, tc.answering); got != tc.want {
				t.Errorf("throttle = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestTally(t *testing.T) {
	for _, tc := range []struct {
		name                string
		leaders             []int
		unled, claimedTwice int
	}{
		{"every lease led once", []int{1, 1, 1}, 0, 0},
		{"no leases", nil, 0, 0},
		{"unled leases", []int{0, 1, 0}, 2, 0},
		{"two and three claims of one lease count as one lease claimed twice each", []int{2, 1, 3}, 0, 2},
		{"both at once", []int{0, 2, 1}, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if unled, twice := tally(tc.leaders); unled != tc.unled || twice != tc.claimedTwice {
				t.Errorf("tally(%v) = %d unled, %d claimed twice; want %d, %d", tc.leaders, unled, twice, tc.unled, tc.claimedTwice)
			}
		})
	}
}

// fakeCandidate is a candidate whose claim and last write the test sets.
type fakeCandidate struct {
	leading bool
	last    time.Time
}

func (f *fakeCandidate) leads() bool      { return f.leading }
func (f *fakeCandidate) wrote() time.Time { return f.last }
func (f *fakeCandidate) synced() bool     { return true }
func (f *fakeCandidate) crash()           {}
func (f *fakeCandidate) stop()            {}

func TestLeadersPerLease(t *testing.T) {
	since := time.Unix(1000, 0)
	stale, fresh := since.Add(-time.Second), since
	electors := []candidate{
		// lease 0: led by one that wrote since
		&fakeCandidate{leading: true, last: fresh}, &fakeCandidate{}, &fakeCandidate{},
		// lease 1: its leader has not written since: led, but not yet again
		&fakeCandidate{}, &fakeCandidate{leading: true, last: stale}, &fakeCandidate{},
		// lease 2: two say they lead
		&fakeCandidate{leading: true, last: fresh}, &fakeCandidate{leading: true, last: stale}, &fakeCandidate{},
		// lease 3: nobody
		&fakeCandidate{}, &fakeCandidate{}, &fakeCandidate{},
	}
	leaders, freshLeaders := leadersPerLease(electors, 3, since)
	if want := []int{1, 1, 2, 0}; !slices.Equal(leaders, want) {
		t.Errorf("leaders = %v, want %v", leaders, want)
	}
	if want := []int{1, 0, 1, 0}; !slices.Equal(freshLeaders, want) {
		t.Errorf("fresh leaders = %v, want %v", freshLeaders, want)
	}
}

// TestLeadersPerLeaseOfAPopulationStillStarting: during a cold start the electors started so far may end
// part way through a lease, whose first candidate may already lead; that lease counts once all its
// candidates have started.
func TestLeadersPerLeaseOfAPopulationStillStarting(t *testing.T) {
	electors := []candidate{
		&fakeCandidate{leading: true}, &fakeCandidate{}, &fakeCandidate{},
		&fakeCandidate{leading: true}, &fakeCandidate{}, // lease 1: its third candidate has not started
	}
	leaders, fresh := leadersPerLease(electors, 3, time.Time{})
	if want := []int{1}; !slices.Equal(leaders, want) || !slices.Equal(fresh, want) {
		t.Errorf("leaders, fresh = %v, %v; want %v for the one lease whose candidates have all started", leaders, fresh, want)
	}
}

func TestVerdict(t *testing.T) {
	timing := lease.DefaultTiming
	budget := lease.TakeoverBudget(timing.LeaseDuration, lease.DefaultClockSkewMargin)
	good := func(client, scenario string, led time.Duration) outcome {
		return outcome{leases: 1000, client: client, scenario: scenario, timing: timing, led: led}
	}
	clientGoCold := good(clientClientGo, scenarioCold, 10*time.Second)
	clientGoRestart := good(clientClientGo, scenarioAPIServerRestart, 20*time.Second)
	clientGoRestart.answering = 15 * time.Second
	restart := func(answering, led time.Duration) outcome {
		o := good(clientAgent, scenarioAPIServerRestart, led)
		o.answering = answering
		return o
	}
	clientGoSecondRound := good(clientClientGo, scenarioAPIServerRestart, 30*time.Second)
	clientGoSecondRound.answering, clientGoSecondRound.round = 15*time.Second, 2
	secondRound := func(answering, led time.Duration) outcome {
		o := restart(answering, led)
		o.round = 2
		return o
	}
	all := []outcome{clientGoCold, clientGoRestart, clientGoSecondRound}
	for _, tc := range []struct {
		name string
		o    outcome
		want string
	}{
		{"led before client-go", good(clientAgent, scenarioCold, 9*time.Second), "met"},
		{"led at the same time as client-go", good(clientAgent, scenarioCold, 10*time.Second), "met"},
		{"led after client-go", good(clientAgent, scenarioCold, 12*time.Second), "missed: led 2s after client-go"},
		{"led later than client-go by less than the harness can tell", good(clientAgent, scenarioCold, 10*time.Second+sampleEvery), "met"},
		{"recovered no later than client-go from the kill and from the answer", restart(15*time.Second, 20*time.Second), "met"},
		{"led before client-go because the API server answered sooner: the answer is the electors' doing too", restart(5*time.Second, 15*time.Second), "met"},
		{"led after client-go only because the API server answered later", restart(25*time.Second, 26*time.Second), "missed: led 6s after client-go"},
		{"a second round is raced against client-go's second round, not its first", secondRound(15*time.Second, 29*time.Second), "met"},
		{"a second round behind client-go's second round", secondRound(15*time.Second, 31*time.Second), "missed: led 1s after client-go"},
		{"etcd restarts are not raced against client-go", good(clientAgent, scenarioEtcdRestart, time.Minute), "met"},
		{"another run's client-go is not compared", func() outcome { o := good(clientAgent, scenarioCold, time.Minute); o.run = 2; return o }(), "met"},
		{"another row size is not compared", outcome{leases: 5000, client: clientAgent, scenario: scenarioCold, timing: timing, led: time.Minute}, "met"},
		{"unled leases", outcome{leases: 1000, client: clientAgent, scenario: scenarioAPIServerRestart, timing: timing, unledAtEnd: 3}, "missed: leases left unled"},
		{"two claims", func() outcome { o := good(clientAgent, scenarioCold, time.Second); o.twoClaims = 1; return o }(), "missed: two claims"},
		{"a restarted API server that never answered is not laid at the electors' door",
			outcome{leases: 1000, client: clientClientGo, scenario: scenarioAPIServerRestart, timing: timing, unledAtEnd: 1000, neverAnswered: true},
			"reference: the API server never answered: not a measure of the electors"},
		{"429s settled within the budget", func() outcome {
			o := good(clientAgent, scenarioAPIServerRestart, 5*time.Second)
			o.throttling.lastOver = budget
			return o
		}(), "met"},
		{"429s settled after the budget", func() outcome {
			o := good(clientAgent, scenarioAPIServerRestart, 5*time.Second)
			o.throttling.lastOver = budget + time.Second
			return o
		}(), "missed: 429s >= 1% past the budget"},
		{"429s never settled", func() outcome {
			o := good(clientAgent, scenarioEtcdRestart, 5*time.Second)
			o.throttling.overAtEnd = true
			return o
		}(), "missed: 429s >= 1% past the budget"},
		{"a cold start's 429s are not held to the budget", func() outcome {
			o := good(clientAgent, scenarioCold, 5*time.Second)
			o.throttling.overAtEnd = true
			return o
		}(), "met"},
		{"the harness out of file descriptors", func() outcome {
			o := good(clientAgent, scenarioAPIServerRestart, 5*time.Second)
			o.outOfFiles = 5
			return o
		}(), "missed: not a measure of the electors: 5 of their requests failed for want of a file descriptor in the harness"},
		{"client-go's row out of file descriptors says so too", func() outcome { o := clientGoRestart; o.outOfFiles = 1; return o }(),
			"reference: not a measure of the electors: 1 of their requests failed for want of a file descriptor in the harness"},
		{"client-go is the reference", clientGoRestart, "reference"},
		{"client-go's own misses are said", func() outcome { o := clientGoCold; o.twoClaims = 2; return o }(), "reference: two claims"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.o.verdict(all); got != tc.want {
				t.Errorf("verdict = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseList(t *testing.T) {
	known := []string{"agent", "client-go"}
	for _, tc := range []struct {
		name, value string
		rule        listRule
		want        string
		wantErr     string
	}{
		{"both", "agent,client-go", once, "agent client-go", ""},
		{"spaces trimmed", " client-go , agent", once, "client-go agent", ""},
		{"empty where allowed", "", emptyOrRepeated, "", ""},
		{"empty where not allowed", "", once, "", "-client is empty: want some of agent,client-go"},
		{"unknown value", "agent,kube", once, "", `-client "agent,kube": want a comma-separated list of agent,client-go, each at most once`},
		{"a value twice", "agent,agent", once, "", "each at most once"},
		{"a value repeated where allowed, in order", "agent,client-go,agent", emptyOrRepeated, "agent client-go agent", ""},
		{"unknown value where repeats are allowed", "agent,kube", emptyOrRepeated, "", `-client "agent,kube": want a comma-separated list of agent,client-go`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseList("-client", tc.value, known, tc.rule)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || strings.Join(got, " ") != tc.want {
				t.Fatalf("parseList = %v, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestOutcomeRowFillsEveryColumnOfTheHeading(t *testing.T) {
	o := outcome{
		leases: 5000, client: clientAgent, scenario: scenarioCold,
		timing: lease.Timing{LeaseDuration: 150 * time.Second, RenewDeadline: 100 * time.Second, RetryPeriod: 20 * time.Second},
		led:    90 * time.Second,
		throttling: throttling{total: 10, requests: 1000,
			writes: levelThrottling{rejected: 24, peakQueued: 40}, reads: levelThrottling{rejected: 8, peakQueued: 90}},
		writes: writeCounts{ok: 5, conflicts: 2, shed: 1}, writeP99: 1500 * time.Millisecond,
		apiServerCPU: 95 * time.Second, electorsCPU: 41200 * time.Millisecond,
	}
	row := o.markdown([]outcome{o})
	if got, want := strings.Count(row, "|"), strings.Count(outcomesHeading, "|"); got != want {
		t.Errorf("the row has %d cell borders, the heading %d:\n%s\n%s", got, want, outcomesHeading, row)
	}
	for _, want := range []string{"| 24 (40) / 8 (90) |", "| 5 / 2 / 1 (1.5s) |", "| 1m35s / 41.2s |"} {
		if !strings.Contains(row, want) {
			t.Errorf("row %s: want the cell %q", row, want)
		}
	}
}

func TestOutcomeRowNamesARestartsRoundAfterTheFirst(t *testing.T) {
	for round, want := range map[int]string{1: "| kube-apiserver restart | agent |", 2: "| kube-apiserver restart 2 | agent |"} {
		o := outcome{leases: 1000, client: clientAgent, scenario: scenarioAPIServerRestart, round: round, led: time.Second}
		if row := o.markdown([]outcome{o}); !strings.Contains(row, want) {
			t.Errorf("round %d: row %s, want %q", round, row, want)
		}
	}
}

func TestServedBeforeReadyNamesTheKindsAnsweredMost(t *testing.T) {
	metrics, err := observe.ParseMetrics([]byte(`# TYPE apiserver_request_total counter
apiserver_request_total{code="200",resource="leases",scope="resource",subresource="",verb="WATCH"} 800
apiserver_request_total{code="200",resource="leases",scope="namespace",subresource="",verb="WATCH"} 200
apiserver_request_total{code="429",resource="leases",scope="resource",subresource="",verb="PUT"} 300
apiserver_request_total{code="200",resource="pods",scope="resource",subresource="status",verb="GET"} 5
apiserver_request_total{code="200",resource="leases",scope="resource",subresource="",verb="GET"} 300
apiserver_request_total{code="500",resource="",scope="",subresource="/readyz",verb="GET"} 2
# TYPE apiserver_flowcontrol_rejected_requests_total counter
apiserver_flowcontrol_rejected_requests_total{priority_level="workload-low",reason="queue-full"} 99
`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		top  int
		want string
	}{
		{name: "scopes of one kind add up, ties go by name, and the total counts every kind", top: 3,
			want: "before ready it answered 1607 requests, most: 1000 WATCH leases 200, 300 GET leases 200, 300 PUT leases 429"},
		{name: "a subresource is named with its resource, a path outside the resources as it is", top: 10,
			want: "before ready it answered 1607 requests, most: 1000 WATCH leases 200, 300 GET leases 200, 300 PUT leases 429, 5 GET pods/status 200, 2 GET /readyz 500"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := servedBeforeReady(metrics, tt.top); got != tt.want {
				t.Errorf("servedBeforeReady:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

func TestStartSummarySaysWhatTheRestartWaitedFor(t *testing.T) {
	started := time.Unix(1000, 0)
	o := outcome{scenario: scenarioAPIServerRestart, answering: 20 * time.Second, electorsCPUToAnswer: 3 * time.Second, start: process.StartReport{
		Started: started, FirstAnswer: started.Add(2 * time.Second), Ready: started.Add(8 * time.Second), CPU: 9500 * time.Millisecond,
		Failing: []string{"poststarthook/rbac/bootstrap-roles", "informer-sync"},
	}}
	want := "started 12s after the event; the API server first answered a readiness poll (any answer within its second) 2s and ready 8s after that start, the restarted process's CPU by then 9.5s, " +
		"its readiness checks still failing before: poststarthook/rbac/bootstrap-roles, informer-sync; the electors' CPU from the event until ready 3s"
	if got := o.startSummary(); got != want {
		t.Errorf("startSummary:\n%s\nwant:\n%s", got, want)
	}
	o.start.Served = observe.Metrics{}
	if got := o.startSummary(); got != want+"; before ready it answered no requests" {
		t.Errorf("startSummary of a restarted API server whose metrics were scraped at ready:\n%s\nwant what it answered after:\n%s", got, want)
	}
	if got := (outcome{scenario: scenarioAPIServerRestart, neverAnswered: true}).startSummary(); got != "no restart answered" {
		t.Errorf("never answered: %q", got)
	}
}

func TestSteadyRowFillsEveryColumnOfTheHeading(t *testing.T) {
	r := row{run: 1, leases: 1000, electors: 3000, client: clientAgent, timing: lease.DefaultTiming,
		requestsPerSecond: map[string]float64{"PUT": 500, "WATCH": 1.5, "GET": 2},
		renewals:          100, renewP50: 5 * time.Millisecond, renewP99: 20 * time.Millisecond, renewMax: 30 * time.Millisecond,
		startup: 12 * time.Second, takeovers: []time.Duration{3 * time.Second, time.Second, 2 * time.Second}}
	line := r.markdown()
	if got, want := strings.Count(line, "|"), strings.Count(rowsHeading, "|"); got != want {
		t.Errorf("the row has %d cell borders, the heading %d:\n%s\n%s", got, want, rowsHeading, line)
	}
	budget := lease.TakeoverBudget(lease.DefaultTiming.LeaseDuration, lease.DefaultClockSkewMargin)
	for _, want := range []string{"| 500 / 3.5 |", "| 5ms / 20ms / 30ms |", "| 2s / 3s (" + budget.String() + ") |"} {
		if !strings.Contains(line, want) {
			t.Errorf("row %s: want the cell %q", line, want)
		}
	}
	if !slices.Equal(r.takeovers, []time.Duration{3 * time.Second, time.Second, 2 * time.Second}) {
		t.Errorf("markdown sorted the row's takeovers in place: %v", r.takeovers)
	}
}

func TestOutcomeRowOfARestartNeverAnswered(t *testing.T) {
	o := outcome{leases: 5000, client: clientClientGo, scenario: scenarioAPIServerRestart, unledAtEnd: 4100, neverAnswered: true}
	row := o.markdown([]outcome{o})
	for _, want := range []string{"| not ready within the timeout | 4100 unled after the timeout |", "the API server never answered"} {
		if !strings.Contains(row, want) {
			t.Errorf("row %s: want %q", row, want)
		}
	}
}

func TestWriteOutcomesCountEachClientsAnswers(t *testing.T) {
	var o writeOutcomes
	o.took.restart()
	for _, err := range []error{
		nil,
		&kubeclient.StatusError{Status: kubeclient.Status{Code: http.StatusConflict, Reason: "Conflict"}},
		apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "lease-0", errors.New("stale")),
		// API Priority and Fairness answers 429 in plain text: the agent's client has the code, no reason.
		&kubeclient.StatusError{Status: kubeclient.Status{Code: http.StatusTooManyRequests}, RetryAfter: time.Second},
		apierrors.NewTooManyRequests("shed", 1),
		&kubeclient.ThrottledError{Wait: time.Second}, // not sent: not an answer
		errors.New("connection reset by peer"),
	} {
		o.add(err, time.Second)
	}
	if got, want := o.counts(), (writeCounts{ok: 1, conflicts: 2, shed: 2}); got != want {
		t.Errorf("counts %+v, want %+v", got, want)
	}
	if took := o.took.record(false); len(took) != 5 {
		t.Errorf("%d writes timed, want the 5 answered", len(took))
	}
}

func TestMediansJudgeTheGoalsOverTheRuns(t *testing.T) {
	timing := lease.DefaultTiming
	budget := lease.TakeoverBudget(timing.LeaseDuration, lease.DefaultClockSkewMargin)
	o := func(run int, client, scenario string, answering, led time.Duration) outcome {
		return outcome{run: run, leases: 1000, client: client, scenario: scenario, timing: timing, answering: answering, led: led}
	}
	s := time.Second
	for _, tc := range []struct {
		name     string
		outcomes []outcome
		want     []string // the medians' rows, in order
	}{
		{
			name: "one slow run does not miss the goal when the median meets it",
			outcomes: []outcome{
				o(1, clientAgent, scenarioCold, 0, 9*s), o(1, clientClientGo, scenarioCold, 0, 10*s),
				o(2, clientAgent, scenarioCold, 0, 40*s), o(2, clientClientGo, scenarioCold, 0, 11*s),
				o(3, clientAgent, scenarioCold, 0, 10*s), o(3, clientClientGo, scenarioCold, 0, 12*s),
			},
			want: []string{
				"| 1000 | cold start | agent | 3 | 10s (9s - 40s) | - | 0 / 0 / 0 | met |",
				"| 1000 | cold start | client-go | 3 | 11s (10s - 12s) | - | 0 / 0 / 0 | reference |",
			},
		},
		{
			name: "an even count's median is the mean of the middle two, and a restart is raced from the kill with the time after the answer beside it",
			outcomes: []outcome{
				o(1, clientAgent, scenarioAPIServerRestart, 10*s, 20*s), o(1, clientClientGo, scenarioAPIServerRestart, 20*s, 25*s),
				o(2, clientAgent, scenarioAPIServerRestart, 10*s, 30*s), o(2, clientClientGo, scenarioAPIServerRestart, 30*s, 35*s),
			},
			want: []string{
				"| 1000 | kube-apiserver restart | agent | 2 | 25s (20s - 30s) | 15s (10s - 20s) | 0 / 0 / 0 | met |",
				"| 1000 | kube-apiserver restart | client-go | 2 | 30s (25s - 35s) | 5s (5s - 5s) | 0 / 0 / 0 | reference |",
			},
		},
		{
			name: "a run that left leases unled, claimed twice or never settled misses, and is left out of the times",
			outcomes: []outcome{
				o(1, clientAgent, scenarioAPIServerRestart, 10*s, 0),
				func() outcome {
					x := o(2, clientAgent, scenarioAPIServerRestart, 10*s, 12*s)
					x.twoClaims = 1
					return x
				}(),
				func() outcome {
					x := o(3, clientAgent, scenarioAPIServerRestart, 10*s, 14*s)
					x.throttling.lastOver = budget + s
					return x
				}(),
			},
			want: []string{
				"| 1000 | kube-apiserver restart | agent | 3 | 13s (12s - 14s) | 3s (2s - 4s) | 1 / 1 / 1 | missed: leases left unled 1 of 3 times, two claims 1 of 3 times, 429s >= 1% past the budget 1 of 3 times |",
			},
		},
		{
			name: "a restart's rounds in one run are pooled as times of their own",
			outcomes: []outcome{
				o(1, clientAgent, scenarioAPIServerRestart, 10*s, 20*s), o(1, clientClientGo, scenarioAPIServerRestart, 10*s, 22*s),
				func() outcome { x := o(1, clientAgent, scenarioAPIServerRestart, 10*s, 30*s); x.round = 2; return x }(),
				func() outcome { x := o(1, clientClientGo, scenarioAPIServerRestart, 10*s, 30*s); x.round = 2; return x }(),
				func() outcome { x := o(1, clientAgent, scenarioAPIServerRestart, 10*s, 21*s); x.round = 3; return x }(),
				func() outcome { x := o(1, clientClientGo, scenarioAPIServerRestart, 10*s, 26*s); x.round = 3; return x }(),
			},
			want: []string{
				"| 1000 | kube-apiserver restart | agent | 3 | 21s (20s - 30s) | 11s (10s - 20s) | 0 / 0 / 0 | met |",
				"| 1000 | kube-apiserver restart | client-go | 3 | 26s (22s - 30s) | 16s (12s - 20s) | 0 / 0 / 0 | reference |",
			},
		},
		{
			name: "row sizes are not compared with each other",
			outcomes: []outcome{
				o(1, clientAgent, scenarioCold, 0, time.Minute), o(2, clientAgent, scenarioCold, 0, time.Minute),
				func() outcome { x := o(1, clientClientGo, scenarioCold, 0, s); x.leases = 5000; return x }(),
			},
			want: []string{
				"| 1000 | cold start | agent | 2 | 1m0s (1m0s - 1m0s) | - | 0 / 0 / 0 | met |",
				"| 5000 | cold start | client-go | 1 | 1s (1s - 1s) | - | 0 / 0 / 0 | reference |",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms := medians(tc.outcomes)
			var got []string
			for _, m := range ms {
				row := m.markdown(ms)
				if n, want := strings.Count(row, "|"), strings.Count(mediansHeading, "|"); n != want {
					t.Errorf("row %s has %d cell borders, the heading %d", row, n, want)
				}
				got = append(got, row)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("medians:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestCPUUntilCountsTheAPIServersCPUAcrossARestart(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	samples := []sample{{at: at(0), cpu: 100}, {at: at(1), cpu: 101.5}, {at: at(3), cpu: 2}, {at: at(4), cpu: 4}, {at: at(5), cpu: 9}}
	for _, tc := range []struct {
		name  string
		until time.Time
		want  time.Duration
	}{
		{"before the second sample: nothing", at(0), 0},
		{"one interval", at(1), 1500 * time.Millisecond},
		{"a reset counts what the new process spent", at(3), 3500 * time.Millisecond},
		{"samples after until are left out", at(4), 5500 * time.Millisecond},
		{"all of them", at(9), 10500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := cpuUntil(samples, tc.until); got != tc.want {
				t.Errorf("cpuUntil(%s) = %s, want %s", tc.until.Sub(t0), got, tc.want)
			}
		})
	}
}
