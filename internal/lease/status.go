package lease

import "time"

// Status is what an elector knows about its lease, as the agent publishes it. It is here, beside the
// judgement, not beside the elector, because the plugin and the mutation gate read it too.
type Status struct {
	// Lease is "<namespace>/<name>".
	Lease string `json:"lease"`
	// Holder is the identity the lease names, "" when it is released or not yet observed.
	Holder string `json:"holder"`
	// IsLeader is true only while this elector holds the lease and may act.
	IsLeader bool `json:"isLeader"`
	// Since is when the current holder acquired the lease.
	Since *time.Time `json:"since,omitempty"`
	// Transitions is the lease's own count of changes of holder.
	Transitions int32 `json:"transitions"`
	// FencingToken identifies the holder's term, and is the same for everyone who reads the lease: for a
	// Lease its leaseTransitions, which every acquisition raises by one (the lease guard refuses a pod's
	// write that lowers it, skips a number, or changes the holder without raising it); for a
	// MultiClusterLease its status.fencingToken, 0 while nobody leads globally. While a Lease is
	// released it is the last term's: the next holder's is higher.
	FencingToken int64 `json:"fencingToken"`
	// Handover is the handover asked on the lease (kubectl leasegate handover), nil when none is.
	Handover *Handover `json:"handover,omitempty"`
	// GlobalHolder is, for a MultiClusterLease, the candidate that leads across clusters as this cluster's
	// election controller last answered ("" when nobody does); Holder is then this cluster's candidate.
	GlobalHolder string `json:"globalHolder,omitempty"`
}
