package cc

// This file owns RTTStats, the one round-trip-time estimator of an
// association (RFC 9002 section 5). Loss detection reads it for its time
// threshold and probe timeout; congestion controllers read it for pacing and
// (later) delay-based decisions, so all of them see the same numbers.

import "time"

// TimerGranularity is the smallest timer the estimator assumes.
const TimerGranularity = time.Millisecond

// RTTStats tracks latest, smoothed and minimum RTT and the RTT variation.
type RTTStats struct {
	initial  time.Duration
	latest   time.Duration
	adjusted time.Duration // latest less the ACK delay, never below min
	smoothed time.Duration
	rttvar   time.Duration
	min      time.Duration
	samples  uint64
}

// NewRTTStats returns an estimator that reports initial until the first
// sample arrives.
func NewRTTStats(initial time.Duration) *RTTStats {
	r := &RTTStats{initial: initial}
	r.Reset()
	return r
}

// Reset forgets every sample.
func (r *RTTStats) Reset() {
	r.latest, r.adjusted, r.smoothed, r.rttvar, r.min, r.samples = 0, 0, r.initial, r.initial/2, 0, 0
}

// Update adds a sample. ackDelay is the peer's reported delay, capped by the
// caller; it is subtracted, but never below min RTT.
func (r *RTTStats) Update(sample, ackDelay time.Duration) {
	if sample <= 0 {
		sample = time.Microsecond
	}
	r.latest = sample
	if r.samples == 0 || sample < r.min {
		r.min = sample
	}
	r.samples++
	// RFC 9002 keeps the whole sample when subtracting the ACK delay would
	// go below the minimum; we clamp to the minimum instead. Timing jitter
	// of a few microseconds would otherwise leave a full 25 ms ACK delay
	// in the sample, which delay-based decisions read as a queue. The
	// peer is authenticated and reports its delay honestly.
	adjusted := max(sample-ackDelay, r.min)
	r.adjusted = adjusted
	if r.samples == 1 {
		r.smoothed = sample
		r.rttvar = sample / 2
		return
	}
	d := r.smoothed - adjusted
	if d < 0 {
		d = -d
	}
	r.rttvar = (3*r.rttvar + d) / 4
	r.smoothed = (7*r.smoothed + adjusted) / 8
}

// Smoothed is the smoothed RTT (the initial RTT before any sample).
func (r *RTTStats) Smoothed() time.Duration { return r.smoothed }

// Var is the RTT variation.
func (r *RTTStats) Var() time.Duration { return r.rttvar }

// Min is the smallest sample seen (0 before any sample).
func (r *RTTStats) Min() time.Duration { return r.min }

// Latest is the most recent sample (0 before any sample).
func (r *RTTStats) Latest() time.Duration { return r.latest }

// Adjusted is the most recent sample less the peer's ACK delay (never
// below Min): the path's round trip including queueing but not the peer's
// deliberate wait. 0 before any sample.
func (r *RTTStats) Adjusted() time.Duration { return r.adjusted }

// Samples is the number of samples taken.
func (r *RTTStats) Samples() uint64 { return r.samples }

// PTO is the probe timeout before backoff: srtt + max(4 rttvar,
// granularity) + maxAckDelay, never below floor.
func (r *RTTStats) PTO(maxAckDelay, floor time.Duration) time.Duration {
	pto := r.smoothed + max(4*r.rttvar, TimerGranularity) + maxAckDelay
	return max(pto, floor)
}

// LossDelay is the RACK time threshold: 9/8 of max(srtt, latest), at least
// the timer granularity.
func (r *RTTStats) LossDelay() time.Duration {
	d := max(r.smoothed, r.latest)
	return max(d+d/8, TimerGranularity)
}
