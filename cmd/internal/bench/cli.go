package bench

// This file owns the `scpsvpn bench` command: its flags and their checks,
// the loop over conditions x contenders with a progress display, and
// writing the report directory (results.json, plots, report.md), also the
// partial one of an interrupted run.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
)

// Options are the parsed flags of `bench`.
type Options struct {
	Conditions []Condition
	Contenders []Contender
	Duration   time.Duration
	Out        string
	Seed       uint64
	Timeline   string // condition of the goodput-over-time plot
	ProbeEvery time.Duration
	ProbeSize  int
	KeepLogs   bool
	Binary     string // endpoint binary; default this executable
	Verbose    bool
	Workload   string      // WorkloadDownload, WorkloadPage, WorkloadFlows, WorkloadStalled or WorkloadResume
	Page       PageSpec    // the page-load workload's page
	Flows      FlowsSpec   // the many-flows workload's sizes
	Stalled    StalledSpec // the stalled-readers workload's sizes
	Resume     ResumeSpec  // the careful-resume workload's sizes
}

// Command returns the `bench` command.
func Command() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "benchmark scpsvpn against kernel TCP over emulated satellite links and write a report (needs root)",
		Description: "Runs every selected condition x contender on a fresh pair of network namespaces joined by the link\n" +
			"emulator: a download from site B to site A for --duration, timed from connect(), with a small\n" +
			"request/response probe on a second connection while it runs. Writes report.md, results.json and\n" +
			"SVG plots into --out. Conditions: " + strings.Join(ConditionNames(), ", ") + ".\n" +
			"Contenders: " + strings.Join(ContenderNames(), ", ") + " (scpsvpn = the endpoint's default mode).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "conditions", Value: "all", Usage: "comma-separated conditions to run (" + strings.Join(ConditionNames(), ", ") + ", or all; with --workload multipath: " + strings.Join(twoLinkNames(), ", ") + ", all: both)"},
			&cli.StringFlag{Name: "contenders", Value: "all", Usage: "comma-separated contenders: reno, cubic, bbr, tcp-<algorithm>, kernel, scpsvpn-<mode>, scpsvpn, scpsvpn-all, all (these), or the shared-link workloads share-sites, share-cubic, share-bbr, share-all"},
			&cli.DurationFlag{Name: "duration", Value: 20 * time.Second, Usage: "length of each download"},
			&cli.StringFlag{Name: "out", Required: true, Usage: "report directory (created; report.md, results.json and plots are overwritten)"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "seed of the emulator's loss draws (the same for every contender)"},
			&cli.StringFlag{Name: "timeline", Usage: "condition whose goodput over time is plotted (default C2 if selected, else the first)"},
			&cli.DurationFlag{Name: "probe-every", Value: 500 * time.Millisecond, Usage: "interval of the request/response probe during the download"},
			&cli.IntFlag{Name: "probe-size", Value: 100, Usage: "bytes of each probe request and response"},
			&cli.StringFlag{Name: "workload", Value: WorkloadDownload, Usage: "download (a bulk download of --duration with a latency probe), page (a web page over 6 HTTP/1.1 connections and over one HTTP/2 connection, timed to its last byte) flows (many flows through one association: idle connections' memory, opens per second, concurrent small downloads' fairness, and a 1 KB request on a new connection every --probe-every for --duration beside bulk flows and a UDP stream), stalled (a fresh download beside downloads whose clients stopped reading, then a slow reader beside a bulk download for --duration) resume (careful resume: a download of --burst-kb after --idle, after the near endpoint restarted, after the far endpoint restarted with its state_dir, and after the rate fell to a fifth) or multipath (two links at once, scpsvpn only, on GEO+CELL, LEO+GEO and GEO+CELL-BACKUP: a bulk download of half --duration with a --probe-size request every --probe-every beside it, each path's share and the goodput after a start-up allowance against the summed payload limits, then 8 parallel downloads for half --duration (both links primaries), then a download during which the link in use is cut: the time to move on, the SHA-256, how long ping and UDP wait; with a backup, its data bytes while the primary works and the hand-back when it returns)"},
			&cli.IntFlag{Name: "page-objects", Value: DefaultPage.Objects, Usage: "objects of the page after its HTML (--workload page)"},
			&cli.IntFlag{Name: "page-max-kb", Value: DefaultPage.MaxSize / 1000, Usage: "largest object of the page in kB; sizes are drawn from 5 kB up to it with a fixed seed (--workload page)"},
			&cli.IntFlag{Name: "flows", Value: DefaultFlows.Flows, Usage: "concurrent downloads, and bulk flows beside the request probe (--workload flows)"},
			&cli.IntFlag{Name: "flow-kb", Value: DefaultFlows.DownloadBytes / 1000, Usage: "size of each concurrent download in kB (--workload flows)"},
			&cli.IntFlag{Name: "idle-flows", Value: DefaultFlows.Idle, Usage: "idle connections whose memory is measured (--workload flows)"},
			&cli.IntFlag{Name: "opens", Value: DefaultFlows.Opens, Usage: "new connections opened at once to time the open rate (--workload flows)"},
			&cli.IntFlag{Name: "stalled", Value: DefaultStalled.Stalled, Usage: "downloads whose clients stop reading (--workload stalled)"},
			&cli.DurationFlag{Name: "stalled-wait", Value: DefaultStalled.Wait, Usage: "from opening the stalled downloads to the fresh download (--workload stalled)"},
			&cli.IntFlag{Name: "fresh-mb", Value: DefaultStalled.FreshBytes / 1_000_000, Usage: "size of the fresh download beside the stalled ones in MB (--workload stalled)"},
			&cli.IntFlag{Name: "slow-kbps", Value: DefaultStalled.SlowRate / 1000, Usage: "rate the slow client reads at in kB/s (--workload stalled)"},
			&cli.IntFlag{Name: "burst-kb", Value: int(DefaultResume.Bytes / 1000), Usage: "size of each measured download in kB (--workload resume)"},
			&cli.DurationFlag{Name: "warm", Value: time.Duration(DefaultResume.WarmS * float64(time.Second)), Usage: "warm-up download that teaches the path (--workload resume)"},
			&cli.DurationFlag{Name: "idle", Value: time.Duration(DefaultResume.IdleS * float64(time.Second)), Usage: "idle time before the idle-then-burst download (--workload resume)"},
			&cli.BoolFlag{Name: "keep-logs", Usage: "keep the endpoint logs of every scpsvpn run in OUT/logs, and of each scpsvpn download the sending side's timeline every 100 ms (window, rates, RTT, the link's bytes, CPU, repairs and tail copies): OUT/logs/CONDITION_CONTENDER_sender.tsv; of each page load every quarter round trip, with the bytes the client has read: OUT/logs/CONDITION_CONTENDER-PROTOCOL_sender.tsv"},
			&cli.StringFlag{Name: "binary", Usage: "endpoint binary for the scpsvpn runs (default: this executable)"},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "log the testbed's and the emulator's steps"},
		},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return fmt.Errorf("bench: %w", err)
		},
		Action: runCommand,
	}
}

// optionsFromFlags parses and checks the flags; errors name the flag.
func optionsFromFlags(c *cli.Context) (Options, error) {
	o := Options{
		Duration: c.Duration("duration"), Out: c.String("out"), Seed: c.Uint64("seed"),
		ProbeEvery: c.Duration("probe-every"), ProbeSize: c.Int("probe-size"),
		KeepLogs: c.Bool("keep-logs"), Binary: c.String("binary"), Verbose: c.Bool("verbose"),
	}
	var err error
	if o.Conditions, err = SelectConditions(c.String("conditions")); err != nil {
		return o, fmt.Errorf("--conditions: %w", err)
	}
	if o.Contenders, err = SelectContenders(c.String("contenders")); err != nil {
		return o, fmt.Errorf("--contenders: %w", err)
	}
	if o.Duration < time.Second || o.Duration > time.Hour {
		return o, fmt.Errorf("--duration %v: use 1s to 1h", o.Duration)
	}
	if strings.TrimSpace(o.Out) == "" {
		return o, errors.New("--out: give a report directory")
	}
	if o.ProbeEvery < 10*time.Millisecond {
		return o, fmt.Errorf("--probe-every %v: use at least 10ms", o.ProbeEvery)
	}
	if o.ProbeSize < 1 || o.ProbeSize > maxEchoSize {
		return o, fmt.Errorf("--probe-size %d: use 1 to %d bytes", o.ProbeSize, maxEchoSize)
	}
	switch o.Workload = c.String("workload"); o.Workload {
	case WorkloadDownload, WorkloadPage, WorkloadFlows, WorkloadStalled, WorkloadResume, WorkloadMultipath:
	default:
		return o, fmt.Errorf("--workload %q: use %s, %s, %s, %s, %s or %s", o.Workload, WorkloadDownload, WorkloadPage, WorkloadFlows, WorkloadStalled, WorkloadResume, WorkloadMultipath)
	}
	if o.Workload == WorkloadMultipath && c.String("conditions") == "all" {
		o.Conditions = slices.Clone(TwoLinkConditions)
	}
	for _, cd := range o.Conditions {
		if (cd.Second != nil) != (o.Workload == WorkloadMultipath) {
			return o, fmt.Errorf("--conditions %s: the two-link conditions (%s) run with --workload %s, and only they", cd.Name, strings.Join(twoLinkNames(), ", "), WorkloadMultipath)
		}
	}
	o.Resume = ResumeSpec{Bytes: 1000 * int64(c.Int("burst-kb")), WarmS: c.Duration("warm").Seconds(), IdleS: c.Duration("idle").Seconds()}
	if err := o.Resume.check(); err != nil {
		return o, err
	}
	if o.Workload != WorkloadDownload {
		for _, ct := range o.Contenders {
			if ct.Share != "" {
				return o, fmt.Errorf("--contenders %s: a shared-link workload has its own downloads; it does not run --workload %s", ct.Name, o.Workload)
			}
		}
	}
	o.Flows = FlowsSpec{Flows: c.Int("flows"), DownloadBytes: 1000 * c.Int("flow-kb"), Idle: c.Int("idle-flows"), Opens: c.Int("opens")}
	if err := o.Flows.check(); err != nil {
		return o, err
	}
	o.Stalled = StalledSpec{Stalled: c.Int("stalled"), Wait: c.Duration("stalled-wait"), FreshBytes: 1_000_000 * c.Int("fresh-mb"), SlowRate: 1000 * c.Int("slow-kbps")}
	if err := o.Stalled.check(); err != nil {
		return o, err
	}
	if n := c.Int("page-objects"); n < 1 || n > 1000 {
		return o, fmt.Errorf("--page-objects %d: use 1 to 1000", n)
	}
	if kb := c.Int("page-max-kb"); kb < 1 || kb > 100_000 {
		return o, fmt.Errorf("--page-max-kb %d: use 1 to 100000", kb)
	}
	o.Page = NewPageSpec(c.Int("page-objects"), 1000*c.Int("page-max-kb"))
	o.Timeline, err = timelineCondition(c.String("timeline"), o.Conditions)
	if err != nil {
		return o, fmt.Errorf("--timeline: %w", err)
	}
	return o, nil
}

// timelineCondition picks the condition of the timeline plot: the one
// named (it must be selected), else C2, else the first.
func timelineCondition(name string, conds []Condition) (string, error) {
	if name != "" {
		for _, c := range conds {
			if strings.EqualFold(c.Name, name) {
				return c.Name, nil
			}
		}
		return "", fmt.Errorf("condition %q is not among those selected", name)
	}
	for _, c := range conds {
		if c.Name == "C2" {
			return c.Name, nil
		}
	}
	return conds[0].Name, nil
}

// RequireRoot says clearly what is missing for demo and bench to run.
func RequireRoot(what string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%s needs root: it creates network namespaces, TUN devices and runs the endpoints in them; run it with sudo", what)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("%s needs the ip command (iproute2) to run the endpoints in their namespaces: %w", what, err)
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return fmt.Errorf("%s needs TUN devices (/dev/net/tun): %w", what, err)
	}
	return nil
}

// NewLogger logs the testbed's steps to stderr: warnings only, unless
// verbose.
func NewLogger(verbose bool) *slog.Logger {
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

func runCommand(c *cli.Context) error {
	o, err := optionsFromFlags(c)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := RequireRoot("scpsvpn bench"); err != nil {
		return err
	}
	if o.Workload == WorkloadFlows {
		if err := raiseFileLimit(o.Flows.Files()); err != nil {
			return fmt.Errorf("bench: --workload flows: %w", err)
		}
	}
	if o.Binary == "" {
		if o.Binary, err = os.Executable(); err != nil {
			return fmt.Errorf("bench: finding the endpoint binary: %w", err)
		}
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	rep := Bench(ctx, o, NewDisplay(c.App.ErrWriter), os.Args)
	if err := WriteReport(rep, o.Out, o.Timeline); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	fmt.Fprintf(c.App.Writer, "report: %s\n", filepath.Join(o.Out, "report.md"))
	if rep.Interrupted {
		return cli.Exit(fmt.Sprintf("bench: interrupted; the partial report is in %s", o.Out), 130)
	}
	return nil
}

// Bench runs the matrix and returns the report (Interrupted if ctx ended
// it early).
func Bench(ctx context.Context, o Options, d *Display, argv []string) *Report {
	start := time.Now()
	rep := &Report{
		Command: CommandLine(argv), Date: start, Machine: DescribeMachine(),
		DurationS: o.Duration.Seconds(), Seed: o.Seed, Workload: o.Workload,
		Probe: fmt.Sprintf("a %d-byte request answered by %d bytes every %v on a second connection, opened once the download's first byte arrived",
			o.ProbeSize, o.ProbeSize, o.ProbeEvery),
	}
	if o.Workload == WorkloadPage {
		rep.Page, rep.Probe = &o.Page, ""
	}
	if o.Workload == WorkloadFlows {
		rep.Flows, rep.Probe = &o.Flows, ""
	}
	if o.Workload == WorkloadStalled {
		rep.Stalled, rep.Probe = &o.Stalled, ""
	}
	if o.Workload == WorkloadResume {
		rep.Resume, rep.Probe = &o.Resume, ""
	}
	for _, c := range o.Conditions {
		rep.Conditions = append(rep.Conditions, NewConditionInfo(c))
	}
	for _, c := range o.Contenders {
		rep.Contenders = append(rep.Contenders, NewContenderInfo(c))
	}
	total := len(o.Conditions) * len(o.Contenders)
	var est time.Duration
	for _, c := range o.Conditions {
		// Setup and teardown take a few seconds; a timed condition also
		// waits out its schedule's lead.
		per := c.RunDuration(o.Duration) + 4*time.Second
		if c.Timed() {
			per += 10 * time.Second
		}
		if o.Workload == WorkloadStalled {
			per += o.Stalled.Wait + time.Duration(float64(o.Stalled.FreshBytes)/c.PayloadCapacity()*float64(time.Second))
		}
		if o.Workload == WorkloadResume {
			// Two testbeds, two warm-ups, the idle time, three restarts
			// and four downloads.
			per = time.Duration((2*o.Resume.WarmS+o.Resume.IdleS)*float64(time.Second)) + time.Minute
		}
		est += time.Duration(len(o.Contenders)) * per
	}
	if est > 2*time.Minute {
		est = est.Round(time.Minute)
	} else {
		est = est.Round(time.Second)
	}
	what := o.Duration.String()
	if o.Workload == WorkloadPage {
		what = "two page loads"
	}
	if o.Workload == WorkloadFlows {
		what = "the many-flows phases"
	}
	if o.Workload == WorkloadStalled {
		what = "the stalled-readers phases"
	}
	if o.Workload == WorkloadResume {
		what = "the careful-resume downloads"
	}
	d.Line(fmt.Sprintf("bench: %d conditions x %d contenders = %d runs of %s (about %v)", len(o.Conditions), len(o.Contenders), total, what, est))
	log := NewLogger(o.Verbose)
	logDir := ""
	if o.KeepLogs {
		logDir = filepath.Join(o.Out, "logs")
	}
	i := 0
	for _, cond := range o.Conditions {
		for _, ct := range o.Contenders {
			i++
			if ctx.Err() != nil {
				break
			}
			label := fmt.Sprintf("[%*d/%d] %-10s %-15s", len(fmt.Sprint(total)), i, total, cond.Name, ct.Name)
			d.Update(label, Progress{Duration: cond.RunDuration(o.Duration)})
			r := Run(ctx, RunConfig{
				Condition: cond, Contender: ct, Duration: o.Duration, Binary: o.Binary, Seed: o.Seed,
				Probe: true, ProbeEvery: o.ProbeEvery, ProbeSize: o.ProbeSize,
				Progress: func(p Progress) { d.Update(label, p) },
				LogDir:   logDir, Logger: log, Workload: o.Workload, Page: o.Page, Flows: o.Flows, Stalled: o.Stalled, Resume: o.Resume,
			})
			if ctx.Err() != nil {
				d.Line(label + " interrupted")
				break
			}
			rep.Results = append(rep.Results, r)
			d.Line(label + " " + RunSummary(r))
		}
	}
	rep.Interrupted = ctx.Err() != nil
	rep.ElapsedS = time.Since(start).Seconds()
	return rep
}

// RunSummary is one line about a finished run.
func RunSummary(r *Result) string {
	if !r.OK() {
		return r.Status
	}
	if r.Page != nil {
		return pageSummary(r)
	}
	if r.Flows != nil {
		return flowsSummary(r)
	}
	if r.Stalled != nil {
		return stalledSummary(r)
	}
	if r.Resume != nil {
		return resumeSummary(r)
	}
	if r.Multipath != nil {
		return multipathSummary(r)
	}
	s := fmt.Sprintf("%.1f kB/s (%.0f%% of the link, %.0f%% of the payload limit", r.GoodputKBps, r.Share*100, r.LimitShare*100)
	if r.SteadyShare > 0 {
		s += fmt.Sprintf(", %.0f%% after start-up", r.SteadyShare*100)
	}
	s += ")"
	if r.QueueDropPct > 0 {
		s += fmt.Sprintf(", queue drops %.2f%%", r.QueueDropPct)
	}
	if o := r.Outage; o != nil {
		s += fmt.Sprintf(", outage: survived %v, recovery %.0f%%", o.Survived, o.Recovery*100)
	}
	if r.TTFBMs != nil {
		s += fmt.Sprintf(", first byte %.0f ms", *r.TTFBMs)
	}
	if r.Probe != nil && r.Probe.Count > 0 {
		s += fmt.Sprintf(", probe p50 %.0f ms", r.Probe.P50Ms)
	}
	if r.Note != "" {
		s += " (" + r.Note + ")"
	}
	return s
}

// WriteReport writes results.json, the plots and report.md into dir.
// Plots that cannot be drawn (no run measured) are left out and said so in
// the report's JSON; a failure to write a file is an error.
func WriteReport(rep *Report, dir, timeline string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var plotErrs []error
	if len(rep.Results) > 0 && rep.Workload != WorkloadPage && rep.Workload != WorkloadFlows && rep.Workload != WorkloadStalled && rep.Workload != WorkloadResume {
		if err := rep.PlotGoodput(filepath.Join(dir, "goodput.svg")); err != nil {
			plotErrs = append(plotErrs, err)
		} else {
			rep.Plots = append(rep.Plots, "goodput.svg")
		}
		name := "timeline-" + fileSafe(timeline) + ".svg"
		if err := rep.PlotTimeline(timeline, filepath.Join(dir, name)); err != nil {
			plotErrs = append(plotErrs, err)
		} else {
			rep.Plots = append(rep.Plots, name)
		}
		for _, r := range rep.Results {
			if !r.OK() || r.Sharing == nil {
				continue
			}
			name := "share-" + fileSafe(r.Condition) + "-" + fileSafe(r.Contender) + ".svg"
			if err := rep.PlotShare(r, filepath.Join(dir, name)); err != nil {
				plotErrs = append(plotErrs, err)
			} else {
				rep.Plots = append(rep.Plots, name)
			}
		}
	}
	if err := rep.WriteJSON(filepath.Join(dir, "results.json")); err != nil {
		return err
	}
	if err := rep.WriteMarkdown(filepath.Join(dir, "report.md")); err != nil {
		return err
	}
	for _, err := range plotErrs {
		slog.Warn("plot left out", "err", err)
	}
	return nil
}
