// Package guardedwrite is the write the test workloads and controllers make and the fence guards: create
// or update a ConfigMap that names its writer.
package guardedwrite

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ConfigMap creates or updates ConfigMap namespace/name with writer as its data.
func ConfigMap(ctx context.Context, c kubernetes.Interface, namespace, name, writer string) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"writer": writer}}
	_, err := c.CoreV1().ConfigMaps(namespace).Update(ctx, cm, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		_, err = c.CoreV1().ConfigMaps(namespace).Create(ctx, cm, metav1.CreateOptions{})
	}
	return err
}

// Every writes ConfigMap namespace/name every 200 ms until ctx ends, printing each outcome as
// "<label> <name> allowed" or "<label> <name> denied: <message>": the test controllers' workload, which
// the e2e suite reads from their output.
func Every(ctx context.Context, c kubernetes.Interface, namespace, name, writer, label string) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
		if err := ConfigMap(ctx, c, namespace, name, writer); err != nil {
			fmt.Printf("%s %s denied: %v\n", label, name, err)
		} else {
			fmt.Printf("%s %s allowed\n", label, name)
		}
	}
}
