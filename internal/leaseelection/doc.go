// Package leaseelection is the election loop the agent runs on a lease: the Elector, the Lock it elects
// on (a Lease, or a MultiClusterLease whose holder leads only while the election controller confirms it),
// the agent's own lease type and REST client over internal/kubeclient, and the watch that keeps the
// elector's copy of the lease current.
//
// It is apart from package lease, whose judgement it applies, because that judgement is also the fence's,
// the plugin's and the public MultiClusterLease API's, none of which may link the agent's HTTP client.
package leaseelection
