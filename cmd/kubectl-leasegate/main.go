// Command kubectl-leasegate is the kubectl plugin (`kubectl leasegate ...` once it is on PATH): it wires
// the process's streams and arguments to internal/cli and exits with its code.
package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/leasegate/leasegate/internal/cli"
)

func main() {
	os.Exit(cli.Main(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}, os.Args[1:]))
}
