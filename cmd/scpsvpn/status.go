package main

// `scpsvpn status`: ask a running endpoint for its peers and counters.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"scpsvpn/configs"
	"scpsvpn/tunnel"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show a running endpoint's peers, associations and counters",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "the endpoint's config file (to find its interface)"},
			&cli.StringFlag{Name: "interface", Aliases: []string{"i"}, Usage: "the endpoint's TUN name (instead of --config)"},
			&cli.BoolFlag{Name: "json", Usage: "print the full status as JSON"},
		},
		Action: func(c *cli.Context) error {
			name := c.String("interface")
			if p := c.String("config"); p != "" {
				cfg, err := configs.Load(p)
				if err != nil {
					return err
				}
				name = cfg.Name
			}
			if name == "" {
				return errors.New("status: give --config FILE or --interface NAME")
			}
			st, err := tunnel.ReadStatus(name)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			printStatus(st)
			return nil
		},
	}
}

func printStatus(st *tunnel.Status) {
	fmt.Printf("interface %s  listen %s  up %s\npublic key %s\n", st.Interface, st.Listen, st.Uptime, st.PublicKey)
	k := st.Counters
	fmt.Printf("flows: %d active, %d opened, %d accepted, %d refused; udp: %d in, %d dropped\n\n",
		k.FlowsActive, k.FlowsOpened, k.FlowsAccepted, k.FlowsRefused, k.UDPIn, k.UDPDropped)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PEER\tSTATE\tENDPOINT\tHANDSHAKE\tSRTT\tCWND\tSENT\tRECEIVED\tRETRANSMITS\tSTREAMS")
	for _, p := range st.Peers {
		state := "down"
		if p.Up {
			state = "up"
		}
		hs := "never"
		if !p.LastHandshake.IsZero() {
			hs = time.Since(p.LastHandshake).Round(time.Second).String() + " ago"
		}
		a := p.Association
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n", p.Name, state, p.Endpoint, hs,
			a.SRTT.Round(time.Millisecond), a.Cwnd, a.StreamBytesSent, a.StreamBytesReceived, a.Retransmits, a.StreamsOpen)
	}
	w.Flush()
}
