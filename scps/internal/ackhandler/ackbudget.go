package ackhandler

// This file owns AckBudget, the token budget all our acknowledgement
// traffic is held to. A burst of ACKs queues on a narrow return link, and
// that queue reads as forward congestion to the peer's delay measure, so
// ACKs must stay well within the return link.
//
// With rates configured the budget is min(RecvRate/20, SendRate/2). With
// neither, nothing says how narrow the return link is, so the budget
// follows the data it acknowledges: ackDataShare of the bytes received
// over the last round trip (the 20/0.064 Mbit/s link, 312:1, then carries
// about half its capacity in ACKs), and never fewer than ackMinPerRTT ACK
// packets per round trip, which the peer's delay signal and loss recovery
// need. Before that was so, the receiver acknowledged every tenth packet
// whatever the return link: 100 kbit/s of ACKs into 64 kbit/s, a return
// queue the sender took for forward congestion, 66% of the forward link.

import "time"

const (
	// ackDataShare: ACK bytes per received byte without configured rates.
	ackDataShare = 1.0 / 600
	// ackMinPerRTT: ACK packets per round trip the budget always allows.
	ackMinPerRTT = 32
	// ackMultiShare multiplies the share with several paths: an ACK
	// reports only the ranges of the packets that arrived since the last
	// few (ackstate.go), so ACKs must not be far apart.
	ackMultiShare = 4
)

// AckBudget holds the association's acknowledgement traffic to a rate.
type AckBudget struct {
	bucket
	adaptive bool // no rate configured: the budget follows the data
	burst    float64
	cost     int           // bytes of one ACK packet on the wire
	start    time.Duration // of the current measuring window
	bytes    int           // received in it
	multi    bool          // several paths (SetMultipath)
}

// SetMultipath says whether the packets come over several paths.
func (b *AckBudget) SetMultipath(on bool) { b.multi = on }

// Init sets the budget for cfg at now; cost is one ACK packet's wire size.
func (b *AckBudget) Init(cfg Config, now time.Duration, cost int) {
	b.burst, b.cost = float64(ackBurstPackets*(64+cfg.WireOverhead)), cost
	rate := 0.0
	if cfg.RecvRate > 0 {
		rate = float64(cfg.RecvRate) / 8 / 20
	}
	if cfg.SendRate > 0 {
		r := float64(cfg.SendRate) / 8 / 2
		if rate == 0 || r < rate {
			rate = r
		}
	}
	if rate == 0 {
		b.adaptive = true
		rate = b.floor(cfg.InitialRTT)
	}
	b.setRate(now, rate, b.burst)
	b.tokens = b.maxBurst
	b.start = now
}

// floor is the least budget: ackMinPerRTT ACK packets per srtt.
func (b *AckBudget) floor(srtt time.Duration) float64 {
	return ackMinPerRTT * float64(b.cost) / max(srtt, time.Millisecond).Seconds()
}

// Refill credits the budget with the time up to now.
func (b *AckBudget) Refill(now time.Duration) { b.refill(now) }

// Ready reports whether size bytes of ACK traffic may go now (Refill
// first).
func (b *AckBudget) Ready(size int) bool { return b.ready(size) }

// ReadyAt is when size bytes of ACK traffic may go (now if already).
func (b *AckBudget) ReadyAt(now time.Duration, size int) time.Duration { return b.readyAt(now, size) }

// Take charges size bytes of ACK traffic.
func (b *AckBudget) Take(size int) { b.take(size) }

// OnReceived counts size bytes received at now and, once a round trip
// (srtt) has passed since the window began, sets an adaptive budget from
// the rate they came at.
func (b *AckBudget) OnReceived(now time.Duration, size int, srtt time.Duration) {
	if !b.adaptive {
		return
	}
	b.bytes += size
	span := now - b.start
	if span < srtt {
		return
	}
	share := ackDataShare
	if b.multi {
		share *= ackMultiShare
	}
	rate := max(float64(b.bytes)/span.Seconds()*share, b.floor(srtt))
	b.setRate(now, rate, b.burst)
	b.start, b.bytes = now, 0
}
