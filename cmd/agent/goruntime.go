package main

import (
	"runtime"
	"runtime/debug"
)

// An agent that only elects, unless GOMEMLIMIT or GOGC say otherwise, keeps its heap small: its live
// heap is a fraction of the Go runtime's smallest heap goal, 4 MiB x GOGC/100, so with the default GOGC of
// 100 the heap would grow to 4 MiB between collections. With electorGCPercent the goal is 1 MiB, which
// costs handovers and CPU nothing measurable (docs/performance.md). The soft memory limit makes the runtime collect and return
// memory harder as the process nears it; set much lower, it would collect on every step of a handover and
// slow it (docs/performance.md has the measurements). An agent serving the mutation gate gets neither:
// its heap follows the app's traffic, and collecting more often would add to every request's latency.
const (
	electorGCPercent   = 25
	electorMemoryLimit = 10 << 20
)

// Unless GOMAXPROCS says otherwise, every agent runs Go code on one thread. Its work, the election and
// the gate's forwarding, comes tens of microseconds at a time, which one thread serves with room; a
// second only adds wake-ups of another thread to the hand-offs between goroutines on every request
// through the gate (test/bench/gate: 11 voluntary context switches a request with two, 7 with one, and
// a sixth less CPU a request; latency within the runs' spread; docs/performance.md). And the runtime's own
// default is the container's CPU limit or, without one, as the chart leaves the agent, every core of the
// node: a sidecar asking for 10m of CPU would run as many threads as a 64-core node has cores.
const agentProcs = 1

// goRuntime is how the agent sets the Go runtime; a zero field leaves the runtime's own setting.
type goRuntime struct {
	procs       int
	gcPercent   int
	memoryLimit int64
}

// goRuntimeFor decides the runtime's settings the environment (getenv) leaves unset, for an agent that
// serves the mutation gate (servesGate) or only elects.
func goRuntimeFor(getenv func(string) string, servesGate bool) goRuntime {
	var r goRuntime
	if getenv("GOMAXPROCS") == "" {
		r.procs = agentProcs
	}
	if servesGate {
		return r
	}
	if getenv("GOGC") == "" {
		r.gcPercent = electorGCPercent
	}
	if getenv("GOMEMLIMIT") == "" {
		r.memoryLimit = electorMemoryLimit
	}
	return r
}

func (r goRuntime) apply() {
	if r.procs != 0 {
		runtime.GOMAXPROCS(r.procs)
	}
	if r.gcPercent != 0 {
		debug.SetGCPercent(r.gcPercent)
	}
	if r.memoryLimit != 0 {
		debug.SetMemoryLimit(r.memoryLimit)
	}
}
