package lease

import "time"

// MaxClockRateError is how far, as a fraction, the rate of any clock involved (the etcd leader's that
// times the backend lease, the election controller's, a candidate's) may stray from true time. Real clocks
// stray by parts per million; 10% leaves room for a badly behaved VM, and is what the e2e suite skews by.
const MaxClockRateError = 0.1

// ConfirmedFor is how long a candidate may act after it started the heartbeat write that the status then
// confirmed (status.observedGeneration reached that write's generation, naming it global leader).
//
// The controller confirms a generation only with a backend renewal it sent after it saw that generation,
// so the backend lease cannot expire sooner than the write's start plus the TTL (the lease duration); less
// the rate error, the candidate stops first on its own clock. Only durations on one machine's clock are
// involved: no clock of another cluster, not even the controller's, can make it act too long.
func ConfirmedFor(leaseDurationSeconds int32) time.Duration {
	ttl := time.Duration(leaseDurationSeconds) * time.Second
	return ttl - time.Duration(float64(ttl)*MaxClockRateError)
}

// Confirms reports whether an election controller's answer (the holder it names, for heartbeats up to
// observedGeneration) confirms identity as global leader for a heartbeat of generation, and decided
// whether it answers that heartbeat at all (it may name another leader). An answer to a later heartbeat
// answers every earlier one: the controller answers with a backend renewal sent after it saw the later
// heartbeat, so after the earlier ones too.
func Confirms(holder string, observedGeneration int64, identity string, generation int64) (confirmed, decided bool) {
	decided = observedGeneration >= generation
	return decided && holder == identity, decided
}
