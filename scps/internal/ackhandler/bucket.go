package ackhandler

// This file owns bucket, the token bucket behind the pacer and the ACK
// budget: tokens in bytes that refill at a rate and hold at most a burst
// (the pacer, woken late, the time it lost as well, up to catchUp). The
// pacer releases packets at min(SendRate, congestion controller's pacing
// rate), charging each packet with its wire overhead; the ACK budget
// keeps our ACK traffic within a fraction of the peer's link.

import (
	"math"
	"time"
)

// A burst is what the bucket holds: PacerBurstTime of the rate, since the
// session's timer wakes up with about millisecond granularity and a shorter
// burst would leave the link idle between wake-ups; but at least
// pacerMinBurst packets. It is kept that small on slow links on purpose: a
// burst queues at the bottleneck, and ten packets at 1.5 Mbit/s are 80 ms
// of queue, which the delay-based controllers and the loss-cause detector
// would read as congestion.
const (
	PacerBurstTime = 2 * time.Millisecond
	pacerMinBurst  = 2
)

// ackBurstPackets is the burst of the ACK budget in ACK packets: a burst of
// ACKs queues on a narrow return link (one ACK is 11 ms at 64 kbit/s), and
// that queue looks like congestion to the sender's delay measure.
const ackBurstPackets = 2

// pacerCatchUpMax bounds what a pacer woken late may send beyond its
// burst: the send time its late wake-up lost, up to an RTT/16 (a queue
// the delay signals do not read as congestion) and this.
const pacerCatchUpMax = 10 * time.Millisecond

// bucket is a token bucket. rate 0 means unlimited.
type bucket struct {
	tokens   float64
	maxBurst float64
	rate     float64 // bytes per second
	last     time.Duration
	// due is when the sender, with data waiting, was told it could send
	// next (SentPacketHandler.PacedWake); 0 when it was not. The ACK
	// budget leaves due and catchUp zero.
	// A refill past it is a late wake-up: told the link's rate, the
	// pacer keeps no queue at the bottleneck, so that time was the link's
	// idle time, and the bucket may then hold up to catchUp of it more
	// than a burst (extra), which the sender makes up at once.
	due     time.Duration
	catchUp time.Duration
	extra   float64
}

func (b *bucket) refill(now time.Duration) {
	if now > b.last {
		b.extra = 0
		if b.due > 0 && now > b.due {
			b.extra = b.rate * min(now-b.due, b.catchUp).Seconds()
		}
		if b.rate > 0 {
			b.tokens = math.Min(b.maxBurst+b.extra, b.tokens+b.rate*(now-b.last).Seconds())
		}
		b.last = now
	}
	if now >= b.due {
		b.due = 0
	}
}

// setRate changes rate and burst after crediting the time so far at the old
// rate.
func (b *bucket) setRate(now time.Duration, rate, burst float64) {
	b.refill(now)
	if rate <= 0 || math.IsInf(rate, 1) {
		b.rate, b.maxBurst, b.tokens = 0, burst, burst
		return
	}
	b.rate, b.maxBurst = rate, burst
	b.tokens = min(b.tokens, burst+b.extra)
}

// ready reports whether size bytes may go now.
func (b *bucket) ready(size int) bool { return b.rate == 0 || b.tokens >= float64(size) }

// take charges size bytes; the balance may go negative (ACK-only packets
// are charged but never held back by the pacer), delaying what follows.
func (b *bucket) take(size int) {
	if b.rate > 0 {
		b.tokens = math.Max(b.tokens-float64(size), -b.maxBurst)
	}
}

// readyAt is when size bytes will be available (now if already).
func (b *bucket) readyAt(now time.Duration, size int) time.Duration {
	if b.ready(size) {
		return now
	}
	need := float64(size) - b.tokens
	d := time.Duration(need / b.rate * float64(time.Second))
	return now + max(d, time.Microsecond)
}
