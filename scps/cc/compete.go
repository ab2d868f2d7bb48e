package cc

// This file owns hybrid's competition mode: how it keeps a share of a
// bottleneck beside a loss-based flow (kernel cubic or reno, another site's
// TCP crossing the same beam outside the tunnel). Such a flow fills the
// queue until it overflows; hybrid's delay measure reads that queue as its
// own and cuts to the pipe its shrinking rate fills, round after round,
// down to a few packets (1% of the beam in the simulator).
//
// The difference between a queue of hybrid's own and one of somebody
// else's is what a cut does to it: hybrid's own drains within a few round
// trips of a cut to the pipe; a loss-based flow's stays. After
// competeRounds avoidance rounds in a row with a standing queue
// (standingQueue), hybrid stops answering the delay signal: below half
// the link's rate (fairShare) it grows by a tenth of the window per round,
// as avoidance does with no queue, above it by a packet per round, as
// Reno does; it answers congestion losses only (by hybridLossFactor,
// without the target's floor). Every competeProbeEvery rounds it cuts to
// the pipe for a round: if the queue then drains it was its own (a
// capacity drop, a competitor gone) and delay control resumes.
//
// Simulator, 10/2 Mbit/s 600 ms beam, NewReno starting 5 s later: told,
// hybrid 1.1% and NewReno 97.0% -> 59.5% and 38.5%; not told 11.6% and
// 86.4% -> 61.9% and 36.1% (TestSharesBesideLossBased).

import "time"

const (
	// competeRounds: avoidance rounds in a row with a standing queue
	// before hybrid competes.
	competeRounds = 6
	// competeProbeEvery: in competition, a round in this many cuts to the
	// pipe to see whose the queue is.
	competeProbeEvery = 8
	// standingQueue: a queue of more than standingQueue times what hybrid
	// keeps queued itself (hybridBeta packets at the link's rate), more
	// than 1/standingMinShare of the base RTT and more than
	// standingMinDelay (the hosts' scheduling delay at 100 Mbit/s comes
	// and goes within that) is somebody else's; one below half that has
	// drained.
	standingQueue    = 4
	standingMinShare = 16
	standingMinDelay = 10 * time.Millisecond
)

type compete struct {
	on      bool
	foreign int  // rounds in a row with a standing queue
	round   int  // rounds since competition began
	probing bool // this round's window was cut to the pipe to probe
	before  int  // the window before the probe
}

// competing runs at the end of an avoidance round whose freshest RTT was
// rtt; it reports whether competition decided the window this round.
func (c *Hybrid) competing(now time.Time, rtt time.Duration, in int) bool {
	base := c.p.RTT.Min()
	qd := rtt - base - c.p.RTTNoise
	standing := c.standingQueue()
	m := &c.comp
	if !m.on {
		if qd > standing {
			m.foreign++
		} else {
			m.foreign = 0
		}
		if m.foreign < competeRounds {
			return false
		}
		*m = compete{on: true}
	}
	m.round++
	if m.probing {
		m.probing = false
		if qd < standing/2 {
			*m = compete{} // the queue was hybrid's own
			return false
		}
		c.cwnd = max(c.cwnd, m.before)
	}
	if m.round%competeProbeEvery == 0 {
		m.before, m.probing = c.cwnd, true
		c.decrease(now, float64(min(c.cwnd, c.target(now, in, rtt))))
		return true
	}
	if in*2 >= c.cwnd {
		step := float64(c.mss)
		if c.ackRate < c.fairShare() {
			// Below an equal split of what the link carries: the
			// loss-based flow will not give way by itself, so grow as
			// fast as avoidance does with no queue.
			step = max(step, float64(c.cwnd)/hybridGrowthDivisor)
		}
		c.cwnd = c.clamp(float64(c.cwnd) + step)
	}
	return true
}

// standingQueue is the queueing delay above which a queue that stays is
// not hybrid's own (see standingQueue).
func (c *Hybrid) standingQueue() time.Duration {
	d := max(c.p.RTT.Min()/standingMinShare, standingMinDelay)
	if link := 2 * c.fairShare(); link > 0 {
		d = max(d, time.Duration(standingQueue*hybridBeta*float64(c.mss)/link*float64(time.Second)))
	}
	return d
}

// fairShare is half of the best estimate of the link's rate, bytes/s: the
// configured rate, else the best of the first flight's timing and the
// best round seen.
func (c *Hybrid) fairShare() float64 { return c.linkRate() / 2 }

// linkRate is the best estimate of the link's rate, bytes/s: the
// configured rate, else the best of the first flight's timing and the
// best round seen.
func (c *Hybrid) linkRate() float64 {
	if c.p.SendRate > 0 {
		return float64(c.p.SendRate) / 8
	}
	return max(c.capa.estimate(), c.peakRate)
}

// linkPipe is the window the link's rate fills: linkRate times BaseRTT
// plus the RTT noise.
func (c *Hybrid) linkPipe() float64 {
	return c.linkRate() * (c.p.RTT.Min() + c.p.RTTNoise).Seconds()
}
