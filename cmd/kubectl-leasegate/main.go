// Command kubectl-leasegate is the kubectl plugin (`kubectl leasegate ...` once it is on PATH): it wires
// the process's streams to internal/cli.
package main

import (
	"fmt"
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/leasegate/leasegate/internal/cli"
)

func main() {
	cmd := cli.NewCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "kubectl-leasegate:", err)
		os.Exit(1)
	}
}
