package bench

// This file owns the measures of the transport's targets: the share of
// the payload limit, drop-tail losses of the download direction, the time
// to 90% of the rate, and what a run under an outage saw (did the
// connection survive, how fast did the rate return, what went into the
// dead link), computed from a Transfer's 100 ms samples and the emulator's
// counters; and their own report table, with ratios to kernel cubic and
// bbr.

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"scpsvpn/cmd/internal/linkemu"
)

const (
	// rateWindowMin is the shortest window the rate must hold over to
	// count as reached: in-order delivery after a repaired loss comes in
	// bursts that 100 ms samples would mistake for full rate.
	rateWindowMin = 500 * time.Millisecond
	// rateTarget is the share of the payload limit "the rate" means.
	rateTarget = 0.9
	// recoveryWindow is how long after an outage the recovery is measured.
	recoveryWindow = 5 * time.Second
	// steadyAfterRTTs is when start-up is over for SteadyShare, in round
	// trips after the first byte: slow start and the repair of its first
	// losses (a hole holds in-order delivery for a round trip).
	steadyAfterRTTs = 4
	// fadeBackTarget is the share of the restored rate a fade's end must
	// bring back (the target: 95% within 2 s).
	fadeBackTarget = 0.95
)

// BytesAt interpolates the cumulative byte count at t between the samples
// around it (0 before the first, the last count after the last).
func BytesAt(samples []Sample, t time.Duration) float64 {
	if len(samples) == 0 || t <= samples[0].T {
		if len(samples) > 0 && t == samples[0].T {
			return float64(samples[0].Bytes)
		}
		return 0
	}
	for i := 1; i < len(samples); i++ {
		a, b := samples[i-1], samples[i]
		if t <= b.T {
			if b.T == a.T {
				return float64(b.Bytes)
			}
			f := float64(t-a.T) / float64(b.T-a.T)
			return float64(a.Bytes) + f*float64(b.Bytes-a.Bytes)
		}
	}
	return float64(samples[len(samples)-1].Bytes)
}

// TimeToRate returns the earliest sample time t (since the start of the
// dial) from which the download delivered at least frac of the condition's
// payload limit over the next max(rtt, rateWindowMin); false if it never
// did within the samples. Windows the link is down in count for nothing.
func TimeToRate(samples []Sample, c Condition, rtt time.Duration, frac float64) (time.Duration, bool) {
	return timeToRateFrom(samples, c, rtt, frac, 0)
}

// timeToRateFrom is TimeToRate over the samples from offset from on.
func timeToRateFrom(samples []Sample, c Condition, rtt time.Duration, frac float64, from time.Duration) (time.Duration, bool) {
	w := max(rtt, rateWindowMin)
	if len(samples) == 0 {
		return 0, false
	}
	end := samples[len(samples)-1].T
	for _, s := range samples {
		if s.T < from {
			continue
		}
		if s.T+w > end {
			break
		}
		if c.outageWithin(s.T, s.T+w) {
			continue // a window the link is partly down in says little
		}
		limit := c.PayloadLimit(s.T, s.T+w)
		if limit <= 0 {
			continue
		}
		if BytesAt(samples, s.T+w)-float64(s.Bytes) >= frac*limit {
			return s.T, true
		}
	}
	return 0, false
}

// outageWithin reports whether the condition's outage overlaps [from, to).
func (c Condition) outageWithin(from, to time.Duration) bool {
	w := c.Outage
	return w != (linkemu.Outage{}) && from < w.Start+w.Duration && w.Start < to
}

// QueueDropPct is the download direction's drop-tail losses as a
// percentage of the packets its sender offered the link.
func QueueDropPct(c linkemu.Counters) float64 {
	if c.Ret.InPackets == 0 {
		return 0
	}
	return 100 * float64(c.Ret.DropQueue) / float64(c.Ret.InPackets)
}

// Shifted returns the condition with its timed events moved by d on the
// transfer's clock: a transfer that started d late sees them d earlier.
func (c Condition) Shifted(d time.Duration) Condition {
	if len(c.DownSchedule) > 0 {
		steps := make([]linkemu.RateStep, len(c.DownSchedule))
		for i, s := range c.DownSchedule {
			steps[i] = linkemu.RateStep{At: s.At + d, Rate: s.Rate}
		}
		c.DownSchedule = steps
	}
	if c.Outage != (linkemu.Outage{}) {
		c.Outage.Start += d
	}
	return c
}

// summarizeTransport fills the measures of the transport's targets. late is how
// much after the schedule's origin the transfer started; during holds the
// emulator counters over the outage window (nil if not taken).
func summarizeTransport(r *Result, cond Condition, t *Transfer, delta linkemu.Counters, late time.Duration, during *linkemu.Counters) {
	c := cond.Shifted(-late)
	if cond.Timed() {
		r.StartOffsetMs = ptr(ms(late))
	}
	if limit := c.PayloadLimit(0, t.Window); limit > 0 {
		r.LimitShare = float64(t.Bytes) / limit
	}
	if t.TTFB > 0 {
		from := t.TTFB + steadyAfterRTTs*cond.RTT
		if limit := c.PayloadLimit(from, t.Window); limit > 0 && t.Window-from >= t.Window/2 {
			r.SteadyShare = (float64(t.Bytes) - BytesAt(t.Samples, from)) / limit
		}
	}
	r.QueueDropPct = QueueDropPct(delta)
	if at, ok := TimeToRate(t.Samples, c, cond.RTT, rateTarget); ok {
		r.TimeTo90RTTs = ptr(math.Round(at.Seconds()/cond.RTT.Seconds()*10) / 10)
	}
	if n := len(c.DownSchedule); n >= 2 {
		// A fade: the rate falls at the last step but one and is back at
		// the last.
		down, up := c.DownSchedule[n-2].At, c.DownSchedule[n-1].At
		f := &FadeResult{}
		if from := down + 2*cond.RTT; up <= t.Window && from < up {
			if limit := c.PayloadLimit(from, up); limit > 0 {
				f.HoldShare = (BytesAt(t.Samples, up) - BytesAt(t.Samples, from)) / limit
			}
		}
		if at, ok := timeToRateFrom(t.Samples, c, cond.RTT, fadeBackTarget, up); ok {
			f.BackMs = ptr(ms(at - up))
		}
		r.Fade = f
	}
	if c.Outage == (linkemu.Outage{}) {
		return
	}
	o := &OutageResult{Survived: t.Err == nil && t.Bytes > 0, DropOutage: delta.Ret.DropOutage}
	back := c.Outage.Start + c.Outage.Duration
	if limit := c.PayloadLimit(back, back+recoveryWindow); limit > 0 && back+recoveryWindow <= t.Window {
		o.Recovery = (BytesAt(t.Samples, back+recoveryWindow) - BytesAt(t.Samples, back)) / limit
	}
	if at, ok := timeToRateFrom(t.Samples, c, cond.RTT, rateTarget, back); ok {
		o.BackTo90Ms = ptr(ms(at - back))
	}
	if during != nil {
		o.SentPackets, o.SentBytes = during.Ret.InPackets, during.Ret.InBytes
	}
	r.Outage = o
}

// renderTransport writes the table of the transport's targets: for each
// of its conditions and each contender, the goodput as a share of the payload
// limit, as a multiple of kernel cubic and bbr, the time to 90% of the
// rate, the drop-tail losses, and the outage measures.
func (rep *Report) renderTransport(w io.Writer) {
	rep.renderTargets(w, "Transport targets: wrong or no rates, thin return link, capacity drop, outage", func(c ConditionInfo) bool { return c.TransportTable })
}

// renderAdaptation is renderTransport's table for the links to adapt to
// untold, with the rain fade's measures; the shared-link workloads have
// their own table (renderShare).
func (rep *Report) renderAdaptation(w io.Writer) {
	rep.renderTargets(w, "No configuration, rain fade, LEO", func(c ConditionInfo) bool { return c.AdaptationTable })
}

// renderTargets writes the table of the conditions keep selects.
func (rep *Report) renderTargets(w io.Writer, title string, keep func(ConditionInfo) bool) {
	var conds []ConditionInfo
	outage, fade := false, false
	for _, c := range rep.Conditions {
		if keep(c) {
			conds = append(conds, c)
			outage = outage || c.Outage != ""
			fade = fade || strings.Count(c.DownSchedule, ",") >= 1
		}
	}
	if len(conds) == 0 {
		return
	}
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("## %s\n\n", title)
	p("Percent of the payload limit (rate in force/8 x 1460/1500 x (1 - loss), outage time excluded; the limit column is its mean over the run's window), the same after start-up (from %d round trips after the first byte to the end), goodput as a multiple of kernel TCP cubic and bbr in the same run, "+
		"time from connect() until the download first held 90%% of the limit for a round trip (at least %v), in RTTs, and drop-tail losses of the download direction as %% of its packets.", steadyAfterRTTs, rateWindowMin)
	if outage {
		p(" Outage: whether the download connection survived, the goodput over the %v after the link came back as a share of the limit, how long after the link came back the download first held 90%% of the limit for a round trip (measured at the client, so it includes the wait for a probe and the repair of what the outage swallowed), and the packets (bytes) the sender put into the dead link.", recoveryWindow)
	}
	if fade {
		p(" Fade: the goodput while the link is down to its lower rate (from two round trips after the drop until the rate returns) as a share of that rate's payload limit, and how long after the rate returned the download first held %.0f%% of the restored limit for a round trip (at least %v).", fadeBackTarget*100, rateWindowMin)
	}
	p("\n\n")
	head := "| condition | contender | limit kB/s (window mean) | % of limit | % after start-up | vs cubic | vs bbr | time to 90% (RTTs) | queue drops % |"
	rule := "|---|---|---:|---:|---:|---:|---:|---:|---:|"
	if outage {
		head += " survived | recovery | back to 90% (ms) | sent into outage |"
		rule += "---|---:|---:|---:|"
	}
	if fade {
		head += " % of the faded limit | back to 95% (ms) |"
		rule += "---:|---:|"
	}
	p("%s\n%s\n", head, rule)
	columns := strings.Count(head, "|") - 1
	for _, c := range conds {
		cubic, bbr := rep.result(c.Name, "cubic"), rep.result(c.Name, "bbr")
		for _, ct := range rep.Contenders {
			r := rep.result(c.Name, ct.Name)
			if r == nil || r.Sharing != nil {
				continue
			}
			cells := []string{c.Name, ct.Name, "-", statusWord(r.Status)}
			if r.OK() {
				if r.LimitShare > 0 {
					cells[2] = fmt.Sprintf("%.1f", r.GoodputKBps/r.LimitShare)
				}
				cells[3] = fmt.Sprintf("%.0f%%", r.LimitShare*100)
				steady := "-"
				if r.SteadyShare > 0 {
					steady = fmt.Sprintf("%.0f%%", r.SteadyShare*100)
				}
				cells = append(cells, steady, ratioTo(r, cubic), ratioTo(r, bbr), rttsCell(r.TimeTo90RTTs), fmt.Sprintf("%.2f", r.QueueDropPct))
				if outage {
					cells = append(cells, outageCells(r.Outage)...)
				}
				if fade {
					cells = append(cells, fadeCells(r.Fade)...)
				}
			}
			for len(cells) < columns {
				cells = append(cells, "")
			}
			p("| %s |\n", strings.Join(cells, " | "))
		}
	}
	p("\n")
}

// ratioTo is r's goodput as a multiple of a kernel run's, "-" when that
// run is missing, failed or is r itself.
func ratioTo(r, kernel *Result) string {
	if kernel == nil || !kernel.OK() || kernel == r {
		return "-"
	}
	return Ratio(r.GoodputKBps, kernel.GoodputKBps)
}

func rttsCell(v *float64) string {
	if v == nil {
		return "never"
	}
	return fmt.Sprintf("%.1f", *v)
}

func fadeCells(f *FadeResult) []string {
	if f == nil {
		return []string{"-", "-"}
	}
	back := "never"
	if f.BackMs != nil {
		back = fmt.Sprintf("%.0f", *f.BackMs)
	}
	return []string{fmt.Sprintf("%.0f%%", f.HoldShare*100), back}
}

func outageCells(o *OutageResult) []string {
	if o == nil {
		return []string{"-", "-", "-", "-"}
	}
	survived := "yes"
	if !o.Survived {
		survived = "**no**"
	}
	back := "never"
	if o.BackTo90Ms != nil {
		back = fmt.Sprintf("%.0f", *o.BackTo90Ms)
	}
	return []string{survived, fmt.Sprintf("%.0f%%", o.Recovery*100), back, fmt.Sprintf("%d (%d B)", o.SentPackets, o.SentBytes)}
}
