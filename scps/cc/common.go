package cc

// This file owns what several controllers share: the window cap that a
// configured link rate implies, and round (one RTT) bookkeeping for the
// delay-based controllers. A round ends when a packet sent after it began
// is acknowledged; each round records its smallest RTT sample, the most
// bytes in flight, the bytes delivered and the bytes per ACK. A ring of
// the latest ACKs gives the freshest queue and delivery-rate measures,
// which react within a fraction of a round trip.

import "time"

// windowCap is the largest window worth having. With a configured link
// rate it is twice the bandwidth-delay product plus the initial window:
// the pacer is the limit beyond that, and a bigger window would only turn
// into a burst or a standing queue when the rate guess is wrong. Without a
// rate it is maxWindow (flow control is then the limit).
func windowCap(p *Params) int {
	if p.SendRate <= 0 {
		return maxWindow
	}
	rtt := max(p.RTT.Smoothed(), p.RTT.Min())
	bdp := float64(p.SendRate) / 8 * rtt.Seconds()
	c := 2*bdp + float64(initialWindow(p.MaxDatagramSize))
	if c > maxWindow {
		return maxWindow
	}
	return int(c)
}

// recentSamples is how many RTT samples rounds keeps for recentMinRTT.
const recentSamples = 32

type rttSample struct {
	at        time.Time
	rtt       time.Duration // 0: the ACK gave no sample
	delivered int64         // bytes acknowledged so far, this ACK included
}

// rounds tracks round trips as seen through ACKs.
type rounds struct {
	recent    [recentSamples]rttSample // ring of the latest ACKs
	nextIdx   int
	nRecent   int
	delivered int64

	start   time.Time // when the current round began (zero: none yet)
	minRTT  time.Duration
	maxIn   int
	bytes   int
	samples int
	acks    int

	// The last completed round.
	lastMinRTT time.Duration
	lastMaxIn  int
	lastRate   float64 // bytes/s delivered in it
	lastBytes  int     // bytes acknowledged in it
	lastBurst  float64 // bytes acknowledged per ACK in it
	count      uint64  // completed rounds
}

// onAck adds ev to the current round and reports whether ev ended it;
// the last* fields then describe the round that ended.
func (r *rounds) onAck(now time.Time, ev AckEvent) bool {
	if r.start.IsZero() {
		r.start = now
	}
	if ev.RTT > 0 {
		if r.samples == 0 || ev.RTT < r.minRTT {
			r.minRTT = ev.RTT
		}
		r.samples++
	}
	r.delivered += int64(ev.AckedBytes)
	r.recent[r.nextIdx] = rttSample{at: now, rtt: ev.RTT, delivered: r.delivered}
	r.nextIdx = (r.nextIdx + 1) % recentSamples
	r.nRecent = min(r.nRecent+1, recentSamples)
	r.maxIn = max(r.maxIn, ev.PriorInFlight)
	r.bytes += ev.AckedBytes
	r.acks++
	if !ev.LargestSentAt.After(r.start) {
		return false
	}
	if d := now.Sub(r.start); d > 0 {
		r.lastRate = float64(r.bytes) / d.Seconds()
	}
	r.lastBurst = float64(r.bytes) / float64(r.acks)
	r.lastBytes = r.bytes
	if r.samples > 0 {
		r.lastMinRTT = r.minRTT
	}
	r.lastMaxIn = r.maxIn
	r.count++
	r.start, r.minRTT, r.maxIn, r.bytes, r.samples, r.acks = now, 0, 0, 0, 0, 0
	return true
}

// burst is the ACK-clocked burst in bytes: an ACK that covers n packets
// frees the window for n new ones at once, and the last of them waits
// behind the others at the bottleneck, so the RTT sample of a thinned ACK
// carries up to a burst of our own making. Vegas thresholds are raised by
// it so that ACK clocking is not read as a queue. Before a round was
// measured it is the bytes of the ACK at hand.
func (r *rounds) burst(ev AckEvent) float64 {
	if r.count == 0 {
		return float64(ev.AckedBytes)
	}
	return r.lastBurst
}

// recentMinRTT is the smallest RTT sample of the ACKs within window
// before now, and of at least the last least samples; 0 when there are
// fewer. The queue a window change makes shows up a round trip later, and a
// capacity drop fills the queue within that round trip, so the controller
// decides on the freshest samples, not on the whole round's minimum, which
// still remembers the queue before the change.
func (r *rounds) recentMinRTT(now time.Time, window time.Duration, least int) time.Duration {
	var m time.Duration
	n := 0
	for i := 0; i < r.nRecent; i++ {
		s := r.recent[(r.nextIdx-1-i+recentSamples)%recentSamples]
		if s.rtt == 0 {
			continue
		}
		if n >= least && now.Sub(s.at) > window {
			break
		}
		if m == 0 || s.rtt < m {
			m = s.rtt
		}
		n++
	}
	if n < least {
		return 0
	}
	return m
}

// recentRate is the delivery rate (bytes/s) over the ACKs within window
// before now; 0 when fewer than least of them are. While our packets queue
// at the bottleneck it is the bottleneck's rate, which is what a window
// must be cut to, measured at once rather than inferred from a round trip
// that is itself inflated by the queue.
func (r *rounds) recentRate(now time.Time, window time.Duration, least int) float64 {
	if r.nRecent == 0 {
		return 0
	}
	last := r.recent[(r.nextIdx-1+recentSamples)%recentSamples]
	first, n := last, 1
	for i := 1; i < r.nRecent; i++ {
		s := r.recent[(r.nextIdx-1-i+recentSamples)%recentSamples]
		if now.Sub(s.at) > window {
			break
		}
		first = s
		n++
	}
	d := last.at.Sub(first.at)
	if n < least || d <= 0 {
		return 0
	}
	// first's own bytes arrived before the interval began.
	return float64(last.delivered-first.delivered) / d.Seconds()
}

// deliveryRate is the bytes acknowledged within window before now over
// that window. Unlike recentRate it does not take a burst of ACKs for a
// rate: the first flight, sent as one burst, is acknowledged within a few
// milliseconds, and what it says of the sender's rate is its bytes over
// the time since it went out. When the ring holds less than window of
// ACKs and is full (a high ACK rate), it is the rate over the ring's span.
func (r *rounds) deliveryRate(now time.Time, window time.Duration) float64 {
	if r.nRecent == 0 || window <= 0 {
		return 0
	}
	last := r.recent[(r.nextIdx-1+recentSamples)%recentSamples]
	for i := 1; i < r.nRecent; i++ {
		s := r.recent[(r.nextIdx-1-i+recentSamples)%recentSamples]
		if now.Sub(s.at) > window {
			return float64(last.delivered-s.delivered) / now.Sub(s.at).Seconds()
		}
	}
	if r.nRecent < recentSamples {
		return float64(last.delivered) / window.Seconds()
	}
	oldest := r.recent[r.nextIdx]
	if d := now.Sub(oldest.at); d > 0 {
		return float64(last.delivered-oldest.delivered) / d.Seconds()
	}
	return 0
}

// currentMinRTT is the smallest sample of the round so far, else of the
// last round, else 0.
func (r *rounds) currentMinRTT() time.Duration {
	if r.samples > 0 {
		return r.minRTT
	}
	return r.lastMinRTT
}

// queued is Vegas' estimate of our bytes sitting in the bottleneck queue:
// inFlight * (rtt - base) / rtt (Little's law: what is in flight beyond
// what the pipe itself holds). Delay up to noise is not counted.
func queued(inFlight int, rtt, base, noise time.Duration) float64 {
	if rtt <= base+noise || base <= 0 {
		return 0
	}
	return float64(inFlight) * float64(rtt-base-noise) / float64(rtt)
}
