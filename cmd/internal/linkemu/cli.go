package linkemu

// This file owns the `linkemu` command: its flags (human units, one setting
// for both directions plus --fwd-*/--ret-* overrides), their translation into
// Options with errors that name the flag, and the run until SIGINT/SIGTERM
// with the counters printed on exit.

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"scpsvpn/configs"
)

// dirFlags are the per-direction settings: each exists as --X (both
// directions), --fwd-X (A->B) and --ret-X (B->A).
var dirFlags = []struct{ name, usage string }{
	{"rate", "link rate of whole IP packets, e.g. 1.5Mbit, 64kbit, 10Gbit (0 = unlimited)"},
	{"delay", "one-way delay, e.g. 300ms"},
	{"loss", "random loss per packet, e.g. 3% or 0.03"},
	{"ber", "bit-error rate; a packet of n bytes is lost with 1-(1-ber)^(8n), e.g. 1e-6"},
	{"burst", "Gilbert-Elliott burst loss: " + BurstSyntax},
	{"reorder", "reordering as SHARE:DELAY: that share of the packets arrives DELAY later than the others, which overtake it, e.g. 1%:20ms"},
	{"queue", "drop-tail queue of bytes waiting for serialization (the modem buffer), e.g. 256KiB (default: one bandwidth-delay product, at least 64KiB)"},
	{"rate-schedule", "rate changes since start, e.g. 0s:50Mbit,5s:10Mbit"},
}

// Command returns the `linkemu` command.
func Command() *cli.Command {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "ns-a", Usage: "network namespace of side A (name under /var/run/netns or a path; empty = current)"},
		&cli.StringFlag{Name: "ns-b", Usage: "network namespace of side B"},
		&cli.StringFlag{Name: "dev-a", Value: "emu-a", Usage: "TUN device name on side A (<= 15 bytes)"},
		&cli.StringFlag{Name: "dev-b", Value: "emu-b", Usage: "TUN device name on side B"},
		&cli.StringSliceFlag{Name: "addr-a", Usage: "address with prefix for the TUN of side A, e.g. 10.200.0.1/24 (repeatable)"},
		&cli.StringSliceFlag{Name: "addr-b", Usage: "address with prefix for the TUN of side B, e.g. 10.200.0.2/24 (repeatable)"},
		&cli.IntFlag{Name: "mtu", Value: DefaultMTU, Usage: "MTU of both TUN devices"},
	}
	for _, f := range dirFlags {
		flags = append(flags,
			&cli.StringFlag{Name: f.name, Usage: f.usage + "; both directions"},
			&cli.StringFlag{Name: "fwd-" + f.name, Usage: "like --" + f.name + ", forward direction (A->B) only"},
			&cli.StringFlag{Name: "ret-" + f.name, Usage: "like --" + f.name + ", return direction (B->A) only"},
		)
	}
	flags = append(flags,
		&cli.StringSliceFlag{Name: "outage", Usage: "outage of both directions as start:duration since start, e.g. 20s:10s (repeatable)"},
		&cli.StringFlag{Name: "outage-every", Usage: "periodic outage as interval:duration, e.g. 15s:50ms (first one after one interval)"},
		&cli.Uint64Flag{Name: "seed", Usage: "seed of the loss draws, for reproducible losses (0 = random, printed at start)"},
	)
	return &cli.Command{
		Name:  "linkemu",
		Usage: "emulate a satellite link (rate, delay, loss, queue, outages) between two TUN devices in two network namespaces",
		Description: "Creates one TUN device in each namespace, assigns the addresses and forwards IP packets between them\n" +
			"through a packet scheduler. Runs until SIGINT or SIGTERM, then prints per-direction counters and removes the devices.",
		Flags: flags,
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return fmt.Errorf("linkemu: %w", err)
		},
		Action: runCommand,
	}
}

func runCommand(c *cli.Context) error {
	opts, err := optionsFromFlags(c)
	if err != nil {
		return err
	}
	opts.Logger = slog.Default()
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	e, err := New(opts)
	if err != nil {
		return err
	}
	e.Start()
	w := c.App.Writer
	fmt.Fprintf(w, "linkemu: %s (%s) <-> %s (%s), seed %d; Ctrl-C to stop\n",
		opts.DevA, nsName(opts.NSA), opts.DevB, nsName(opts.NSB), e.Seed())
	<-ctx.Done()
	counters, err := e.Stop()
	counters.Format(w)
	if err != nil {
		return fmt.Errorf("linkemu: %w", err)
	}
	return nil
}

func nsName(ns string) string {
	if ns == "" {
		return "current namespace"
	}
	return "namespace " + ns
}

// optionsFromFlags builds Options; every error names its flag.
func optionsFromFlags(c *cli.Context) (Options, error) {
	o := Options{
		NSA: c.String("ns-a"), NSB: c.String("ns-b"),
		DevA: c.String("dev-a"), DevB: c.String("dev-b"),
		MTU:  c.Int("mtu"),
		Seed: c.Uint64("seed"),
	}
	var err error
	if o.AddrA, err = prefixes(c, "addr-a"); err != nil {
		return o, err
	}
	if o.AddrB, err = prefixes(c, "addr-b"); err != nil {
		return o, err
	}
	for _, d := range []struct {
		prefix string
		dir    *Dir
	}{{"fwd-", &o.Fwd}, {"ret-", &o.Ret}} {
		if err := dirFromFlags(c, d.prefix, d.dir, o.mtu()); err != nil {
			return o, err
		}
	}
	for _, s := range c.StringSlice("outage") {
		w, err := ParseOutage(s)
		if err != nil {
			return o, fmt.Errorf("--outage: %w", err)
		}
		o.Outages = append(o.Outages, w)
	}
	if s := c.String("outage-every"); s != "" {
		if o.OutageEvery, err = ParsePeriodic(s); err != nil {
			return o, fmt.Errorf("--outage-every: %w", err)
		}
	}
	if err := o.Validate(); err != nil {
		return o, fmt.Errorf("linkemu: %w", err) // names the setting after its flag
	}
	return o, nil
}

// dirFromFlags fills one direction: --<prefix>X wins over --X.
func dirFromFlags(c *cli.Context, prefix string, d *Dir, mtu int) error {
	for _, f := range dirFlags {
		name := prefix + f.name
		if !c.IsSet(name) {
			name = f.name
			if !c.IsSet(name) {
				continue
			}
		}
		v := c.String(name)
		var err error
		switch f.name {
		case "rate":
			d.Rate, err = configs.ParseRate(v)
		case "delay":
			d.Delay, err = time.ParseDuration(strings.TrimSpace(v))
			if err == nil && d.Delay < 0 {
				err = errors.New("delay must not be negative")
			}
		case "loss":
			d.Loss, err = ParseLoss(v)
		case "ber":
			d.BER, err = ParseBER(v)
		case "burst":
			var ge GilbertElliott
			if ge, err = ParseBurst(v); err == nil {
				d.Burst = &ge
			}
		case "reorder":
			d.Reorder, err = ParseReorder(v)
		case "queue":
			d.Queue, err = configs.ParseSize(v)
			if err == nil && d.Queue < int64(mtu) {
				err = fmt.Errorf("%d bytes is smaller than one packet (mtu %d)", d.Queue, mtu)
			}
		case "rate-schedule":
			d.RateSchedule, err = ParseRateSchedule(v)
		}
		if err != nil {
			return fmt.Errorf("--%s: %w", name, err)
		}
	}
	return nil
}

func prefixes(c *cli.Context, name string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range c.StringSlice(name) {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("--%s: %q is not an address with a prefix length, e.g. 10.200.0.1/24", name, s)
		}
		out = append(out, p)
	}
	return out, nil
}
