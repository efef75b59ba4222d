package lease

// identitySeparator joins pod name and UID in an agent identity. client-go's own examples and
// controller-runtime join hostname and a random UUID with the same character, so one parser reads both.
const identitySeparator = "_"

// Identity returns the holder identity an agent writes into a Lease: "<pod name>_<pod UID>". The UID part
// makes a recreated pod with the same name (a StatefulSet replica) a different holder from its predecessor.
func Identity(podName, podUID string) string {
	return podName + identitySeparator + podUID
}
