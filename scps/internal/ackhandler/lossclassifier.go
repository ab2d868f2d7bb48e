package ackhandler

// This file owns lossClassifier, the loss-cause decision (Config.Loss).
// LossCongestion and LossCorruption are fixed answers; LossAuto reads the
// delay signal: a bottleneck queue that overflows has grown first, so a
// loss is congestion when the round trips measured around the lost
// packet's time exceed the minimum by more than a few packets' worth of
// queue, and corruption (a bit error, a modem's FEC giving up) when they
// do not. A delay-based
// controller keeps its own standing queue at 2-4 packets, below the
// threshold, so its random losses stay corruption; a drop-tail queue that
// overflows is at least the threshold deep, so its losses are congestion.

import (
	"time"

	"scpsvpn/scps/cc"
)

const (
	// congestionQueuePackets is the queue, in packets at the delivery
	// rate, above which a loss counts as congestion.
	congestionQueuePackets = 6
	// congestionQueueFraction: ... or above this fraction of the minimum
	// RTT (so RTT noise on fast links is not taken for a queue).
	congestionQueueFraction = 8
	// queueSamples is how many recent queue-delay samples are kept.
	queueSamples = 32
	// minQueueSamples is how many samples a loss is judged on at least.
	minQueueSamples = 3
)

// LossMode says what a lost packet means to congestion control.
type LossMode uint8

const (
	LossAuto       LossMode = iota // the delay signal decides
	LossCongestion                 // every loss is congestion
	LossCorruption                 // no loss is
)

type queueSample struct {
	at, queue time.Duration
}

// lossClassifier keeps the recent queue-delay samples and a delivery-rate
// estimate, and decides the cause of each batch of losses.
type lossClassifier struct {
	mode    LossMode
	noise   time.Duration // RTT variation without a queue (Config.RTTNoise)
	samples [queueSamples]queueSample
	next    int
	n       int

	rate       float64 // bytes/s acknowledged over the last rate window
	rateStart  time.Duration
	rateBytes  int
	lastQueue  time.Duration // queue delay of the latest sample
	lastJudged time.Duration // queue delay the last loss was judged on
}

// onAck records newly acknowledged bytes and, with sample > 0, the
// queue delay sample-minRTT.
func (l *lossClassifier) onAck(now time.Duration, acked int, sample, minRTT, srtt time.Duration) {
	if sample > 0 {
		q := max(sample-minRTT, 0)
		l.samples[l.next] = queueSample{at: now, queue: q}
		l.next = (l.next + 1) % queueSamples
		l.n = min(l.n+1, queueSamples)
		l.lastQueue = q
	}
	if l.rateStart == 0 {
		l.rateStart = now
	}
	l.rateBytes += acked
	if span := now - l.rateStart; span >= max(srtt, 10*time.Millisecond) {
		l.rate = float64(l.rateBytes) / span.Seconds()
		l.rateStart, l.rateBytes = now, 0
	}
}

// recentQueue is the smallest queue delay sampled within window before
// now (over at least minQueueSamples samples), or the latest sample when
// none is that recent. The smallest, not the largest: a bottleneck queue
// that overflows is full for every packet that passes it around the drop,
// while the hosts' processing delay (scheduling, socket queues) spikes
// single samples by milliseconds, and a loss judged on the largest sample
// would be taken for congestion whenever a spike fell near it.
func (l *lossClassifier) recentQueue(now, window time.Duration) time.Duration {
	if l.n == 0 {
		return 0
	}
	var q time.Duration
	found := 0
	for i := 0; i < l.n; i++ {
		s := l.samples[(l.next-1-i+queueSamples)%queueSamples]
		if found >= minQueueSamples && now-s.at > window {
			break
		}
		if found == 0 || s.queue < q {
			q = s.queue
		}
		found++
	}
	return q
}

// threshold is the queue delay above which a loss is congestion: a few
// packets at the delivery rate (fallback: rate), at least a fraction of
// the minimum RTT and twice the RTT noise (at least cc.HostNoise: the
// hosts' scheduling delays come in trains that outlast a few samples).
func (l *lossClassifier) threshold(minRTT time.Duration, packet int, fallback float64) time.Duration {
	thr := max(minRTT/congestionQueueFraction, 2*max(l.noise, cc.HostNoise))
	rate := l.rate
	if rate <= 0 {
		rate = fallback
	}
	if rate > 0 {
		thr = max(thr, time.Duration(congestionQueuePackets*float64(packet)/rate*float64(time.Second)))
	}
	return thr
}

// cause decides the cause of losses detected now.
func (l *lossClassifier) cause(now, srtt, minRTT time.Duration, packet int, fallbackRate float64) cc.Cause {
	switch l.mode {
	case LossCongestion:
		return cc.CauseCongestion
	case LossCorruption:
		return cc.CauseCorruption
	}
	q := l.recentQueue(now, max(srtt/4, 5*time.Millisecond))
	l.lastJudged = q
	if q > l.threshold(minRTT, packet, fallbackRate) {
		return cc.CauseCongestion
	}
	return cc.CauseCorruption
}
