package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/leasegate/leasegate/test/framework/checkout"
)

// flowControlManifests is the chart's API Priority and Fairness objects as it renders them by default:
// leasegate-webhook's FlowSchema, and the priority level and FlowSchema of every service account's lease
// writes.
func flowControlManifests() string {
	return filepath.Join(checkout.RepoRoot(), "config", "webhook", "flowschema.yaml")
}

// The API Priority and Fairness levels the electors' requests go to, whose shedding and queues the
// scenarios report: the chart's level for lease writes (as config/webhook/flowschema.yaml names it; with
// -flow-control=false none go there), and the built-in level of service accounts' other requests.
const (
	leaseWritesLevel = "leasegate-lease-writes"
	readsLevel       = "workload-low"
)

// installFlowControl creates the chart's flow control objects, as a cluster with leasegate installed has
// them: both clients' electors impersonate service accounts, so their lease writes go to the chart's
// priority level and their reads stay in workload-low.
func installFlowControl(ctx context.Context, api kubernetes.Interface) error {
	data, err := os.ReadFile(flowControlManifests())
	if err != nil {
		return err
	}
	flowcontrol := api.FlowcontrolV1()
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return fmt.Errorf("%s: %w", flowControlManifests(), err)
		}
		switch meta.Kind {
		case "PriorityLevelConfiguration":
			level := &flowcontrolv1.PriorityLevelConfiguration{}
			if err := yaml.UnmarshalStrict(doc, level); err != nil {
				return fmt.Errorf("%s: %w", flowControlManifests(), err)
			}
			if level.Name != leaseWritesLevel {
				return fmt.Errorf("%s: priority level %q, where the harness reports on %q", flowControlManifests(), level.Name, leaseWritesLevel)
			}
			_, err = flowcontrol.PriorityLevelConfigurations().Create(ctx, level, metav1.CreateOptions{})
		case "FlowSchema":
			schema := &flowcontrolv1.FlowSchema{}
			if err := yaml.UnmarshalStrict(doc, schema); err != nil {
				return fmt.Errorf("%s: %w", flowControlManifests(), err)
			}
			_, err = flowcontrol.FlowSchemas().Create(ctx, schema, metav1.CreateOptions{})
		case "":
			continue // an empty document (a template that rendered nothing)
		default:
			return fmt.Errorf("%s: a %s, where only flow control objects are expected", flowControlManifests(), meta.Kind)
		}
		if err != nil {
			return fmt.Errorf("installing the chart's flow control: %w", err)
		}
	}
	return nil
}
