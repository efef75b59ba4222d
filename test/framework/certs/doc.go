// Package certs makes the CAs and certificates the suites serve and present: a CA that signs serving
// certificates (a cluster CA before and after a rotation), a client certificate and the admission
// configuration with which kube-apiserver presents it to webhooks, and the template the etcd harness
// signs its members' certificates from.
package certs
