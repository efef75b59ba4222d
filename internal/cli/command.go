package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// NewCommand is kubectl-leasegate: kubectl's own connection flags (--kubeconfig, --context, -n, ...),
// and leasegate's namespace, for its ConfigMap and webhook.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	kube := genericclioptions.NewConfigFlags(true)
	var install installFlags
	root := &cobra.Command{
		Use:           "kubectl-leasegate",
		Short:         "See, check and hand over leasegate's elections",
		Long:          "kubectl leasegate reports who leads each lease leasegate manages or guards, what a failover would cost, who was fenced, and whether the install is sound; it hands a lease over to another candidate on request.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	kube.AddFlags(root.PersistentFlags())
	root.PersistentFlags().StringVar(&install.namespace, "leasegate-namespace", "leasegate-system", "the namespace leasegate is installed in")
	root.PersistentFlags().StringVar(&install.configName, "config-name", "leasegate-config", "leasegate's ConfigMap")
	root.PersistentFlags().StringVar(&install.webhookConfiguration, "webhook-configuration", "leasegate", "the name of leasegate's Mutating- and ValidatingWebhookConfiguration")
	root.AddCommand(newStatusCommand(kube, &install, streams), newCheckCommand(kube, &install, streams), newHandoverCommand(kube, &install, streams))
	return root
}

type installFlags struct{ namespace, configName, webhookConfiguration string }

// connect checks -o, builds a clientset from kubectl's flags, and resolves the namespace: -n, the
// kubeconfig context's, or "" for every namespace with -A.
func connect(kube *genericclioptions.ConfigFlags, all bool, output string) (kubernetes.Interface, string, error) {
	if !slices.Contains(Outputs, output) {
		return nil, "", fmt.Errorf("-o %s: use one of %v", output, Outputs)
	}
	config, err := kube.ToRESTConfig()
	if err != nil {
		return nil, "", err
	}
	cs, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, "", err
	}
	if all {
		return cs, "", nil
	}
	ns, _, err := kube.ToRawKubeConfigLoader().Namespace()
	return cs, ns, err
}

func newStatusCommand(kube *genericclioptions.ConfigFlags, install *installFlags, streams genericiooptions.IOStreams) *cobra.Command {
	var (
		all    bool
		output string
		watch  bool
	)
	cmd := &cobra.Command{
		Use:   "status [LEASE]",
		Short: "One row per lease leasegate manages or guards: holder, renewal, takeover budget, candidates, agents, guards, denials",
		Example: `  kubectl leasegate status -A
  kubectl leasegate status orders -n shop -o wide
  kubectl leasegate status -n shop --watch
  kubectl leasegate status -A -o json   # shape: apiVersion leasegate.io/v1alpha1, kind LeaseStatusList`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cs, ns, err := connect(kube, all, output)
			if err != nil {
				return err
			}
			opts := StatusOptions{Namespace: ns, LeasegateNamespace: install.namespace, ConfigName: install.configName, Ask: AgentViaProxy(cs)}
			if len(args) == 1 {
				opts.Lease = args[0]
			}
			if watch {
				return watchStatus(cmd.Context(), cs, opts, output, streams)
			}
			opts.Now = time.Now()
			list, err := GatherStatus(cmd.Context(), cs, opts)
			if err != nil {
				return err
			}
			return RenderStatus(streams.Out, list, output)
		},
	}
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "every namespace")
	cmd.Flags().StringVarP(&output, "output", "o", OutputTable, "table, wide, json or yaml")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "after the report, print a lease's row again whenever its holder or transitions change")
	return cmd
}

func newCheckCommand(kube *genericclioptions.ConfigFlags, install *installFlags, streams genericiooptions.IOStreams) *cobra.Command {
	var (
		all    bool
		output string
	)
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check the install and the elections: each finding with a code and a one-line fix; exits 1 on errors",
		Example: `  kubectl leasegate check -A
  kubectl leasegate check -n shop -o json   # shape: apiVersion leasegate.io/v1alpha1, kind CheckReport`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cs, ns, err := connect(kube, all, output)
			if err != nil {
				return err
			}
			report, err := Check(cmd.Context(), cs, ns, CheckOptions{
				LeasegateNamespace: install.namespace, ConfigName: install.configName,
				WebhookConfiguration: install.webhookConfiguration, Now: time.Now(),
			})
			if err != nil {
				return err
			}
			if err := RenderCheck(streams.Out, report, output); err != nil {
				return err
			}
			if report.Errors > 0 {
				return fmt.Errorf("%d error(s) found", report.Errors)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "check the elections of every namespace")
	cmd.Flags().StringVarP(&output, "output", "o", OutputTable, "table, json or yaml")
	return cmd
}

func newHandoverCommand(kube *genericclioptions.ConfigFlags, install *installFlags, streams genericiooptions.IOStreams) *cobra.Command {
	var (
		to      string
		wait    bool
		waitFor time.Duration
	)
	cmd := &cobra.Command{
		Use:   "handover LEASE",
		Short: "Ask a lease's holder to step down for a Ready candidate (planned maintenance); --wait prints the new holder and the time it took",
		Example: `  kubectl leasegate handover orders -n shop --wait
  kubectl leasegate handover orders -n shop --to orders-7d9c-x2x4q --wait`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cs, ns, err := connect(kube, false, OutputTable)
			if err != nil {
				return err
			}
			opts := HandoverOptions{
				Namespace: ns, Lease: args[0], To: to,
				LeasegateNamespace: install.namespace, ConfigName: install.configName,
			}
			if wait {
				opts.Wait = waitFor
			}
			_, err = Handover(cmd.Context(), cs, opts, streams.Out)
			return err
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "the pod that should take over (a Ready candidate); default: whichever other candidate is first")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the new holder and print it with the time the handover took")
	cmd.Flags().DurationVar(&waitFor, "timeout", time.Minute, "how long --wait waits")
	return cmd
}

// watchStatus prints the report, then a row (a document with -o json|yaml) for each lease whose holder
// or transitions change. Renewals, which are most of the Lease watch's events, change neither and cost
// nothing: only a change is gathered again (and its agents asked).
func watchStatus(ctx context.Context, cs kubernetes.Interface, opts StatusOptions, output string, streams genericiooptions.IOStreams) error {
	// observed is what each Lease in scope held when last seen, so that a renewal, or any write to a
	// lease out of the report, gathers nothing; printed is what each row last said. The list comes first:
	// a change made before the report shows in it, and one made after in the watch.
	leases, err := cs.CoordinationV1().Leases(opts.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	opts.Now = time.Now()
	list, err := GatherStatus(ctx, cs, opts)
	if err != nil {
		return err
	}
	if err := RenderStatus(streams.Out, list, output); err != nil {
		return err
	}
	observed, printed := map[string]string{}, map[string]string{}
	for _, l := range leases.Items {
		observed[l.Namespace+"/"+l.Name] = change(ptr.Deref(l.Spec.HolderIdentity, ""), ptr.Deref(l.Spec.LeaseTransitions, 0))
	}
	for _, s := range list.Items {
		printed[s.Namespace+"/"+s.Name] = change(s.Holder, s.Transitions)
	}
	w, err := cs.CoordinationV1().Leases(opts.Namespace).Watch(ctx, metav1.ListOptions{ResourceVersion: leases.ResourceVersion})
	if err != nil {
		return err
	}
	defer w.Stop()
	for event := range w.ResultChan() {
		l, ok := event.Object.(*coordinationv1.Lease)
		if !ok || (opts.Lease != "" && l.Name != opts.Lease) {
			continue
		}
		key, now := l.Namespace+"/"+l.Name, change(ptr.Deref(l.Spec.HolderIdentity, ""), ptr.Deref(l.Spec.LeaseTransitions, 0))
		if seen, known := observed[key]; known && seen == now {
			continue
		}
		observed[key] = now
		opts.Now = time.Now()
		list, err := GatherStatus(ctx, cs, opts)
		if err != nil {
			fmt.Fprintln(streams.ErrOut, "kubectl-leasegate:", err)
			continue
		}
		changed := &StatusList{APIVersion: list.APIVersion, Kind: list.Kind, ObservedAt: list.ObservedAt}
		for _, s := range list.Items {
			key := s.Namespace + "/" + s.Name
			if now := change(s.Holder, s.Transitions); printed[key] != now {
				printed[key] = now
				changed.Items = append(changed.Items, s)
			}
		}
		if len(changed.Items) == 0 {
			continue
		}
		if err := renderStatus(streams.Out, changed, output, false); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return errors.New("the Lease watch ended; run the command again")
}

// change is what --watch reprints a row for.
func change(holder string, transitions int32) string {
	return fmt.Sprintf("%s|%d", holder, transitions)
}
