package inject

import (
	"slices"
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
	// A typical pod's patch: the label, the annotation, the service account, the agent, an env per
	// container and the volume.
	ops := make([]jsonpatch.Operation, 0, 6+len(orig.Spec.Containers))
	ops = addEntries(ops, "/metadata/labels", orig.Labels, injected.Labels)
	ops = addEntries(ops, "/metadata/annotations", orig.Annotations, injected.Annotations)
	if orig.Spec.ServiceAccountName != injected.Spec.ServiceAccountName {
		ops = append(ops, add("/spec/serviceAccountName", &injected.Spec.ServiceAccountName))
	}
	if n := len(injected.Spec.InitContainers) - len(orig.Spec.InitContainers); n > 0 {
		// A native sidecar is prepended, so it starts before the existing init containers.
		if len(orig.Spec.InitContainers) == 0 {
			ops = append(ops, add("/spec/initContainers", &injected.Spec.InitContainers))
		} else {
			for i := n - 1; i >= 0; i-- {
				ops = append(ops, add("/spec/initContainers/0", &injected.Spec.InitContainers[i]))
			}
		}
	}
	for i := range orig.Spec.Containers {
		path := containerPath{i}
		before, after := &orig.Spec.Containers[i], &injected.Spec.Containers[i]
		ops = addItems(ops, path.field("env"), before.Env, after.Env)
		ops = replacePorts(ops, path, before.Ports, after.Ports)
		ops = replaceProbe(ops, path, "livenessProbe", before.LivenessProbe, after.LivenessProbe)
		ops = replaceProbe(ops, path, "readinessProbe", before.ReadinessProbe, after.ReadinessProbe)
		ops = replaceProbe(ops, path, "startupProbe", before.StartupProbe, after.StartupProbe)
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
		return append(ops, add(path, &after)) // a pointer, which marshals as the slice, boxes without allocating
	}
	for i := len(before); i < len(after); i++ {
		ops = append(ops, add(path+"/-", &after[i]))
	}
	return ops
}

// containerPath is /spec/containers/<i>, built only for an operation on one of its fields: most
// containers get only env.
type containerPath struct{ i int }

func (c containerPath) field(name string) string {
	return "/spec/containers/" + strconv.Itoa(c.i) + "/" + name
}

// replacePorts is replaceChanged for a container's ports. A ContainerPort is comparable, and empty and
// nil lists are alike (as to equality.Semantic): slices.Equal decides as DeepEqual did, without
// reflection.
func replacePorts(ops []jsonpatch.Operation, path containerPath, before, after []corev1.ContainerPort) []jsonpatch.Operation {
	if slices.Equal(before, after) {
		return ops
	}
	return replaceChanged(ops, path.field("ports"), &before, &after, len(before) > 0, len(after) > 0)
}

// replaceProbe is replaceChanged for one of a container's probes.
func replaceProbe(ops []jsonpatch.Operation, path containerPath, name string, before, after *corev1.Probe) []jsonpatch.Operation {
	if before == nil && after == nil {
		return ops
	}
	return replaceChanged(ops, path.field(name), before, after, before != nil, after != nil)
}

// addEntries adds the entries of after that before lacks, to the map at path or as a new map.
func addEntries(ops []jsonpatch.Operation, path string, before, after map[string]string) []jsonpatch.Operation {
	if len(before) == 0 && len(after) > 0 {
		return append(ops, add(path, after))
	}
	for key, value := range after {
		if old, ok := before[key]; !ok || old != value {
			ops = append(ops, add(entryPath(path, key), value))
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

// entryPath is the JSON pointer (RFC 6901) to the entry key of the map at path: the key escaped, "~" as
// "~0" and "/" as "~1" (a label's or annotation's prefix has one), built in one allocation.
func entryPath(path, key string) string {
	var b strings.Builder
	b.Grow(len(path) + 1 + len(key) + strings.Count(key, "~") + strings.Count(key, "/"))
	b.WriteString(path)
	b.WriteByte('/')
	for i := 0; i < len(key); i++ {
		switch c := key[i]; c {
		case '~':
			b.WriteString("~0")
		case '/':
			b.WriteString("~1")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
