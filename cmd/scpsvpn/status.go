package main

// `scpsvpn status`: ask a running endpoint for its peers and counters.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
		Description: "Without --config, --interface or --socket, shows every endpoint running in this\n" +
			"network namespace. Endpoints answer root and their own user only. An endpoint in\n" +
			"another namespace is reached with `ip netns exec NS scpsvpn status`, or, when it\n" +
			"runs under systemd, with --socket /run/scpsvpn/INSTANCE/" + tunnel.ControlSocketFile + ".",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "the endpoint's config file (to find its interface)"},
			&cli.StringFlag{Name: "interface", Aliases: []string{"i"}, Usage: "the endpoint's TUN name (instead of --config)"},
			&cli.StringFlag{Name: "socket", Usage: "the endpoint's control socket file (e.g. /run/scpsvpn/scps0/" + tunnel.ControlSocketFile + ")"},
			&cli.BoolFlag{Name: "json", Usage: "print the full status as JSON"},
		},
		Action: func(c *cli.Context) error {
			sts, err := readStatuses(c)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				if len(sts) == 1 {
					return enc.Encode(sts[0])
				}
				return enc.Encode(sts)
			}
			for i, st := range sts {
				if i > 0 {
					fmt.Fprintln(c.App.Writer)
				}
				printStatus(c.App.Writer, st)
			}
			return nil
		},
	}
}

// readStatuses asks the endpoint the flags name, or every endpoint in this
// network namespace.
func readStatuses(c *cli.Context) ([]*tunnel.Status, error) {
	if p := c.String("socket"); p != "" {
		st, err := tunnel.ReadStatusAt(p)
		return []*tunnel.Status{st}, err
	}
	name := c.String("interface")
	if p := c.String("config"); p != "" {
		cfg, err := configs.Load(p)
		if err != nil {
			return nil, err
		}
		name = cfg.Name
	}
	if name != "" {
		st, err := tunnel.ReadStatus(name)
		return []*tunnel.Status{st}, err
	}
	names, err := tunnel.Endpoints()
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, errors.New("status: no endpoint runs in this network namespace (one in another is reached with `ip netns exec NS scpsvpn status` or --socket)")
	}
	var out []*tunnel.Status
	for _, n := range names {
		st, err := tunnel.ReadStatus(n)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

func printStatus(out io.Writer, st *tunnel.Status) {
	fmt.Fprintf(out, "interface %s  listen %s  up %s\npublic key %s\n", st.Interface, st.Listen, st.Uptime, st.PublicKey)
	if c := st.Control; c.Socket != "" && !c.Bound {
		fmt.Fprintf(out, "control socket %s NOT bound: %s\n", c.Socket, c.Error)
	}
	k := st.Counters
	fmt.Fprintf(out, "flows: %d active, %d opened, %d accepted, %d refused; udp: %d in, %d dropped\n\n",
		k.FlowsActive, k.FlowsOpened, k.FlowsAccepted, k.FlowsRefused, k.UDPIn, k.UDPDropped)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
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
	printPaths(out, st)
}

// printPaths lists the paths of each peer that runs several
// (docs/multipath.md).
func printPaths(out io.Writer, st *tunnel.Status) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	header := false
	for _, p := range st.Peers {
		for _, ph := range p.Paths {
			if !header {
				fmt.Fprintln(w, "\nPEER\tPATH\tSTATE\tROLE\tENDPOINT\tSRTT\tLOSS\tSENT\tDATA SENT\tRECEIVED\tPROBES\tDOWNS")
				header = true
			}
			state, role := "down", "primary"
			if ph.Up {
				state = "up"
			}
			if ph.Active {
				state += ",active"
			}
			switch {
			case ph.Backup:
				role = "backup"
			case ph.Learned:
				role = "learned"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%.1f%%\t%d\t%d\t%d\t%d\t%d\n", p.Name, ph.Name, state, role, ph.Endpoint,
				ph.SRTT.Round(time.Millisecond), 100*ph.Loss, ph.BytesSent, ph.DataBytesSent, ph.BytesReceived, ph.ProbesSent, ph.Downs)
		}
	}
	w.Flush()
}
