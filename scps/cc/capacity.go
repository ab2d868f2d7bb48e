package cc

// This file owns capacity, an estimate of the bottleneck's rate from ACK
// trains, for a sender that was told no link rate. Packets released faster
// than the path carries them leave the bottleneck spaced by its rate; the
// peer reports how long it held each ACK, so the time its largest packet
// arrived is known up to the constant return delay. The bytes between two
// ACKs over the spread of those arrivals is the bottleneck's rate (what is
// left of it beside cross traffic) whenever that spread is at least twice
// the spread with which the packets were sent: the path, not the sender,
// spaced them. A train is the run of ACKs for which that holds; the
// estimate is taken over the widest span of the latest train, which the
// hosts' timing noise disturbs least.
//
// The first flight of a sender with no rate goes out as one burst for
// this: its ACKs time the link within one round trip, so slow start can
// begin near the link's rate instead of doubling up from ten packets (on
// 250 Mbit/s at 650 ms that was nine round trips, six seconds).

import "time"

// capacityMinPackets and capacityMinSpan are the least a train must span
// (in packets and in arrival time) before it gives an estimate: the hosts'
// and the receiver's batching move single arrivals by up to milliseconds,
// and over a shorter span that reads as any rate at all.
const (
	capacityMinPackets = 4
	capacityMinSpan    = time.Millisecond
)

type trainPoint struct {
	sent, arrived time.Time
	delivered     int64
}

type capacity struct {
	first trainPoint
	have  bool
	est   float64 // bytes/s; 0 = no estimate yet
	// flightAt and flightEnd are when the first and the last packet of
	// the first flight left (the controller sets them): when that flight
	// left as one burst (flightBurst), a spread of its sending is the
	// host's, not pacing (onAck).
	flightAt, flightEnd time.Time
	// fast: a train of the flight (capacityMinPackets or more) arrived
	// within less than capacityMinSpan, faster than can be timed.
	fast bool
	// rising: a later train may raise the estimate, but lower it only
	// when it spans at least the bytes of the train the estimate came
	// from (estBytes): a longer train times the link better. The
	// controller sets it in a slow start whose flight was timed again.
	rising bool
	// estBytes is how many bytes the train of the estimate spanned.
	estBytes int64
	// pkt is the received packet (AckEvent.Packet) the last ACK frame came
	// in, and pktFirst the first point of that packet's frames. Spans
	// within one packet are timed by one send of the peer's; across
	// packets each ACK's own return delay adds in. pktTimed: the estimate
	// was timed within one packet, and a span across packets no longer
	// moves it, in this train or a later one (take). On a thin return link
	// the receiver's window updates (10 ms each at 64 kbit/s) queued ahead
	// of the flight's ACK with its points, and the train from the ACK at
	// once of its first packet, sent alone on an idle link, timed 20
	// Mbit/s at 8 and 50 at 20 (the binary, GEO-50/0.5 and 20M/64k).
	pkt      uint64
	pktFirst trainPoint
	pktTimed bool
}

// flightBurst is the longest a first flight may take to leave and still
// count as one burst the sending host spread. A flight whose data came
// later (a page's objects a round trip after its HTML) is not one.
const flightBurst = 5 * time.Millisecond

// onAck takes ev, received at now with delivered bytes acknowledged so far
// (ev's included). Only ACKs that produced an RTT sample count: their
// reported delay belongs to the packet whose send time ev carries.
func (c *capacity) onAck(now time.Time, ev AckEvent, delivered int64, mss int) {
	if !ev.RTTUpdated {
		return
	}
	p := trainPoint{sent: ev.LargestSentAt, arrived: now.Add(-ev.AckDelay), delivered: delivered}
	inPkt := c.have && ev.Packet != 0 && ev.Packet == c.pkt
	if !inPkt {
		c.pkt, c.pktFirst = ev.Packet, p
	}
	if !c.have {
		c.first, c.have = p, true
		return
	}
	if !c.span(c.first, p, mss, false) {
		c.first = p // the sender's own pacing spaced these: a new train
	}
	if inPkt {
		c.span(c.pktFirst, p, mss, true)
	}
}

// span times the bytes acknowledged between the points from and to (to in
// the same ACK packet as from when inPkt); false when the sender's own
// spacing, not the path, spread them: to begins a new train.
func (c *capacity) span(from, to trainPoint, mss int, inPkt bool) bool {
	sent := to.sent.Sub(from.sent)
	arrived := to.arrived.Sub(from.arrived)
	b := to.delivered - from.delivered
	if arrived <= 0 || sent < 0 {
		if arrived == 0 && sent == 0 {
			c.take(b, 0, 0, mss, inPkt) // a burst that arrived at once: too fast to time
		}
		return true // reordered, or timing noise: wait for a later ACK
	}
	if arrived < 2*sent {
		if !to.sent.After(c.flightEnd) && c.flightEnd.Sub(c.flightAt) <= flightBurst {
			// The first flight, spread by the sending host (at 250
			// Mbit/s a busy one takes as long to send 32 packets as
			// the link to carry them): the link carried it at least
			// this fast. Taken as no estimate, slow start paced at
			// twice the initial window per round trip.
			c.take(b, arrived, sent, mss, inPkt)
			return true
		}
		return inPkt
	}
	c.take(b, arrived, sent, mss, inPkt)
	return true
}

// take makes b bytes that arrived over arrived, sent over sent, the
// estimate, if they are enough to time; too short a span only says the
// train was fast. Once the estimate was timed within one ACK packet
// (inPkt), only such spans move it, in later trains too (below).
//
// A path delivers a span no faster than it was sent: arrivals closer
// than that were batched on the way (an emulator's writer, a host's
// socket read), and the estimate is at most b over sent. And a span
// lowers an estimate only when it was sent at least at that rate: one
// the sender sent slower (a page's next objects trickling in from the
// server, a pacer below the estimate) can show only that the path
// delayed it, not that the link is slower (as BBR keeps
// application-limited samples from lowering its bandwidth). Through the
// binary on a loaded host (LEO, 97 Mbit/s) spans of 10-40 kB sent at 6
// Mbit/s arrived over twice their sending and took the estimate from
// 39 to 1-3 Mbit/s, which paced the page's objects.
//
// Spans across ACK packets carry each packet's own delays on the way back.
// On a 64 kbit/s return link an ACK packet takes 7-8 ms, so two the
// receiver sent 2 ms of data apart arrive 7.8 ms apart, and one held on
// the way (a stall, its own size) arrives 15-30 ms late with the next
// right behind it: spans across them arrive over twice their sending,
// trains by the rule. Through the binary (20M/64k told nothing, traced)
// such spans took the flight's 2.42 MB/s, timed within its one ACK packet,
// to 0.3-1.2 MB/s 34-108 times in 30 s, and raised it as falsely (14.5 kB
// arriving over 5.4 ms: 2.69 MB/s); before the rounds' delivery rate
// carried slow start (1.4-1.6 s after connect()) the pacer fell to 9-13
// Mbit/s for 100 ms in a fifth to a half of the runs (scps
// TestUntoldThinReturnPacerHoldsTheEstimate: 10.3 Mbit/s). Only the train
// the estimate came from used to keep to spans within one packet. Such a
// span still moves it: the points' spread is the link's alone; and a link
// slower than the flight showed ends slow start by the delay signal as any
// overshoot does.
func (c *capacity) take(b int64, arrived, sent time.Duration, mss int, inPkt bool) {
	if b < int64(capacityMinPackets*mss) || c.pktTimed && !inPkt {
		return
	}
	if arrived < capacityMinSpan {
		c.fast = true
		return
	}
	rate := float64(b) / max(arrived, sent).Seconds()
	if rate < c.est && !c.mayLower(b, sent) {
		return
	}
	c.est, c.estBytes = rate, b
	c.pktTimed = c.pktTimed || inPkt
}

// mayLower reports whether a span of b bytes sent over sent may lower the
// estimate: it was sent at least at the estimate's rate, and, while
// rising, it spans at least the bytes of the estimate's train (a longer
// train times the link better).
func (c *capacity) mayLower(b int64, sent time.Duration) bool {
	if sent > 0 && float64(b)/sent.Seconds() < c.est {
		return false
	}
	return !c.rising || b >= c.estBytes
}

// estimate is the latest estimate in bytes/s (0: none).
func (c *capacity) estimate() float64 { return c.est }
