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

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// run executes one command line and returns the exit code; errors are one
// line on stderr.
func run(args []string, stdout, stderr io.Writer) int {
	app := &cli.App{
		Name:  "scpsvpn",
		Usage: "split-TCP VPN that makes TCP fast across satellite hops",
		Description: "scpsvpn runs one endpoint at each end of a satellite hop. Each end terminates\n" +
			"the LAN's TCP connections locally and carries their bytes as streams of one\n" +
			"SCPS-TP-style association per peer over UDP (Noise IK, AEAD); the far end\n" +
			"re-originates each connection from the client's own address. Other IP traffic\n" +
			"crosses as datagrams. Configuration: /etc/scpsvpn/NAME.toml (see the README's\n" +
			"config reference); as a service: systemctl enable --now scpsvpn@NAME.",
		Version:              versionString(),
		EnableBashCompletion: true,
		Commands: []*cli.Command{
			upCommand(),
			configCommand(),
			genkeyCommand(),
			pubkeyCommand(),
			statusCommand(),
			linkemu.Command(),
			demo.Command(),
			bench.Command(),
			completionCommand(),
			manCommand(),
		},
		HideHelpCommand: true,
		Writer:          stdout,
		ErrWriter:       stderr,
	}
	if err := app.Run(args); err != nil {
		fmt.Fprintf(stderr, "scpsvpn: %v\n", err)
		return 1
	}
	return 0
}
