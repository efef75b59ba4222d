package cli

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// completeLeases completes a LEASE argument: the leases status reports in scope (managedOnly: those
// leasegate manages, the only ones a handover applies to). Agents are not asked: completion must be quick.
func completeLeases(ctx context.Context, kube *genericclioptions.ConfigFlags, install *installFlags, all, managedOnly bool) ([]cobra.Completion, cobra.ShellCompDirective) {
	list, ok := gatherForCompletion(ctx, kube, install, all, "")
	if !ok {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return LeaseCompletions(list, managedOnly), cobra.ShellCompDirectiveNoFileComp
}

// completeTargets completes handover's --to: the Ready candidates of the lease that do not hold it.
func completeTargets(ctx context.Context, kube *genericclioptions.ConfigFlags, install *installFlags, leaseName string) ([]cobra.Completion, cobra.ShellCompDirective) {
	list, ok := gatherForCompletion(ctx, kube, install, false, leaseName)
	if !ok {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return TargetCompletions(list), cobra.ShellCompDirectiveNoFileComp
}

func gatherForCompletion(ctx context.Context, kube *genericclioptions.ConfigFlags, install *installFlags, all bool, leaseName string) (*StatusList, bool) {
	cs, ns, err := connect(kube, all, OutputTable, Outputs)
	if err != nil {
		return nil, false
	}
	list, err := GatherStatus(ctx, cs, StatusOptions{
		Namespace: ns, Lease: leaseName, LeasegateNamespace: install.namespace, ConfigName: install.configName, Now: time.Now(),
	})
	return list, err == nil
}

// LeaseCompletions are the lease names of list (with -A, several namespaces may share a name: each is
// offered once), described by holder.
func LeaseCompletions(list *StatusList, managedOnly bool) []cobra.Completion {
	var out []cobra.Completion
	seen := map[string]bool{}
	for _, s := range list.Items {
		if managedOnly && !s.Managed || seen[s.Name] {
			continue
		}
		seen[s.Name] = true
		out = append(out, cobra.CompletionWithDesc(s.Name, s.State+" by "+orNone(s.HolderPod)))
	}
	return out
}

// TargetCompletions are the pods a handover of list's lease may go to: Ready candidates other than the
// holder.
func TargetCompletions(list *StatusList) []cobra.Completion {
	var out []cobra.Completion
	for _, s := range list.Items {
		for _, c := range s.Candidates {
			if c.Ready && c.Pod != s.HolderPod && !slices.Contains(out, c.Pod) {
				out = append(out, c.Pod)
			}
		}
	}
	slices.SortFunc(out, strings.Compare)
	return out
}
