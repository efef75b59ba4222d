package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/contract"
	"github.com/leasegate/leasegate/internal/lease"
)

// HandoverOptions say which lease to hand over, to whom, and whether to wait for the new holder.
type HandoverOptions struct {
	Namespace, Lease string
	// To is the pod that should take over; "" lets any other Ready candidate.
	To string
	// Wait, when positive, is how long to wait for a new holder.
	Wait time.Duration
	// LeasegateNamespace and ConfigName locate leasegate-config (for the clock skew margin).
	LeasegateNamespace, ConfigName string
}

// PlanHandover checks a handover of the lease s against its candidates and returns the request to record:
// the lease must be managed (its candidates run leasegate's agent, which acts on the request) and held,
// and the target a Ready candidate other than the holder. Without a target, some other candidate must be
// Ready, or nobody would take over.
func PlanHandover(s *LeaseStatus, to string) (lease.Handover, error) {
	key := s.Namespace + "/" + s.Name
	switch {
	case !s.Managed:
		return lease.Handover{}, fmt.Errorf("lease %s is not managed by leasegate: only leasegate's agents act on a handover", key)
	case s.State != lease.Held.String():
		return lease.Handover{}, fmt.Errorf("lease %s is %s: nobody holds it, so there is nothing to hand over", key, s.State)
	case s.HolderPod == "":
		return lease.Handover{}, fmt.Errorf("lease %s is held by %q, which is not one of its candidates' agents", key, s.Holder)
	}
	var ready []string
	for _, c := range s.Candidates {
		if c.Ready && c.Pod != s.HolderPod {
			ready = append(ready, c.Pod)
		}
	}
	if to == "" {
		if len(ready) == 0 {
			return lease.Handover{}, fmt.Errorf("lease %s has no Ready candidate besides its holder %s to take over", key, s.HolderPod)
		}
		return lease.Handover{From: s.Holder}, nil
	}
	if to == s.HolderPod {
		return lease.Handover{}, fmt.Errorf("--to %s: that pod already holds lease %s", to, key)
	}
	if !slices.Contains(ready, to) {
		i := slices.IndexFunc(s.Candidates, func(c Candidate) bool { return c.Pod == to })
		if i >= 0 {
			return lease.Handover{}, fmt.Errorf("--to %s: that pod is not Ready; pick a Ready candidate: %s", to, orNone(strings.Join(ready, ", ")))
		}
		return lease.Handover{}, fmt.Errorf("--to %s: that pod is not a candidate for lease %s; pick a Ready candidate: %s", to, key, orNone(strings.Join(ready, ", ")))
	}
	return lease.Handover{From: s.Holder, To: to}, nil
}

// HandoverResult is a handover that was asked and, with Wait, done.
type HandoverResult struct {
	// From is the pod asked to step down; NewHolder the pod that took over ("" without Wait).
	From, NewHolder string
	// Took is from the request to the new holder's write, as the watch delivered it.
	Took time.Duration
}

// Handover records a handover request on a lease, saying so on out, and with Wait, waits for the new
// holder and says who it is and how long the handover took.
func Handover(ctx context.Context, cs kubernetes.Interface, opts HandoverOptions, out io.Writer) (*HandoverResult, error) {
	list, err := GatherStatus(ctx, cs, StatusOptions{
		Namespace: opts.Namespace, Lease: opts.Lease, LeasegateNamespace: opts.LeasegateNamespace,
		ConfigName: opts.ConfigName, Now: time.Now(),
	})
	if err != nil {
		return nil, err
	}
	if len(list.Items) == 0 {
		return nil, fmt.Errorf("lease %s/%s is neither managed nor guarded by leasegate", opts.Namespace, opts.Lease)
	}
	request, err := PlanHandover(&list.Items[0], opts.To)
	if err != nil {
		return nil, err
	}

	leases := cs.CoordinationV1().Leases(opts.Namespace)
	// An update, not a patch: its compare-and-swap never records a request against a holder that has
	// changed since it was read. A renewal in between (every retry period) is a conflict that says nothing
	// about the holder, so the request is read and written again.
	var updated *coordinationv1.Lease
	var asked time.Time
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		current, err := leases.Get(ctx, opts.Lease, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if holder := ptr.Deref(current.Spec.HolderIdentity, ""); holder != request.From {
			return fmt.Errorf("lease %s/%s changed hands to %q while the handover was prepared; run it again", opts.Namespace, opts.Lease, holder)
		}
		metav1.SetMetaDataAnnotation(&current.ObjectMeta, contract.HandoverFrom, request.From)
		if request.To != "" {
			metav1.SetMetaDataAnnotation(&current.ObjectMeta, contract.HandoverTo, request.To)
		} else {
			delete(current.Annotations, contract.HandoverTo)
		}
		asked = time.Now()
		updated, err = leases.Update(ctx, current, metav1.UpdateOptions{FieldManager: "kubectl-leasegate"})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("recording the handover on lease %s/%s: %w", opts.Namespace, opts.Lease, err)
	}
	target := request.To
	if target == "" {
		target = "any other Ready candidate"
	}
	result := &HandoverResult{From: list.Items[0].HolderPod}
	fmt.Fprintf(out, "lease %s/%s: asked %s to hand over to %s\n", opts.Namespace, opts.Lease, result.From, target)
	if opts.Wait <= 0 {
		return result, nil
	}
	next, err := waitForNewHolder(ctx, leases, updated, request, opts.Wait)
	if err != nil {
		return nil, err
	}
	result.NewHolder, _, _ = lease.ParseIdentity(next.holder)
	result.Took = next.at.Sub(asked)
	fmt.Fprintf(out, "lease %s/%s: %s leads now (handover took %s)\n", opts.Namespace, opts.Lease, result.NewHolder, result.Took.Round(time.Millisecond))
	return result, nil
}

type takeover struct {
	holder string
	at     time.Time
}

// waitForNewHolder watches the lease from the request's version until a pod other than the old holder
// writes itself as holder.
func waitForNewHolder(ctx context.Context, leases coordinationclient.LeaseInterface, asked *coordinationv1.Lease, request lease.Handover, wait time.Duration) (takeover, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	w, err := leases.Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", asked.Name).String(),
		ResourceVersion: asked.ResourceVersion,
	})
	if err != nil {
		return takeover{}, err
	}
	defer w.Stop()
	stepped := false
	for event := range w.ResultChan() {
		l, ok := event.Object.(*coordinationv1.Lease)
		if !ok {
			continue
		}
		switch holder := ptr.Deref(l.Spec.HolderIdentity, ""); holder {
		case request.From:
		case "":
			stepped = true
		default:
			return takeover{holder: holder, at: time.Now()}, nil
		}
	}
	key := asked.Namespace + "/" + asked.Name
	if !stepped {
		return takeover{}, fmt.Errorf("lease %s: the holder did not step down within %s (its agent may predate handovers); the request stays on the lease until someone takes it", key, wait)
	}
	return takeover{}, fmt.Errorf("lease %s: the holder stepped down, but nobody took the lease within %s", key, wait)
}
