package inject

import (
	"strconv"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
)

// patch lists the JSON patch operations that turn orig into injected, the result of Inject on it.
//
// Injection only ever adds: a label, an annotation, env variables, a volume, the agent container, and
// the default service account name. So the operations come straight from those fields instead of from
// diffing the two documents, which re-decodes both and walks everything: a pod with thousands of env
// variables then costs little more than its decoding. TestHandlerPatchReproducesInject applies the
// patch and checks the result is exactly Inject's.
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
		ops = addItems(ops, "/spec/containers/"+strconv.Itoa(i)+"/env", orig.Spec.Containers[i].Env, injected.Spec.Containers[i].Env)
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

func add(path string, value any) jsonpatch.Operation {
	return jsonpatch.Operation{Operation: "add", Path: path, Value: value}
}

// pointerEscaper escapes a map key for a JSON pointer (RFC 6901): "~" as "~0", "/" as "~1".
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

func escapePointer(key string) string { return pointerEscaper.Replace(key) }
