package cc

// This file owns "vegas": TCP Vegas (Brakmo and Peterson, as in Linux
// tcp_vegas.c and the SCPS-TP reference implementation). Once per round it
// estimates how many of its packets sit in the bottleneck queue,
// diff = inFlight * (RTT - BaseRTT) / RTT, and adds one packet to the window
// when diff < alpha, removes one when diff > beta, and holds in between.
// Slow start doubles per round and ends as soon as diff exceeds gamma.
// Congestion losses halve the window as Reno does; corruption and outage
// losses leave it alone.

import "time"

func init() { Register("vegas", func(p Params) Controller { return NewVegas(p) }) }

// Vegas thresholds in packets (Linux defaults; the RI used 3, 5, 4).
const (
	vegasAlpha = 2
	vegasBeta  = 4
	vegasGamma = 1
)

// minSlowStartSamples: a slow-start exit on delay needs the smallest of at
// least this many samples of the round (one late ACK is not a queue).
const minSlowStartSamples = 3

// Vegas is the "vegas" controller.
type Vegas struct {
	p             Params
	mss           int
	cwnd          int
	ssthresh      int  // slow start ends here (or earlier, on delay)
	ss            bool // in slow start: the window only moves up, until ssthresh or a queue shows
	r             rounds
	recoveryStart time.Time
	inRecovery    bool
}

// NewVegas builds a Vegas controller.
func NewVegas(p Params) *Vegas {
	return &Vegas{p: p, mss: p.MaxDatagramSize, cwnd: initialWindow(p.MaxDatagramSize), ssthresh: maxWindow, ss: true}
}

// Name implements Controller.
func (c *Vegas) Name() string { return "vegas" }

// OnPacketSent implements Controller.
func (c *Vegas) OnPacketSent(time.Time, int, int) {}

// InSlowStart implements Controller.
func (c *Vegas) InSlowStart() bool { return c.ss }

// Window implements Controller.
func (c *Vegas) Window() int { return c.cwnd }

// Diff is the queue estimate of the last completed round, in packets.
func (c *Vegas) Diff() float64 {
	return queued(c.r.lastMaxIn, c.r.lastMinRTT, c.p.RTT.Min(), c.p.RTTNoise) / float64(c.mss)
}

// OnAck implements Controller.
func (c *Vegas) OnAck(now time.Time, ev AckEvent) {
	ended := c.r.onAck(now, ev)
	if c.inRecovery && !ev.LargestSentAt.After(c.recoveryStart) {
		return
	}
	c.inRecovery = false
	base := c.p.RTT.Min()
	if c.InSlowStart() {
		rtt, in := c.r.minRTT, ev.PriorInFlight
		if ended {
			rtt, in = c.r.lastMinRTT, c.r.lastMaxIn
		} else if c.r.samples < minSlowStartSamples {
			rtt = 0
		}
		if rtt > 0 && queued(in, rtt, base, c.p.RTTNoise) > vegasGamma*float64(c.mss)+c.r.burst(ev) {
			// The queue is growing: leave slow start at the window the
			// pipe holds (Linux: min(cwnd, target + 1)).
			target := int(float64(in)*float64(base)/float64(rtt)) + c.mss
			c.cwnd = c.clamp(min(c.cwnd, target))
			c.ss = false
			return
		}
		if ev.PriorInFlight*2 >= c.cwnd {
			c.cwnd = c.clamp(c.cwnd + ev.AckedBytes)
			c.ss = c.ssthresh == maxWindow || c.cwnd < c.ssthresh
		}
		return
	}
	if !ended || c.r.lastMinRTT == 0 {
		return
	}
	diff := (queued(c.r.lastMaxIn, c.r.lastMinRTT, base, c.p.RTTNoise) - c.r.lastBurst) / float64(c.mss)
	switch {
	case diff < vegasAlpha:
		if c.r.lastMaxIn*2 >= c.cwnd { // not application limited
			c.cwnd = c.clamp(c.cwnd + c.mss)
		}
	case diff > vegasBeta:
		c.cwnd = c.clamp(c.cwnd - c.mss)
	}
}

func (c *Vegas) clamp(w int) int {
	return max(minWindowPackets*c.mss, min(w, windowCap(&c.p)))
}

// OnCongestionEvent implements Controller: Reno's halving once per round
// trip for congestion; nothing for corruption or outage.
func (c *Vegas) OnCongestionEvent(now time.Time, ev LossEvent) {
	if ev.Cause != CauseCongestion {
		return
	}
	if ev.Persistent {
		// The path may have changed: start over, slow start up to half
		// the old window.
		c.ssthresh = max(c.cwnd/2, minWindowPackets*c.mss)
		c.cwnd, c.ss = minWindowPackets*c.mss, true
		c.recoveryStart, c.inRecovery = now, true
		return
	}
	if c.inRecovery && !ev.LargestSentAt.After(c.recoveryStart) {
		return
	}
	c.recoveryStart, c.inRecovery = now, true
	c.cwnd = c.clamp(c.cwnd / 2)
	c.ss = false
}

// PacingRate implements Controller: twice the window per RTT in slow
// start, 1.25 times in congestion avoidance.
func (c *Vegas) PacingRate() float64 { return pacing(c.p.RTT, c.cwnd, c.InSlowStart()) }

// pacing is the pacing rate of a window-based controller: the window per
// smoothed RTT times 2 in slow start and 1.25 otherwise (RFC 9002 7.7), so
// the pacer smooths bursts without being the bottleneck.
func pacing(rtt *RTTStats, cwnd int, slowStart bool) float64 {
	srtt := rtt.Smoothed()
	if srtt <= 0 {
		return 0
	}
	gain := 1.25
	if slowStart {
		gain = 2
	}
	return gain * float64(cwnd) / srtt.Seconds()
}
