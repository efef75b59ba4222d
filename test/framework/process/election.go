package process

import (
	"fmt"
	"syscall"
	"time"
)

// Election is a group of agents on one lease, as the demo and the failover benchmark drive it.
type Election struct {
	// Launch starts the agent of a pod, the first time and after it was stopped.
	Launch func(*Pod) (*Agent, error)
	Agents []*Agent
}

// Start starts an agent for each pod.
func (e *Election) Start(pods []*Pod) error {
	for _, pod := range pods {
		a, err := e.Launch(pod)
		if err != nil {
			return err
		}
		e.Agents = append(e.Agents, a)
	}
	return nil
}

// Stop kills every agent.
func (e *Election) Stop() {
	for _, a := range e.Agents {
		a.Stop()
	}
}

// SoleLeader waits until exactly one agent claims leadership and every agent names it as the holder.
func (e *Election) SoleLeader(timeout time.Duration) (*Agent, error) {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		var leader *Agent
		holders := map[string]bool{}
		last = nil
		for _, a := range e.Agents {
			s, err := a.Leader()
			if err != nil {
				last = err
				break
			}
			holders[s.Holder] = true
			if s.IsLeader {
				if leader != nil {
					return nil, fmt.Errorf("%s and %s both claim leadership", leader.Pod.Name, a.Pod.Name)
				}
				leader = a
			}
		}
		if last == nil && leader != nil && len(holders) == 1 {
			return leader, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil, fmt.Errorf("no single leader that every agent agrees on within %s (last error: %v)", timeout, last)
}

// Failover signals the leader and measures how long until another agent claims leadership, as its app
// would see it through /leader. The old leader's process is waited for, so it can be restarted.
func (e *Election) Failover(sig syscall.Signal, timeout time.Duration) (old, next *Agent, took time.Duration, err error) {
	if old, err = e.SoleLeader(timeout); err != nil {
		return nil, nil, 0, err
	}
	var followers []*Agent
	for _, a := range e.Agents {
		if a != old {
			followers = append(followers, a)
		}
	}
	start := time.Now()
	if err := old.Signal(sig); err != nil {
		return nil, nil, 0, err
	}
	next, err = FirstToLead(followers, timeout)
	took = time.Since(start)
	<-old.Exited()
	return old, next, took, err
}

// FirstToLead polls the agents' /leader every millisecond until one claims leadership.
func FirstToLead(agents []*Agent, timeout time.Duration) (*Agent, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, a := range agents {
			if a.IsLeader() {
				return a, nil
			}
		}
		time.Sleep(time.Millisecond)
	}
	return nil, fmt.Errorf("no agent took over within %s", timeout)
}

// Restart starts a stopped agent again for the same pod, as kubelet restarts a container, and waits
// until it follows the current leader.
func (e *Election) Restart(old *Agent, timeout time.Duration) (*Agent, error) {
	a, err := e.Launch(old.Pod)
	if err != nil {
		return nil, err
	}
	for i := range e.Agents {
		if e.Agents[i] == old {
			e.Agents[i] = a
		}
	}
	_, err = e.SoleLeader(timeout)
	return a, err
}
