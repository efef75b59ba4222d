// Package golden compares output with golden files, as Istio's injector tests do: a test's -update flag
// rewrites them from the current output, and a stale file fails with the command that refreshes it.
package golden

import (
	"bytes"
	"os"
	"path/filepath"
)

// T is what Compare needs of a test: testing.TB and Ginkgo's GinkgoT() both are one.
type T interface {
	Helper()
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
}

// Compare fails t unless got is the content of the file at path; with update it writes got there
// instead. refresh is the command that rewrites the golden files, for the failure message.
func Compare(t T, path string, got []byte, update bool, refresh string) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatalf("%v", err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatalf("%v", err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no golden file %s: run %s to create it", path, refresh)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("%s is stale; the output is now:\n%s\nrun %s and review the diff", path, got, refresh)
	}
}
