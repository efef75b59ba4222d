// Package etcdcluster runs a real etcd cluster of separate processes on loopback with TLS, whose members
// a spec kills, restarts, pauses and partitions: the store the multi-cluster suite's clusters share. It is
// apart because one suite uses it, and it carries the etcd client the others do not need.
package etcdcluster
