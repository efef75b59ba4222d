// Package observe records what the system under test does, for a spec to judge afterwards: every version
// of a Lease, agents' claims to lead and any overlap of two (the proof of two leaders), which pod a
// Service routed to, and the metrics a process exports. It starts no process, so suites on an envtest
// control plane and on a real cluster observe alike.
package observe
