package main

// `scpsvpn genkey` and `scpsvpn pubkey`, in the manner of `wg genkey | wg pubkey`.

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"scpsvpn/peers"
)

func genkeyCommand() *cli.Command {
	return &cli.Command{
		Name:  "genkey",
		Usage: "print a new private key (base64); store it with mode 0600",
		Action: func(c *cli.Context) error {
			k, err := peers.GeneratePrivateKey()
			if err != nil {
				return err
			}
			fmt.Println(k.String())
			return nil
		},
	}
}

func pubkeyCommand() *cli.Command {
	return &cli.Command{
		Name:  "pubkey",
		Usage: "read a private key on stdin and print its public key",
		Action: func(c *cli.Context) error {
			line, err := bufio.NewReader(os.Stdin).ReadString('\n')
			if err != nil && line == "" {
				return errors.New("pubkey: no key on stdin: use `scpsvpn genkey | scpsvpn pubkey`")
			}
			k, err := peers.ParseKey(strings.TrimSpace(line))
			if err != nil {
				return fmt.Errorf("pubkey: %w", err)
			}
			fmt.Println(k.PublicKey().String())
			return nil
		},
	}
}
