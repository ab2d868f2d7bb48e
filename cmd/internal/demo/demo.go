// Package demo is `scpsvpn demo`: on one machine, two sites over an
// emulated GEO link, the same download once over plain kernel TCP and once
// through scpsvpn, with a live progress bar and a table that compares them.
package demo

// This file owns the command: its flags (the link, defaulting to the
// paper's C2, and the transfer length), the two runs through the bench
// machinery (each on its own fresh testbed, torn down even on Ctrl-C), and
// the closing table.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"scpsvpn/cmd/internal/bench"
	"scpsvpn/cmd/internal/linkemu"
	"scpsvpn/configs"
)

// Options are the parsed flags of `demo`.
type Options struct {
	Link       bench.Condition
	Duration   time.Duration
	Kernel     string // kernel TCP congestion control to compare with
	Congestion string // scpsvpn congestion mode; "" = the endpoint's default
	Seed       uint64
	Verbose    bool
}

// Command returns the `demo` command.
func Command() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "show scpsvpn against plain TCP over an emulated satellite link, on this machine (needs root, about a minute)",
		Description: "Builds two sites (network namespaces) joined by the link emulator, by default the paper's C2:\n" +
			"1.5 Mbit/s each way, RTT 300 ms, 3% loss on the download. Then runs the same download from site B\n" +
			"to site A twice: over kernel TCP (cubic) end to end, and through two scpsvpn endpoints. Prints a\n" +
			"table of goodput, share of the link and time to first byte. Removes everything it built when done\n" +
			"or interrupted.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "rate", Value: "1.5Mbit", Usage: "link rate, both directions"},
			&cli.StringFlag{Name: "down-rate", Usage: "rate of the download direction (site B -> A); overrides --rate"},
			&cli.StringFlag{Name: "up-rate", Usage: "rate of the other direction (A -> B); overrides --rate"},
			&cli.DurationFlag{Name: "rtt", Value: 300 * time.Millisecond, Usage: "round-trip time of the link"},
			&cli.StringFlag{Name: "loss", Value: "3%", Usage: "random packet loss on the download direction, e.g. 3% or 0"},
			&cli.StringFlag{Name: "up-loss", Value: "0", Usage: "random packet loss on the other direction"},
			&cli.DurationFlag{Name: "duration", Value: 20 * time.Second, Usage: "length of each download"},
			&cli.StringFlag{Name: "tcp", Value: "cubic", Usage: "kernel TCP congestion control to compare with"},
			&cli.StringFlag{Name: "congestion", Usage: "scpsvpn congestion control (" + strings.Join(configs.CongestionModes, ", ") + "); default: the endpoint's"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "seed of the loss draws, the same for both runs"},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "log the testbed's and the emulator's steps"},
		},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return fmt.Errorf("demo: %w", err)
		},
		Action: runCommand,
	}
}

// optionsFromFlags parses and checks the flags; errors name the flag.
func optionsFromFlags(c *cli.Context) (Options, error) {
	o := Options{
		Duration: c.Duration("duration"), Kernel: c.String("tcp"), Congestion: c.String("congestion"),
		Seed: c.Uint64("seed"), Verbose: c.Bool("verbose"),
	}
	l := bench.Condition{Name: "demo", Desc: "scpsvpn demo", RTT: c.Duration("rtt")}
	rate := func(flag string) (int64, error) {
		r, err := configs.ParseRate(c.String(flag))
		if err == nil && r <= 0 {
			err = errors.New("the demo needs a limited rate")
		}
		if err != nil {
			return 0, fmt.Errorf("--%s: %w", flag, err)
		}
		return r, nil
	}
	var err error
	if l.Down, err = rate("rate"); err != nil {
		return o, err
	}
	l.Up = l.Down
	if c.IsSet("down-rate") {
		if l.Down, err = rate("down-rate"); err != nil {
			return o, err
		}
	}
	if c.IsSet("up-rate") {
		if l.Up, err = rate("up-rate"); err != nil {
			return o, err
		}
	}
	if l.LossDown, err = linkemu.ParseLoss(c.String("loss")); err != nil {
		return o, fmt.Errorf("--loss: %w", err)
	}
	if l.LossUp, err = linkemu.ParseLoss(c.String("up-loss")); err != nil {
		return o, fmt.Errorf("--up-loss: %w", err)
	}
	if err := l.Validate(); err != nil {
		return o, fmt.Errorf("link: %w", err)
	}
	o.Link = l
	if o.Duration < time.Second || o.Duration > time.Hour {
		return o, fmt.Errorf("--duration %v: use 1s to 1h", o.Duration)
	}
	if _, err := bench.SelectContenders("tcp-" + o.Kernel); err != nil {
		return o, fmt.Errorf("--tcp %q: not a kernel congestion control name", o.Kernel)
	}
	if o.Congestion != "" && !contains(configs.CongestionModes, o.Congestion) {
		return o, fmt.Errorf("--congestion %q: use one of %s", o.Congestion, strings.Join(configs.CongestionModes, ", "))
	}
	return o, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func runCommand(c *cli.Context) error {
	o, err := optionsFromFlags(c)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if err := bench.RequireRoot("scpsvpn demo"); err != nil {
		return err
	}
	binary, err := os.Executable()
	if err != nil {
		return fmt.Errorf("demo: finding the endpoint binary: %w", err)
	}
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()

	out := c.App.Writer
	disp := bench.NewDisplay(c.App.ErrWriter)
	kernel := bench.KernelContender(o.Kernel)
	scps := bench.SCPSContender(o.Congestion)
	fmt.Fprintf(out, "scpsvpn demo: two sites joined by an emulated link: %s.\n", o.Link.Summary())
	fmt.Fprintf(out, "The same %v download from site B to site A, first over %s end to end, then through scpsvpn.\n\n", o.Duration, kernel.Label())
	log := bench.NewLogger(o.Verbose)
	var results []*bench.Result
	for i, ct := range []bench.Contender{kernel, scps} {
		label := fmt.Sprintf("%d/2 %-28s", i+1, ct.Label())
		disp.Update(label, bench.Progress{Duration: o.Duration})
		r := bench.Run(ctx, bench.RunConfig{
			Condition: o.Link, Contender: ct, Duration: o.Duration, Binary: binary, Seed: o.Seed,
			Progress: func(p bench.Progress) { disp.Update(label, p) },
			Logger:   log,
		})
		if ctx.Err() != nil {
			disp.Line(label + " interrupted")
			return cli.Exit("demo: interrupted; everything it built is removed", 130)
		}
		disp.Line(label + " " + bench.RunSummary(r))
		results = append(results, r)
	}
	fmt.Fprintln(out)
	RenderTable(out, o.Link, results[0], results[1])
	for _, r := range results {
		if !r.OK() {
			return fmt.Errorf("demo: the %s run did not measure: %s", r.Label, r.Status)
		}
	}
	return nil
}

// RenderTable prints the closing comparison of a kernel TCP run and an
// scpsvpn run: labels left, numbers right-aligned under their headings.
func RenderTable(w io.Writer, link bench.Condition, kernel, scps *bench.Result) {
	rows := [][]string{{"", "goodput", "share of link", "time to first byte"}}
	for _, r := range []*bench.Result{kernel, scps} {
		if !r.OK() {
			rows = append(rows, []string{r.Label, "failed", "", ""})
			continue
		}
		rows = append(rows, []string{r.Label, fmt.Sprintf("%.1f kB/s", r.GoodputKBps), fmt.Sprintf("%.0f%%", r.Share*100), ttfb(r)})
	}
	if kernel.OK() && scps.OK() {
		tr := "-"
		if kernel.TTFBMs != nil && scps.TTFBMs != nil {
			tr = bench.Ratio(*scps.TTFBMs, *kernel.TTFBMs)
		}
		rows = append(rows, []string{"scpsvpn / kernel TCP", bench.Ratio(scps.GoodputKBps, kernel.GoodputKBps), "", tr})
	}
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, cell := range row {
			widths[i] = max(widths[i], len(cell))
		}
	}
	for _, row := range rows {
		var b strings.Builder
		fmt.Fprintf(&b, "%-*s", widths[0], row[0])
		for i := 1; i < len(row); i++ {
			fmt.Fprintf(&b, "   %*s", widths[i], row[i])
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	fmt.Fprintf(w, "(link payload capacity %.1f kB/s: %s)\n", link.PayloadCapacity()/1000, link.Summary())
}

func ttfb(r *bench.Result) string {
	if r.TTFBMs == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f ms", *r.TTFBMs)
}
