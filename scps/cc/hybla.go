package cc

// This file owns "hybla": TCP Hybla (Caini and Firrincieli, 2004) for long
// round trips. rho = max(RTT / 25 ms, 1) with RTT the minimum seen; slow
// start adds 2^rho - 1 packets per packet acknowledged and congestion
// avoidance rho^2 / cwnd, so a 600 ms flow opens its window as fast per
// second as a 25 ms one. Congestion losses halve the window as Reno does,
// or what was in flight if that was less (RFC 5681's FlightSize / 2: a
// slow start of 2^rho per packet leaves a window far beyond what the path
// took, which halving alone took many losses to come down from); corruption
// and outage losses leave it alone. Hybla relies on pacing: with
// a configured link rate the pacer holds it to the link; without one its
// slow start overshoots by design.

import (
	"math"
	"time"
)

func init() { Register("hybla", func(p Params) Controller { return NewHybla(p) }) }

const (
	// hyblaRTT0 is Hybla's reference round trip.
	hyblaRTT0 = 25 * time.Millisecond
	// maxRho bounds rho so 2^rho stays a sane number; at rho 20 one
	// acknowledged packet already opens a million.
	maxRho = 20
)

// rhoOf is Hybla's rho for the estimator's RTT (the minimum once sampled,
// the configured initial RTT before).
func rhoOf(rtt *RTTStats) float64 {
	r := rtt.Min()
	if r == 0 {
		r = rtt.Smoothed()
	}
	return min(max(float64(r)/float64(hyblaRTT0), 1), maxRho)
}

// Hybla is the "hybla" controller.
type Hybla struct {
	p             Params
	mss           int
	cwnd          int
	ssthresh      int
	caAcc         float64 // fractional bytes of congestion-avoidance growth
	recoveryStart time.Time
	inRecovery    bool
}

// NewHybla builds a Hybla controller.
func NewHybla(p Params) *Hybla {
	return &Hybla{p: p, mss: p.MaxDatagramSize, cwnd: initialWindow(p.MaxDatagramSize), ssthresh: maxWindow}
}

// Name implements Controller.
func (c *Hybla) Name() string { return "hybla" }

// OnPacketSent implements Controller.
func (c *Hybla) OnPacketSent(time.Time, int, int) {}

// InSlowStart implements Controller.
func (c *Hybla) InSlowStart() bool { return c.cwnd < c.ssthresh }

// Window implements Controller.
func (c *Hybla) Window() int { return c.cwnd }

// Rho is the current rho.
func (c *Hybla) Rho() float64 { return rhoOf(c.p.RTT) }

// OnAck implements Controller.
func (c *Hybla) OnAck(now time.Time, ev AckEvent) {
	if c.inRecovery && !ev.LargestSentAt.After(c.recoveryStart) {
		return
	}
	c.inRecovery = false
	if ev.PriorInFlight*2 < c.cwnd {
		return // application limited: growth would be unfounded
	}
	rho := c.Rho()
	if c.InSlowStart() {
		grow := (math.Exp2(rho) - 1) * float64(ev.AckedBytes)
		c.cwnd = c.clamp(float64(c.cwnd) + grow)
		return
	}
	c.caAcc += rho * rho * float64(c.mss) * float64(ev.AckedBytes) / float64(c.cwnd)
	if c.caAcc >= 1 {
		n := math.Floor(c.caAcc)
		c.caAcc -= n
		c.cwnd = c.clamp(float64(c.cwnd) + n)
	}
}

func (c *Hybla) clamp(w float64) int {
	return int(max(float64(minWindowPackets*c.mss), min(w, float64(windowCap(&c.p)))))
}

// OnCongestionEvent implements Controller.
func (c *Hybla) OnCongestionEvent(now time.Time, ev LossEvent) {
	if ev.Cause != CauseCongestion {
		return
	}
	if ev.Persistent {
		c.cwnd = minWindowPackets * c.mss
		c.ssthresh = c.cwnd
		c.recoveryStart, c.inRecovery = now, true
		return
	}
	if c.inRecovery && !ev.LargestSentAt.After(c.recoveryStart) {
		return
	}
	c.recoveryStart, c.inRecovery = now, true
	// Half of what was in flight when that is less than the window: an
	// untold GEO path's first ACK opened its window to 226 MB, 22 MB of it
	// in flight, and halving the window took ten loss events, each a
	// round trip of 1.2 s (a bonded LEO+GEO download at 57% of the
	// links' limits in virtual time, half its data on the GEO).
	c.cwnd = c.clamp(float64(min(c.cwnd, ev.PriorInFlight) / 2))
	c.ssthresh = c.cwnd
	c.caAcc = 0
}

// PacingRate implements Controller.
func (c *Hybla) PacingRate() float64 { return pacing(c.p.RTT, c.cwnd, c.InSlowStart()) }
