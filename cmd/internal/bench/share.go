package bench

// This file owns the shared-link workloads ("sharing one beam"):
// two downloads over the same emulated link at once, the second started
// shareLag after the first. "share-sites" is two sites' associations (the
// testbed's second pair of sites: its own endpoints, subnets and
// association, the same underlay); "share-cubic" and "share-bbr" are one
// association beside a kernel TCP flow crossing the same link outside the
// tunnel, the kernel flow first. Each flow's goodput over the time both
// run, its share of the payload limit, Jain's fairness index, and how long
// the late flow took to reach 90% of an equal share go into the report.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"scpsvpn/cmd/internal/testbed"
)

// Share is a shared-link workload.
type Share string

const (
	// ShareSites is two sites' associations through one bottleneck.
	ShareSites Share = "sites"
	// ShareKernel is one association beside a kernel TCP flow.
	ShareKernel Share = "kernel"
)

// sharePrefix starts the names of the shared-link workloads.
const sharePrefix = "share-"

const (
	// shareLag is how long after the first flow the second starts (a
	// quarter of a shorter run).
	shareLag = 10 * time.Second
	// shareSettle is how long after the second flow's start the shares are
	// measured from (a quarter of a shorter run): its start-up is the
	// late-flow measure's business.
	shareSettle = 10 * time.Second
	// shareMinDuration is the run length of the shared-link conditions: a
	// measuring window of twice the lag and settling time.
	shareMinDuration = 3 * (shareLag + shareSettle)
	// shareReach is the share of an equal split the late flow must reach
	// over shareReachWindow for LateToShareMs.
	shareReach       = 0.9
	shareReachWindow = time.Second
)

// ShareContenders lists the shared-link workloads.
func ShareContenders() []Contender {
	return []Contender{
		{Name: sharePrefix + "sites", Share: ShareSites},
		{Name: sharePrefix + "cubic", Share: ShareKernel, Beside: "cubic"},
		{Name: sharePrefix + "bbr", Share: ShareKernel, Beside: "bbr"},
	}
}

func shareContender(name string) (Contender, bool) {
	for _, c := range ShareContenders() {
		if c.Name == name {
			return c, true
		}
	}
	return Contender{}, false
}

func shareNames() []string {
	var n []string
	for _, c := range ShareContenders() {
		n = append(n, c.Name)
	}
	return n
}

// ShareResult is what a shared-link run measured.
type ShareResult struct {
	// FromS and ToS bound the window the shares are measured over, in
	// seconds since the first flow started.
	FromS float64      `json:"from_s"`
	ToS   float64      `json:"to_s"`
	Flows []FlowResult `json:"flows"`
	// Jain is Jain's fairness index of the flows' goodputs over the
	// window: 1 for equal shares, 1/n when one flow takes everything.
	Jain float64 `json:"jain_index"`
	// Together is the flows' goodput together over the payload limit.
	Together float64 `json:"together_share_of_limit"`
	// LateToShareMs is how long after its start the late flow first held
	// shareReach of an equal share over shareReachWindow; absent if never.
	LateToShareMs *float64 `json:"late_to_share_ms,omitempty"`
}

// FlowResult is one flow of a shared-link run.
type FlowResult struct {
	Name        string  `json:"name"`
	Label       string  `json:"label"`
	StartS      float64 `json:"start_s"` // since the first flow started
	GoodputKBps float64 `json:"goodput_kBps"`
	// LimitShare is the flow's goodput over the window as a share of the
	// link's payload limit (0..1).
	LimitShare float64 `json:"share_of_limit"`
	Timeline   []Point `json:"timeline,omitempty"` // rate per second, times since the first flow started
	Note       string  `json:"note,omitempty"`
}

// shareFlow is one download of a shared-link run.
type shareFlow struct {
	name, label string
	dial        Dialer
	start       time.Duration
	t           *Transfer
}

// runShare measures a shared-link workload; it fills r like run does.
func runShare(ctx context.Context, rc RunConfig, r *Result) (err error) {
	c := rc.Condition
	ct := rc.Contender
	cfg := testbed.Config{
		Kind: testbed.Emulated, Link: c.LinkOptions(rc.Seed), SecondPair: ct.Share == ShareSites,
		Endpoints: testbed.Endpoints{Binary: rc.Binary, LogLevel: "info", Logger: rc.Logger},
	}
	if rc.Binary == "" {
		return errors.New("no endpoint binary")
	}
	if c.Timed() {
		// The flows start at different times; a schedule has one origin.
		return fmt.Errorf("the shared-link workloads run on conditions without a rate schedule or outage; %s has one (use BEAM or BEAM-CLEAN)", c.Name)
	}
	cfg.PeerLinkA, cfg.PeerLinkB = c.PeerLinks("")
	tb, ctx, done, err := runTestbed(ctx, rc, cfg, ct.Name)
	if err != nil {
		return err
	}
	defer done(&err)

	lag, settle := min(shareLag, rc.Duration/4), min(shareSettle, rc.Duration/4)
	var (
		flows   []*shareFlow
		servers []*Server
		cc      ccCheck // the kernel flow's, beside the tunnel
	)
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	srv, dial, err := scpsPathOf(ctx, tb, rc, testbed.A, testbed.B)
	if err != nil {
		return err
	}
	servers = append(servers, srv)
	tunnel := &shareFlow{name: "scpsvpn", label: "scpsvpn (" + DefaultCongestion() + ")", dial: dial}
	switch ct.Share {
	case ShareSites:
		srv2, dial2, err := scpsPathOf(ctx, tb, rc, testbed.A2, testbed.B2)
		if err != nil {
			return err
		}
		servers = append(servers, srv2)
		tunnel.name, tunnel.label = "site 1", "site 1: "+tunnel.label
		flows = []*shareFlow{tunnel, {name: "site 2", label: "site 2: " + tunnel.label[len("site 1: "):], dial: dial2, start: lag}}
	case ShareKernel:
		ksrv, kdial, err := kernelPath(tb, ct.Beside, &cc, rc.Logger)
		if err != nil {
			return err
		}
		servers = append(servers, ksrv)
		tunnel.start = lag
		flows = []*shareFlow{{name: ct.Beside, label: "kernel TCP " + ct.Beside, dial: kdial}, tunnel}
	default:
		return fmt.Errorf("unknown shared-link workload %q", ct.Share)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	emu := tb.Emulator()
	before := emu.Counters()
	var wg sync.WaitGroup
	for _, f := range flows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if f.start > 0 {
				select {
				case <-ctx.Done():
					f.t = &Transfer{Err: ctx.Err()}
					return
				case <-time.After(f.start):
				}
			}
			tc := TransferConfig{Dial: f.dial, Duration: rc.Duration - f.start}
			if f.start == 0 {
				tc.Progress = rc.Progress
			}
			f.t = Measure(ctx, tc)
		}()
	}
	wg.Wait()
	delta := CountersDelta(before, emu.Counters())
	if ctx.Err() != nil {
		return ctx.Err()
	}
	for _, s := range servers {
		if err := s.Err(); err != nil {
			return err
		}
	}
	r.DurationS = rc.Duration.Seconds()
	r.Counters = delta
	r.LinkBytes = LinkBytes(delta)
	r.QueueDropPct = QueueDropPct(delta)
	r.TCPCongestion = cc.String()
	r.Sharing = summarizeShare(c, flows, rc.Duration, settle)
	var empty []string
	for _, f := range flows {
		r.PayloadBytes += f.t.Bytes
		if f.t.Bytes == 0 {
			empty = append(empty, f.name)
		}
	}
	r.GoodputKBps = float64(r.PayloadBytes) / rc.Duration.Seconds() / 1000
	if capacity := c.PayloadCapacity(); capacity > 0 {
		r.Share = r.GoodputKBps * 1000 / capacity
	}
	r.LimitShare = r.Sharing.Together
	if len(empty) > 0 {
		return fmt.Errorf("no payload arrived on %s", strings.Join(empty, ", "))
	}
	r.Status = StatusOK
	return nil
}

// summarizeShare computes the shares of flows over the window both run
// (from settle after the late one started to the end of the run dur).
func summarizeShare(c Condition, flows []*shareFlow, dur, settle time.Duration) *ShareResult {
	var late *shareFlow
	for _, f := range flows {
		if late == nil || f.start > late.start {
			late = f
		}
	}
	from, to := late.start+settle, dur
	limit := c.PayloadLimit(from, to)
	sr := &ShareResult{FromS: from.Seconds(), ToS: to.Seconds()}
	var rates []float64
	for _, f := range flows {
		// Samples count from the flow's own start.
		got := BytesAt(f.t.Samples, to-f.start) - BytesAt(f.t.Samples, from-f.start)
		rate := got / (to - from).Seconds()
		rates = append(rates, rate)
		fr := FlowResult{Name: f.name, Label: f.label, StartS: f.start.Seconds(), GoodputKBps: rate / 1000}
		if limit > 0 {
			fr.LimitShare = got / limit
		}
		for _, p := range f.t.Timeline {
			fr.Timeline = append(fr.Timeline, Point{T: p.T + f.start.Seconds(), Rate: p.Rate})
		}
		if f.t.Err != nil {
			fr.Note = "download ended early: " + oneLine(f.t.Err.Error())
		}
		sr.Flows = append(sr.Flows, fr)
		sr.Together += fr.LimitShare
	}
	sr.Jain = Jain(rates)
	if lim := c.PayloadLimit(late.start, dur); lim > 0 {
		equal := lim / (dur - late.start).Seconds() / float64(len(flows))
		if at, ok := timeToShare(late.t.Samples, equal*shareReach); ok {
			sr.LateToShareMs = ptr(ms(at))
		}
	}
	return sr
}

// timeToShare is the first sample time from which the download delivered
// at least rate bytes/s over the next shareReachWindow.
func timeToShare(samples []Sample, rate float64) (time.Duration, bool) {
	if len(samples) == 0 {
		return 0, false
	}
	end := samples[len(samples)-1].T
	for _, s := range samples {
		if s.T+shareReachWindow > end {
			break
		}
		if BytesAt(samples, s.T+shareReachWindow)-float64(s.Bytes) >= rate*shareReachWindow.Seconds() {
			return s.T, true
		}
	}
	return 0, false
}

// Jain is Jain's fairness index of rates: (sum x)^2 / (n sum x^2); 0 for
// none.
func Jain(rates []float64) float64 {
	var sum, sq float64
	for _, x := range rates {
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(rates)) * sq)
}

// renderShare writes the shared-link table: per run, each flow's share of
// the payload limit over the window both run, together, Jain's index, the
// late flow's time to its share and the queue drops.
func (rep *Report) renderShare(w io.Writer) {
	var runs []*Result
	for _, r := range rep.Results {
		if r.Sharing != nil || strings.HasPrefix(r.Contender, sharePrefix) {
			runs = append(runs, r)
		}
	}
	if len(runs) == 0 {
		return
	}
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("## Sharing one link\n\n")
	p("Two downloads over the same emulated link, the second started %v after the first (a quarter of a shorter run): two sites' associations (share-sites: a second pair of endpoints with its own subnets, association and UDP port in the same namespaces), or one association beside a kernel TCP flow outside the tunnel, the kernel flow first (share-cubic, share-bbr). "+
		"Shares are of the payload limit over the time both run, from %v (or a quarter of the run) after the second flow started to the end; Jain's index of the two goodputs (1 = equal); the late flow's time from its start until it first held %.0f%% of an equal share for %v.\n\n",
		shareLag, shareSettle, shareReach*100, shareReachWindow)
	p("| condition | workload | first flow | second flow | together | Jain | late flow to its share (s) | queue drops %% |\n|---|---|---|---|---:|---:|---:|---:|\n")
	for _, r := range runs {
		if !r.OK() || r.Sharing == nil || len(r.Sharing.Flows) < 2 {
			p("| %s | %s | %s | | | | | |\n", r.Condition, r.Contender, statusWord(r.Status))
			continue
		}
		s := r.Sharing
		cell := func(f FlowResult) string { return fmt.Sprintf("%s %.0f%%", f.Name, f.LimitShare*100) }
		late := "never"
		if s.LateToShareMs != nil {
			late = fmt.Sprintf("%.1f", *s.LateToShareMs/1000)
		}
		p("| %s | %s | %s | %s | %.0f%% | %.3f | %s | %.2f |\n", r.Condition, r.Contender, cell(s.Flows[0]), cell(s.Flows[1]), s.Together*100, s.Jain, late, r.QueueDropPct)
	}
	p("\n")
}
