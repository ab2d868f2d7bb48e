package scps

// This file owns cubicModel, a CUBIC sender (RFC 9438: the window a cubic
// function of the time since the last reduction, 0.7 of it kept at a
// loss, never below what Reno would have) for the shared-bottleneck
// harness only: kernel cubic beside a tunnel on one beam.
// NewReno grows by one packet per 600 ms round trip and never presses a
// competitor; cubic grows by time and does.

import (
	"math"
	"time"

	"scpsvpn/scps/cc"
)

const (
	cubicC    = 0.4 // packets per second cubed
	cubicBeta = 0.7
	// cubicModelName registers it; the measured modes leave it out.
	cubicModelName = "cubic-model"
)

func init() {
	cc.Register(cubicModelName, func(p cc.Params) cc.Controller {
		return &cubicModel{p: p, mss: p.MaxDatagramSize, cwnd: 10 * float64(p.MaxDatagramSize), ssthresh: math.Inf(1)}
	})
}

type cubicModel struct {
	p             cc.Params
	mss           int
	cwnd          float64 // bytes
	ssthresh      float64
	wMax          float64 // packets, at the last reduction
	k             float64 // seconds from the reduction to wMax
	epoch         time.Time
	wEst          float64 // Reno-friendly window, packets
	recoveryStart time.Time
	inRecovery    bool
}

func (c *cubicModel) Name() string                     { return cubicModelName }
func (c *cubicModel) OnPacketSent(time.Time, int, int) {}
func (c *cubicModel) Window() int                      { return int(c.cwnd) }
func (c *cubicModel) InSlowStart() bool                { return c.cwnd < c.ssthresh }

func (c *cubicModel) OnAck(now time.Time, ev cc.AckEvent) {
	if c.inRecovery && !ev.LargestSentAt.After(c.recoveryStart) {
		return
	}
	c.inRecovery = false
	if float64(ev.PriorInFlight)*2 < c.cwnd {
		return
	}
	if c.InSlowStart() {
		c.cwnd += float64(ev.AckedBytes)
		return
	}
	mss := float64(c.mss)
	rtt := max(c.p.RTT.Smoothed(), time.Millisecond).Seconds()
	t := now.Sub(c.epoch).Seconds()
	target := cubicC*math.Pow(t+rtt-c.k, 3) + c.wMax
	c.wEst += 3 * (1 - cubicBeta) / (1 + cubicBeta) * float64(ev.AckedBytes) / c.cwnd
	w := c.cwnd / mss
	if target > w {
		w += min(target-w, w/2) / w * float64(ev.AckedBytes) / mss
	}
	c.cwnd = max(w, c.wEst) * mss
}

func (c *cubicModel) OnCongestionEvent(now time.Time, ev cc.LossEvent) {
	if ev.Cause != cc.CauseCongestion {
		return
	}
	if c.inRecovery && !ev.LargestSentAt.After(c.recoveryStart) {
		return
	}
	c.recoveryStart, c.inRecovery = now, true
	w := c.cwnd / float64(c.mss)
	if w < c.wMax {
		c.wMax = w * (1 + cubicBeta) / 2 // fast convergence
	} else {
		c.wMax = w
	}
	c.cwnd = max(c.cwnd*cubicBeta, 2*float64(c.mss))
	c.ssthresh = c.cwnd
	c.wEst = c.cwnd / float64(c.mss)
	c.k = math.Cbrt(c.wMax * (1 - cubicBeta) / cubicC)
	c.epoch = now
}

func (c *cubicModel) PacingRate() float64 {
	srtt := c.p.RTT.Smoothed()
	if srtt <= 0 {
		return 0
	}
	gain := 1.25
	if c.InSlowStart() {
		gain = 2
	}
	return gain * c.cwnd / srtt.Seconds()
}
