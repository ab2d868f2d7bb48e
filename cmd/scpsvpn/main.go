// Command scpsvpn is the scpsvpn endpoint and its tools: run a site (`up`),
// check a config, make keys, and the link emulator, demo and benchmark that
// let a user try it all on one machine.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"scpsvpn/cmd/internal/bench"
	"scpsvpn/cmd/internal/demo"
	"scpsvpn/cmd/internal/linkemu"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args, os.Stderr))
}

// run executes one command line and returns the exit code; errors are one
// line on stderr.
func run(args []string, stderr io.Writer) int {
	app := &cli.App{
		Name:    "scpsvpn",
		Usage:   "split-TCP VPN that makes TCP fast across satellite hops",
		Version: version,
		Commands: []*cli.Command{
			upCommand(),
			configCommand(),
			genkeyCommand(),
			pubkeyCommand(),
			statusCommand(),
			linkemu.Command(),
			demo.Command(),
			bench.Command(),
		},
		HideHelpCommand: true,
		ErrWriter:       stderr,
	}
	if err := app.Run(args); err != nil {
		fmt.Fprintf(stderr, "scpsvpn: %v\n", err)
		return 1
	}
	return 0
}
