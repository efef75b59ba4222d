package main

import (
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/leasegate/leasegate/internal/kubeclient"
)

func TestFailuresCountTheHarnessRunningOutOfFiles(t *testing.T) {
	dial := func(errno syscall.Errno) error {
		return &url.Error{Op: "Get", URL: "https://127.0.0.1:6443/apis", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", errno)}}
	}
	var f failures
	f.add(dial(syscall.EMFILE), "Watching the lease failed; retrying")
	f.add(dial(syscall.ENFILE), "Renewing the lease failed")
	f.add(dial(syscall.ECONNREFUSED), "Renewing the lease failed")
	f.add(errors.New("the watch ended at once without an event"), "Watching the lease failed; retrying")
	if got := f.ownLimit(); got != 2 {
		t.Errorf("ownLimit() = %d, want 2: the EMFILE and ENFILE dials, not the refused one", got)
	}
	if listed := f.take(); !strings.Contains(listed, "1 x Watching the lease failed; retrying: too many open files") {
		t.Errorf("take() = %q: want the failure listed by its cause", listed)
	}
	if got := f.ownLimit(); got != 0 {
		t.Errorf("ownLimit() after take() = %d, want 0: each scenario counts its own", got)
	}
}

func TestFailuresSayWhoRefusedWith403(t *testing.T) {
	forbidden := func(message string) error {
		return &kubeclient.StatusError{Status: kubeclient.Status{Code: http.StatusForbidden, Reason: "Forbidden", Message: message}}
	}
	var f failures
	f.add(forbidden(`leases.coordination.k8s.io "l-1" is forbidden: User "system:serviceaccount:b-1:sa" cannot update resource "leases"`), "Renewing the lease failed")
	f.add(forbidden(`leases.coordination.k8s.io "l-2" is forbidden: User "system:serviceaccount:b-2:sa" cannot update resource "leases"`), "Renewing the lease failed")
	f.add(forbidden(`admission webhook "leases.leasegate.io" denied the request: TakeUnexpired: the lease is held`), "Renewing the lease failed")
	f.add(&kubeclient.StatusError{Status: kubeclient.Status{Code: http.StatusTooManyRequests, Reason: "TooManyRequests", Message: "too many requests"}}, "Renewing the lease failed")
	want := "2 x Renewing the lease failed: 403 Forbidden by the authorizer; " +
		"1 x Renewing the lease failed: 403 Forbidden by admission webhook leases.leasegate.io; " +
		"1 x Renewing the lease failed: 429 TooManyRequests"
	if got := f.take(); got != want {
		t.Errorf("take() = %q\nwant     %q", got, want)
	}
}
