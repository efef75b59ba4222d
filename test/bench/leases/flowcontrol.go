package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/leasegate/leasegate/test/framework/checkout"
)

// largeClusterValues turn on what a cluster with thousands of leases sets: the priority level and
// FlowSchema of every service account's lease writes (flowControl.agentLeaseWrites).
func largeClusterValues() string {
	return filepath.Join(checkout.RepoRoot(), "test", "chart", "testdata", "values", "large-clusters.yaml")
}

// flowControlManifests renders the chart's API Priority and Fairness objects as a large cluster installs
// them: leasegate-webhook's FlowSchema, and the priority level and FlowSchema of every service account's
// lease writes.
func flowControlManifests() ([]byte, error) {
	tools, err := checkout.FindTools()
	if err != nil {
		return nil, err
	}
	return tools.RunHelm("template", "leasegate", checkout.ChartDir(), "--namespace", "leasegate-system", "--kube-version", tools.KubeVersion,
		"--values", largeClusterValues(), "--show-only", "templates/flowschema.yaml")
}

// The API Priority and Fairness levels the electors' requests go to, whose shedding and queues the
// scenarios report: the chart's level for lease writes (as the chart names it; with -flow-control=false
// none go there), and the built-in level of service accounts' other requests.
const (
	leaseWritesLevel = "leasegate-lease-writes"
	readsLevel       = "workload-low"
)

// installFlowControl creates the chart's flow control objects, as a cluster with leasegate installed has
// them: both clients' electors impersonate service accounts, so their lease writes go to the chart's
// priority level and their reads stay in workload-low.
func installFlowControl(ctx context.Context, api kubernetes.Interface) error {
	data, err := flowControlManifests()
	if err != nil {
		return fmt.Errorf("rendering the chart's flow control with %s: %w", largeClusterValues(), err)
	}
	flowcontrol := api.FlowcontrolV1()
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return fmt.Errorf("%s: %w", largeClusterValues(), err)
		}
		switch meta.Kind {
		case "PriorityLevelConfiguration":
			level := &flowcontrolv1.PriorityLevelConfiguration{}
			if err := yaml.UnmarshalStrict(doc, level); err != nil {
				return fmt.Errorf("%s: %w", largeClusterValues(), err)
			}
			if level.Name != leaseWritesLevel {
				return fmt.Errorf("%s: priority level %q, where the harness reports on %q", largeClusterValues(), level.Name, leaseWritesLevel)
			}
			_, err = flowcontrol.PriorityLevelConfigurations().Create(ctx, level, metav1.CreateOptions{})
		case "FlowSchema":
			schema := &flowcontrolv1.FlowSchema{}
			if err := yaml.UnmarshalStrict(doc, schema); err != nil {
				return fmt.Errorf("%s: %w", largeClusterValues(), err)
			}
			_, err = flowcontrol.FlowSchemas().Create(ctx, schema, metav1.CreateOptions{})
		case "":
			continue // an empty document (a template that rendered nothing)
		default:
			return fmt.Errorf("%s: a %s, where only flow control objects are expected", largeClusterValues(), meta.Kind)
		}
		if err != nil {
			return fmt.Errorf("installing the chart's flow control: %w", err)
		}
	}
	return nil
}
