// Package load is what the measurement programs share to drive a control plane: the counts a flag asks
// for, and work spread over parallel workers.
package load
