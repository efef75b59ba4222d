// Package relay puts a relay between a client and a server that a spec can cut, as a network partition or
// a server's rotated certificate would: a TCP relay, and one that terminates TLS with a certificate the
// spec chooses.
package relay
