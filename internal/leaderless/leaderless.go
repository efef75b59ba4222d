// Package leaderless reports, from the elected webhook replica, the managed leases that nobody has held
// for longer than their own takeover budget, the metrics LeasegateNoLeader alerts on. It is a runnable
// over the manager's cache of managed Leases, apart from the injection decision and from provisioning,
// which create those Leases but never judge who holds them.
package leaderless

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/leasegate/leasegate/internal/config"
	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/lease"
	"github.com/leasegate/leasegate/internal/lease/leaseapi"
)

// leaderlessInterval is how often the leaderless leases are counted: alerts wait minutes, not seconds.
const leaderlessInterval = 5 * time.Second

// Reporter publishes which leases leasegate manages have had no leader for longer than their
// own takeover budget, so an alert fires per lease on its own timing rather than on one global delay. It
// reads the manager's cache of managed Leases (no API call) and runs on the elected replica only.
type Reporter struct {
	Client client.Reader
	Config *config.Store
}

// NeedLeaderElection is true: one replica reports, from the cache of managed Leases the manager already keeps.
func (r *Reporter) NeedLeaderElection() bool { return true }

// Start reports every leaderlessInterval until ctx ends.
func (r *Reporter) Start(ctx context.Context) error {
	ticker := time.NewTicker(leaderlessInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			leaderlessSeconds.Reset()
			return nil
		case <-ticker.C:
		}
		var leases coordinationv1.LeaseList
		if err := r.Client.List(ctx, &leases, client.MatchingLabels{contract.Managed: "true"}); err != nil {
			continue // the cache is starting; the next tick tries again
		}
		free := leaderless(leases.Items, time.Now(), r.Config.Current().Election.ClockSkewMargin.Duration)
		leaderlessSeconds.Reset()
		for _, l := range free {
			leaderlessSeconds.WithLabelValues(l.namespace, l.name).Set(l.seconds)
		}
		leaderlessLeases.Set(float64(len(free)))
	}
}

type leaderlessLease struct {
	namespace, name string
	// seconds since the lease became free: released, or past its expiry.
	seconds float64
}

// leaderless lists the leases that nobody has held for longer than their takeover budget: lease duration +
// clock skew margin after they became free (released, or expired). Candidates watch their lease and take a
// free one within a watch round trip, so a lease free for a whole budget has no live candidate.
func leaderless(leases []coordinationv1.Lease, now time.Time, margin time.Duration) []leaderlessLease {
	var free []leaderlessLease
	for i := range leases {
		spec := &leases[i].Spec
		if spec.RenewTime == nil {
			continue // created by the provisioner, not yet taken: the pods are starting
		}
		j := leaseapi.Judge(spec, now, margin)
		var freeSince time.Time
		switch j.State {
		case lease.Held:
			continue
		case lease.Released:
			freeSince = spec.RenewTime.Time
		case lease.Expired:
			freeSince = j.ExpiresAt
		}
		budget := lease.TakeoverBudget(time.Duration(ptr.Deref(spec.LeaseDurationSeconds, 0))*time.Second, margin)
		if elapsed := now.Sub(freeSince); elapsed > budget {
			free = append(free, leaderlessLease{namespace: leases[i].Namespace, name: leases[i].Name, seconds: elapsed.Seconds()})
		}
	}
	return free
}
