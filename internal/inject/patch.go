package inject

import (
	"strconv"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// patch lists the JSON patch operations that turn orig into injected, the result of Inject on it.
//
// Injection adds: a label, an annotation, env variables, a volume, the agent container, and the default
// service account name. The one change it makes to an app container is the mutation gate's: the named
// port moves to the agent, so that container's ports, and its probes that used the port, are replaced.
// So the operations come straight from those fields instead of from diffing the two documents, which
// re-decodes both and walks everything: a pod with thousands of env variables then costs little more
// than its decoding. TestHandlerPatchReproducesInject applies the patch to every golden input and checks
// the result is exactly Inject's.
func patch(orig, injected *corev1.Pod) []jsonpatch.Operation {
	var ops []jsonpatch.Operation
	ops = addEntries(ops, "/metadata/labels", orig.Labels, injected.Labels)
	ops = addEntries(ops, "/metadata/annotations", orig.Annotations, injected.Annotations)
	if orig.Spec.ServiceAccountName != injected.Spec.ServiceAccountName {
		ops = append(ops, add("/spec/serviceAccountName", injected.Spec.ServiceAccountName))
	}
	if n := len(injected.Spec.InitContainers) - len(orig.Spec.InitContainers); n > 0 {
		// A native sidecar is prepended, so it starts before the existing init containers.
		if len(orig.Spec.InitContainers) == 0 {
			ops = append(ops, add("/spec/initContainers", injected.Spec.InitContainers))
		} else {
			for i := n - 1; i >= 0; i-- {
				ops = append(ops, add("/spec/initContainers/0", injected.Spec.InitContainers[i]))
			}
		}
	}
	for i := range orig.Spec.Containers {
		path := "/spec/containers/" + strconv.Itoa(i)
		before, after := &orig.Spec.Containers[i], &injected.Spec.Containers[i]
		ops = addItems(ops, path+"/env", before.Env, after.Env)
		ops = replaceChanged(ops, path+"/ports", before.Ports, after.Ports, len(before.Ports) > 0, len(after.Ports) > 0)
		ops = replaceChanged(ops, path+"/livenessProbe", before.LivenessProbe, after.LivenessProbe, before.LivenessProbe != nil, after.LivenessProbe != nil)
		ops = replaceChanged(ops, path+"/readinessProbe", before.ReadinessProbe, after.ReadinessProbe, before.ReadinessProbe != nil, after.ReadinessProbe != nil)
		ops = replaceChanged(ops, path+"/startupProbe", before.StartupProbe, after.StartupProbe, before.StartupProbe != nil, after.StartupProbe != nil)
	}
	ops = addItems(ops, "/spec/containers", orig.Spec.Containers, injected.Spec.Containers)
	return addItems(ops, "/spec/volumes", orig.Spec.Volumes, injected.Spec.Volumes)
}

// addItems adds the items after is longer than before by, appending to the list at path or creating it.
func addItems[T any](ops []jsonpatch.Operation, path string, before, after []T) []jsonpatch.Operation {
	switch {
	case len(after) == len(before):
		return ops
	case len(before) == 0:
		return append(ops, add(path, after))
	}
	for _, item := range after[len(before):] {
		ops = append(ops, add(path+"/-", item))
	}
	return ops
}

// addEntries adds the entries of after that before lacks, to the map at path or as a new map.
func addEntries(ops []jsonpatch.Operation, path string, before, after map[string]string) []jsonpatch.Operation {
	if len(before) == 0 && len(after) > 0 {
		return append(ops, add(path, after))
	}
	for key, value := range after {
		if old, ok := before[key]; !ok || old != value {
			ops = append(ops, add(path+"/"+escapePointer(key), value))
		}
	}
	return ops
}

// replaceChanged replaces, adds or removes the field at path when injection changed it.
func replaceChanged[T any](ops []jsonpatch.Operation, path string, before, after T, hadBefore, hasAfter bool) []jsonpatch.Operation {
	switch {
	case !hadBefore && !hasAfter, equality.Semantic.DeepEqual(before, after):
		return ops
	case !hasAfter:
		return append(ops, jsonpatch.Operation{Operation: "remove", Path: path})
	case !hadBefore:
		return append(ops, add(path, after))
	}
	return append(ops, jsonpatch.Operation{Operation: "replace", Path: path, Value: after})
}

func add(path string, value any) jsonpatch.Operation {
	return jsonpatch.Operation{Operation: "add", Path: path, Value: value}
}

// pointerEscaper escapes a map key for a JSON pointer (RFC 6901): "~" as "~0", "/" as "~1".
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

func escapePointer(key string) string { return pointerEscaper.Replace(key) }
