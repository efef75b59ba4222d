package main

import (
	"errors"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
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
