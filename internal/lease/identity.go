package lease

import "strings"

// identitySeparator joins pod name and UID in an agent identity. client-go's own examples and
// controller-runtime join hostname and a random UUID with the same character, so one parser reads both.
const identitySeparator = "_"

// Identity returns the holder identity an agent writes into a Lease: "<pod name>_<pod UID>". The UID part
// makes a recreated pod with the same name (a StatefulSet replica) a different holder from its predecessor.
func Identity(podName, podUID string) string {
	return podName + identitySeparator + podUID
}

// ParseIdentity splits an identity written in the agent's or client-go's format, "<pod or host>_<rest>",
// into the pod (or host) name and the rest (a pod UID, or client-go's random UUID); ok is false for any
// other holder. Pod names never contain the separator, so the first one ends the name.
func ParseIdentity(holder string) (pod, rest string, ok bool) {
	pod, rest, ok = strings.Cut(holder, identitySeparator)
	return pod, rest, ok && pod != "" && rest != ""
}
