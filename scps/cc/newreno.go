package cc

// This file owns "vj": Van Jacobson congestion control as NewReno (RFC 9002
// section 7): slow start doubling per RTT by counting acknowledged bytes,
// additive increase of one packet per window in congestion avoidance, one
// halving per round trip of losses, and the minimum window after persistent
// congestion. Corruption and outage losses leave the window alone. With a
// configured link rate the window stops at twice the bandwidth-delay
// product (the pacer is the limit beyond it).

import "time"

func init() { Register("vj", func(p Params) Controller { return NewNewReno(p) }) }

const (
	initialWindowPackets = 10
	minWindowPackets     = 2
	// maxWindow bounds the window so arithmetic cannot overflow and a
	// runaway window cannot be built while flow control is the real limit.
	maxWindow = 1 << 30
)

// NewReno is the "vj" controller.
type NewReno struct {
	p             Params
	mss           int
	rtt           *RTTStats
	cwnd          int
	ssthresh      int
	ackedInCA     int       // bytes acknowledged toward the next +1 MSS
	recoveryStart time.Time // losses of packets sent before this are part of the same event
	inRecovery    bool
}

// NewNewReno builds a NewReno controller.
func NewNewReno(p Params) *NewReno {
	return &NewReno{
		p:        p,
		mss:      p.MaxDatagramSize,
		rtt:      p.RTT,
		cwnd:     initialWindow(p.MaxDatagramSize),
		ssthresh: maxWindow,
	}
}

func initialWindow(mss int) int {
	return min(initialWindowPackets*mss, max(2*mss, 14720))
}

// Name implements Controller.
func (c *NewReno) Name() string { return "vj" }

// OnPacketSent implements Controller.
func (c *NewReno) OnPacketSent(time.Time, int, int) {}

// InSlowStart implements Controller.
func (c *NewReno) InSlowStart() bool { return c.cwnd < c.ssthresh }

// Window implements Controller.
func (c *NewReno) Window() int { return c.cwnd }

// OnAck implements Controller.
func (c *NewReno) OnAck(now time.Time, ev AckEvent) {
	if c.inRecovery && !ev.LargestSentAt.After(c.recoveryStart) {
		return // acks of packets sent before the reduction do not grow the window
	}
	c.inRecovery = false
	// Do not grow a window the sender is not using (app-limited): growth
	// would be unfounded and turn into a burst later.
	if ev.PriorInFlight*2 < c.cwnd {
		return
	}
	limit := windowCap(&c.p)
	if c.InSlowStart() {
		c.cwnd = max(c.cwnd, min(c.cwnd+ev.AckedBytes, limit))
		return
	}
	c.ackedInCA += ev.AckedBytes
	for c.ackedInCA >= c.cwnd {
		c.ackedInCA -= c.cwnd
		c.cwnd = max(c.cwnd, min(c.cwnd+c.mss, limit))
	}
}

// OnCongestionEvent implements Controller.
func (c *NewReno) OnCongestionEvent(now time.Time, ev LossEvent) {
	if ev.Cause != CauseCongestion {
		return
	}
	if ev.Persistent {
		c.cwnd = minWindowPackets * c.mss
		c.ssthresh = max(c.ssthresh/2, c.cwnd)
		c.recoveryStart, c.inRecovery = now, true
		c.ackedInCA = 0
		return
	}
	if c.inRecovery && !ev.LargestSentAt.After(c.recoveryStart) {
		return // one reduction per round trip
	}
	c.recoveryStart, c.inRecovery = now, true
	c.ssthresh = max(c.cwnd/2, minWindowPackets*c.mss)
	c.cwnd = c.ssthresh
	c.ackedInCA = 0
}

// PacingRate implements Controller: twice the window per RTT in slow start
// (the window doubles within the round trip), 1.25 times in congestion
// avoidance (RFC 9002 7.7), so pacing smooths bursts without being the
// bottleneck.
func (c *NewReno) PacingRate() float64 {
	srtt := c.rtt.Smoothed()
	if srtt <= 0 {
		return 0
	}
	gain := 1.25
	if c.InSlowStart() {
		gain = 2
	}
	return gain * float64(c.cwnd) / srtt.Seconds()
}
