package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// Exit codes of kubectl-leasegate, so that a script tells what went wrong from how it ended.
const (
	// ExitFindings: check found an error (or --wait timed out with one), or the request failed (the API
	// server refused it, a handover was refused).
	ExitFindings = 1
	// ExitUsage: the command line is wrong (an unknown command or flag, a bad argument or -o value) or
	// kubectl's configuration names no usable cluster.
	ExitUsage = 2
	// ExitUnreachable: the API server could not be reached (connection refused, DNS, TLS, timeout).
	ExitUnreachable = 3
)

// usageError is a mistake in the command line or kubeconfig, found by the command itself.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// FindingsError is check's verdict: errors found.
type FindingsError struct{ Errors int }

func (e FindingsError) Error() string { return fmt.Sprintf("%d error(s) found", e.Errors) }

// runError is a failure while a command ran, after cobra accepted its command line: every error cobra
// returns unwrapped is cobra's own judgement of the command line.
type runError struct{ error }

func (e runError) Unwrap() error { return e.error }

// run marks a command's failures as its own, so ExitCode tells them from cobra's usage errors.
func run(f func(cmd *cobra.Command, args []string) error) func(cmd *cobra.Command, args []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := f(cmd, args); err != nil {
			return runError{err}
		}
		return nil
	}
}

// ExitCode is the process's exit code for what Execute returned.
func ExitCode(err error) int {
	var findings FindingsError
	var usage usageError
	var failed runError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &findings):
		return ExitFindings
	case errors.As(err, &usage):
		return ExitUsage
	case !errors.As(err, &failed):
		return ExitUsage
	case unreachable(err):
		return ExitUnreachable
	}
	return ExitFindings
}

// unreachable says whether err is a failure to reach the API server rather than its answer: client-go
// returns a transport's failure as a *url.Error, and an answer (even a refusal) as a StatusError.
func unreachable(err error) bool {
	var urlErr *url.Error
	var netErr net.Error
	var unknownAuthority x509.UnknownAuthorityError
	var verification *tls.CertificateVerificationError
	return errors.As(err, &urlErr) || errors.As(err, &netErr) || errors.As(err, &unknownAuthority) || errors.As(err, &verification)
}

// Main runs kubectl-leasegate with args and returns its exit code, having printed any error.
func Main(streams genericiooptions.IOStreams, args []string) int {
	cmd := NewCommand(streams)
	cmd.SetArgs(args)
	err := cmd.Execute()
	if err != nil {
		fmt.Fprintln(streams.ErrOut, "kubectl leasegate:", err)
	}
	return ExitCode(err)
}
