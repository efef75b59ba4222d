// Package lease holds everything leasegate knows about a coordination.k8s.io/v1 Lease: the identity a
// holder writes, the single judgement of who holds a lease at a given instant, the timing rules of an
// election, and the handover rules. It reaches no network: the election loop the agent runs on it is
// package leaseelection.
//
// The judgement lives here, and only here, because both halves of leasegate depend on it agreeing with
// itself: the agent decides when it may take a lease, and the fence decides whether a requester still holds
// one. If they judged expiry differently, a follower could take a lease the fence still credits to the old
// holder, or the other way round.
package lease
