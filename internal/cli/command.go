package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/leasegate/leasegate/internal/version"
)

// NewCommand is kubectl-leasegate: kubectl's own connection flags (--kubeconfig, --context, -n, ...),
// and leasegate's namespace, for its ConfigMap and webhook.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	kube := genericclioptions.NewConfigFlags(true)
	var install installFlags
	root := &cobra.Command{
		Use:   "kubectl-leasegate",
		Short: "See, check and hand over leasegate's elections",
		Long: "kubectl leasegate reports who leads each lease leasegate manages or guards, what a failover would cost, who was fenced, and whether the install is sound; it hands a lease over to another candidate on request.\n\n" +
			"Exit codes: 0 fine, 1 check found an error or the request failed, 2 a usage error (command line or kubeconfig), 3 the API server could not be reached.",
		// kubectl runs the plugin as kubectl-leasegate; its users type kubectl leasegate.
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl leasegate"},
		Version:       version.String(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("kubectl-leasegate {{.Version}}\n")
	kube.AddFlags(root.PersistentFlags())
	root.PersistentFlags().StringVar(&install.namespace, "leasegate-namespace", "leasegate-system", "the namespace leasegate is installed in")
	root.PersistentFlags().StringVar(&install.configName, "config-name", "leasegate-config", "leasegate's ConfigMap")
	root.PersistentFlags().StringVar(&install.webhookConfiguration, "webhook-configuration", "leasegate", "the name of leasegate's Mutating- and ValidatingWebhookConfiguration")
	root.AddCommand(newStatusCommand(kube, &install, streams), newCheckCommand(kube, &install, streams), newHandoverCommand(kube, &install, streams),
		newVersionCommand(streams))
	return root
}

type installFlags struct{ namespace, configName, webhookConfiguration string }

// connect checks -o against the command's formats, builds a clientset from kubectl's flags, and resolves
// the namespace: -n, the kubeconfig context's, or "" for every namespace with -A.
func connect(kube *genericclioptions.ConfigFlags, all bool, output string, outputs []string) (kubernetes.Interface, string, error) {
	if !slices.Contains(outputs, output) {
		return nil, "", usageError{fmt.Errorf("-o %s: use one of %s", output, strings.Join(outputs, ", "))}
	}
	config, err := kube.ToRESTConfig()
	if err != nil {
		return nil, "", usageError{fmt.Errorf("kubeconfig (--kubeconfig, --context, KUBECONFIG): %w", err)}
	}
	cs, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, "", usageError{err}
	}
	if all {
		return cs, "", nil
	}
	ns, _, err := kube.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, "", usageError{fmt.Errorf("kubeconfig: %w", err)}
	}
	return cs, ns, nil
}

func newVersionCommand(streams genericiooptions.IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version: the release, and the revision it was built from (a development build says so)",
		Args:  cobra.NoArgs,
		RunE: run(func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(streams.Out, "kubectl-leasegate", version.String())
			return err
		}),
	}
}

func newStatusCommand(kube *genericclioptions.ConfigFlags, install *installFlags, streams genericiooptions.IOStreams) *cobra.Command {
	var (
		all    bool
		output string
		watch  bool
	)
	cmd := &cobra.Command{
		Use:   "status [LEASE]",
		Short: "One row per lease leasegate manages or guards: holder, state, renewal, ready candidates, agents (-o wide: takeover budget, guards, denials, timing)",
		Example: `  kubectl leasegate status -A
  kubectl leasegate status orders -n shop -o wide
  kubectl leasegate status -n shop --watch
  kubectl leasegate status -A -o json   # shape: apiVersion leasegate.io/v1alpha1, kind LeaseStatusList`,
		Args: cobra.MaximumNArgs(1),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			cs, ns, err := connect(kube, all, output, Outputs)
			if err != nil {
				return err
			}
			opts := StatusOptions{Namespace: ns, LeasegateNamespace: install.namespace, ConfigName: install.configName, Ask: AgentViaProxy(cs)}
			if len(args) == 1 {
				opts.Lease = args[0]
			}
			if watch {
				return watchStatus(cmd.Context(), cs, opts, output, streams, nil)
			}
			opts.Now = time.Now()
			list, err := GatherStatus(cmd.Context(), cs, opts)
			if err != nil {
				return err
			}
			return RenderStatus(streams.Out, list, output)
		}),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return completeLeases(cmd.Context(), kube, install, all, false)
		},
	}
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "every namespace")
	cmd.Flags().StringVarP(&output, "output", "o", OutputTable, "table, wide, json or yaml")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "after the report, print a lease's row again whenever its holder or transitions change (resumed when the API server ends the watch)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(Outputs, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// checkOutputs are the formats check accepts: its table has no wide form.
var checkOutputs = []string{OutputTable, OutputJSON, OutputYAML}

// checkInterval is how long check --wait waits between rounds.
const checkInterval = 2 * time.Second

func newCheckCommand(kube *genericclioptions.ConfigFlags, install *installFlags, streams genericiooptions.IOStreams) *cobra.Command {
	var (
		all     bool
		output  string
		pre     bool
		wait    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check the install and the elections (--pre: the cluster, before installing): each finding with a code, a fix and its docs; exits 1 on errors",
		Example: `  kubectl leasegate check -A
  kubectl leasegate check --pre -A                  # before helm install: server version, native sidecars, cert-manager, what would be refused
  kubectl leasegate check --wait --timeout 5m       # after helm install: until no error is left
  kubectl leasegate check -n shop -o json           # shape: apiVersion leasegate.io/v1alpha1, kind CheckReport`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if !wait && cmd.Flags().Changed("timeout") {
				return usageError{errors.New("--timeout applies to --wait: add --wait, or drop --timeout")}
			}
			cs, ns, err := connect(kube, all, output, checkOutputs)
			if err != nil {
				return err
			}
			opts := CheckOptions{
				LeasegateNamespace: install.namespace, ConfigName: install.configName,
				WebhookConfiguration: install.webhookConfiguration,
			}
			check := func(ctx context.Context) (*CheckReport, error) {
				opts.Now = time.Now()
				if pre {
					return PreCheck(ctx, cs, ns, opts)
				}
				return Check(ctx, cs, ns, opts)
			}
			var report *CheckReport
			if wait {
				report, err = WaitForCheck(cmd.Context(), check, timeout, checkInterval, streams.ErrOut)
			} else {
				report, err = check(cmd.Context())
			}
			if err != nil {
				return err
			}
			if err := RenderCheck(streams.Out, report, output); err != nil {
				return err
			}
			if report.Errors > 0 {
				return FindingsError{Errors: report.Errors}
			}
			return nil
		}),
	}
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "check the elections (with --pre, the pods) of every namespace")
	cmd.Flags().StringVarP(&output, "output", "o", OutputTable, "table, json or yaml")
	cmd.Flags().BoolVar(&pre, "pre", false, "before installing: the server's version against the chart's kubeVersion, native sidecars, cert-manager, and the running pods the webhook would refuse")
	cmd.Flags().BoolVar(&wait, "wait", false, "check again every 2s until no error is found, or --timeout passes (then exit 1 with the last report)")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long --wait waits")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(checkOutputs, cobra.ShellCompDirectiveNoFileComp))
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
		RunE: run(func(cmd *cobra.Command, args []string) error {
			cs, ns, err := connect(kube, false, OutputTable, Outputs)
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
		}),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return completeLeases(cmd.Context(), kube, install, false, true)
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "the pod that should take over (a Ready candidate); default: whichever other candidate is first")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the new holder and print it with the time the handover took")
	cmd.Flags().DurationVar(&waitFor, "timeout", time.Minute, "how long --wait waits")
	_ = cmd.RegisterFlagCompletionFunc("to", func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) == 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return completeTargets(cmd.Context(), kube, install, args[0])
	})
	return cmd
}

// watchStatus prints the report, then a row (a document with -o json|yaml) for each lease whose holder
// or transitions change. Renewals, which are most of the Lease watch's events, change neither and cost
// nothing: only a change is gathered again (and its agents asked). The API server ends every watch after
// a while (--min-request-timeout, or timeoutSeconds when set): the watch resumes from the last
// resourceVersion seen, and when that is too old (410 Gone), from a new list, compared with what was seen.
func watchStatus(ctx context.Context, cs kubernetes.Interface, opts StatusOptions, output string, streams genericiooptions.IOStreams, timeoutSeconds *int64) error {
	leases := cs.CoordinationV1().Leases(opts.Namespace)
	// The list comes first: a change made before the report shows in it, and one made after in the watch.
	list, err := leases.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	opts.Now = time.Now()
	report, err := GatherStatus(ctx, cs, opts)
	if err != nil {
		return err
	}
	if err := RenderStatus(streams.Out, report, output); err != nil {
		return err
	}
	w := &statusWatch{cs: cs, opts: opts, output: output, streams: streams, header: len(report.Items) == 0,
		observed: map[string]string{}, printed: map[string]string{}}
	for i := range list.Items {
		w.observe(&list.Items[i])
	}
	for _, s := range report.Items {
		w.printed[s.Namespace+"/"+s.Name] = change(s.Holder, s.Transitions)
	}
	resourceVersion := list.ResourceVersion
	for ctx.Err() == nil {
		watcher, err := leases.Watch(ctx, metav1.ListOptions{ResourceVersion: resourceVersion, TimeoutSeconds: timeoutSeconds, AllowWatchBookmarks: true})
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return fmt.Errorf("watching leases: %w", err)
		}
		resourceVersion, err = w.follow(ctx, watcher, resourceVersion)
		watcher.Stop()
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			return err
		}
		if resourceVersion != "" {
			continue
		}
		// Too old to resume from: list again and reprint what changed meanwhile.
		if list, err = leases.List(ctx, metav1.ListOptions{}); err != nil {
			if ctx.Err() != nil {
				break
			}
			return err
		}
		changed := false
		for i := range list.Items {
			changed = w.observe(&list.Items[i]) || changed
		}
		if changed {
			if err := w.reprint(ctx); err != nil {
				return err
			}
		}
		resourceVersion = list.ResourceVersion
	}
	return nil
}

// statusWatch is what --watch remembers between events.
type statusWatch struct {
	cs      kubernetes.Interface
	opts    StatusOptions
	output  string
	streams genericiooptions.IOStreams
	// header: the report printed no table header (it found no lease), so the first rows print one.
	header bool
	// observed is what each Lease in scope held when last seen, so that a renewal, or any write to a
	// lease out of the report, gathers nothing; printed is what each row last said.
	observed, printed map[string]string
}

// observe records l and says whether its holder or transitions changed since last seen.
func (w *statusWatch) observe(l *coordinationv1.Lease) bool {
	if w.opts.Lease != "" && l.Name != w.opts.Lease {
		return false
	}
	key, now := l.Namespace+"/"+l.Name, change(ptr.Deref(l.Spec.HolderIdentity, ""), ptr.Deref(l.Spec.LeaseTransitions, 0))
	if seen, known := w.observed[key]; known && seen == now {
		return false
	}
	w.observed[key] = now
	return true
}

// follow handles one watch's events until the server ends it, and returns the resourceVersion to resume
// from: "" when the server says it is too old.
func (w *statusWatch) follow(ctx context.Context, watcher watch.Interface, resourceVersion string) (string, error) {
	for event := range watcher.ResultChan() {
		switch event.Type {
		case watch.Error:
			if status := apierrors.FromObject(event.Object); apierrors.IsResourceExpired(status) || apierrors.IsGone(status) {
				return "", nil
			}
			return resourceVersion, fmt.Errorf("watching leases: %w", apierrors.FromObject(event.Object))
		case watch.Bookmark:
			if l, ok := event.Object.(*coordinationv1.Lease); ok {
				resourceVersion = l.ResourceVersion
			}
			continue
		}
		l, ok := event.Object.(*coordinationv1.Lease)
		if !ok {
			continue
		}
		resourceVersion = l.ResourceVersion
		if event.Type == watch.Deleted || !w.observe(l) {
			continue
		}
		if err := w.reprint(ctx); err != nil {
			return resourceVersion, err
		}
	}
	return resourceVersion, nil
}

// reprint gathers the report again and prints the rows whose holder or transitions changed.
func (w *statusWatch) reprint(ctx context.Context) error {
	w.opts.Now = time.Now()
	list, err := GatherStatus(ctx, w.cs, w.opts)
	if err != nil {
		if ctx.Err() == nil {
			fmt.Fprintln(w.streams.ErrOut, "kubectl leasegate:", err)
		}
		return nil
	}
	changed := &StatusList{APIVersion: list.APIVersion, Kind: list.Kind, ObservedAt: list.ObservedAt}
	for _, s := range list.Items {
		key := s.Namespace + "/" + s.Name
		if now := change(s.Holder, s.Transitions); w.printed[key] != now {
			w.printed[key] = now
			changed.Items = append(changed.Items, s)
		}
	}
	if len(changed.Items) == 0 {
		return nil
	}
	header := w.header
	w.header = false
	return renderStatus(w.streams.Out, changed, w.output, header)
}

// change is what --watch reprints a row for.
func change(holder string, transitions int32) string {
	return fmt.Sprintf("%s|%d", holder, transitions)
}
