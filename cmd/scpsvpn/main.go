// Command scpsvpn is the scpsvpn endpoint and its tools: run a site (`up`),
// check a config, make keys, and the link emulator, demo and benchmark that
// let a user try it all on one machine.
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"scpsvpn/cmd/internal/linkemu"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
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
		},
		HideHelpCommand: true,
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintf(os.Stderr, "scpsvpn: %v\n", err)
		os.Exit(1)
	}
}
