package cc

// This file tests capacity, the bottleneck rate timed by ACK trains, and
// how hybrid's slow start uses it without a configured rate.

import (
	"math"
	"testing"
	"time"
)

// train feeds c the ACKs of n packets of mss bytes sent at once and
// spread by a bottleneck of rate bytes/s, one ACK every every packets,
// each held delay by the peer; it returns the time of the last ACK.
func train(c *capacity, start time.Time, n, every int, rate float64, delay time.Duration) time.Time {
	var delivered int64
	now := start
	for i := every; i <= n; i += every {
		delivered += int64(every * mss)
		arrived := start.Add(time.Duration(float64(i*mss) / rate * float64(time.Second)))
		now = arrived.Add(delay)
		c.onAck(now, AckEvent{AckedBytes: every * mss, LargestSentAt: t0, RTTUpdated: true, RTT: time.Millisecond, AckDelay: delay}, delivered, mss)
	}
	return now
}

func TestCapacityFromTrain(t *testing.T) {
	// 40 packets sent at once through 10 MB/s, an ACK every tenth, each
	// held 3 ms: the spread of the arrivals is the bottleneck's rate.
	var c capacity
	train(&c, t0.Add(300*time.Millisecond), 40, 10, 10e6, 3*time.Millisecond)
	if got := c.estimate(); math.Abs(got-10e6)/10e6 > 0.01 {
		t.Errorf("estimate %.0f B/s, want 10e6", got)
	}
	// ACKs of packets the sender spaced itself say nothing of the link.
	var paced capacity
	var delivered int64
	for i := 0; i < 10; i++ {
		sent := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		delivered += 10 * mss
		paced.onAck(sent.Add(300*time.Millisecond), AckEvent{LargestSentAt: sent, RTTUpdated: true, RTT: 300 * time.Millisecond}, delivered, mss)
	}
	if got := paced.estimate(); got != 0 {
		t.Errorf("paced ACKs gave an estimate of %.0f B/s", got)
	}
	// A train whose arrivals span less than capacityMinSpan is too short
	// to time: 20 packets at 1 GB/s take 20 us.
	var short capacity
	train(&short, t0, 20, 10, 1e9, 0)
	if got := short.estimate(); got != 0 {
		t.Errorf("a 20 us train gave an estimate of %.0f B/s", got)
	}
}

func TestHybridStartsNearTheTimedRate(t *testing.T) {
	// Told no rate, at 600 ms: the first flight is one burst (no pacing),
	// also when keep-alives measured the RTT before it, and once its ACKs
	// time the link at 25 MB/s, slow start paces at that rate (in wire
	// bytes), not at twice the initial window per RTT nor at half the
	// estimate.
	rtt := 600 * time.Millisecond
	const overhead = 49
	c := NewHybrid(Params{MaxDatagramSize: mss, WireOverhead: overhead, RTT: NewRTTStats(rtt)})
	c.p.RTT.Update(rtt, 0) // a keep-alive's sample
	c.OnPacketSent(t0, 30, 30)
	for i := 0; c.PacingRate() == 0; i++ {
		if i*mss >= c.initialWindow() {
			t.Fatalf("still unpaced after %d full packets; the initial window is %d bytes", i, c.initialWindow())
		}
		c.OnPacketSent(t0, mss, (i+1)*mss)
	}
	if n := c.sentFull; n < c.initialWindow() {
		t.Fatalf("paced after %d bytes of full packets, want the initial window (%d) as one burst", n, c.initialWindow())
	}
	train(&c.capa, t0.Add(rtt), 40, 10, 25e6, 0)
	want := 25e6 * float64(mss+overhead) / mss
	if got := c.PacingRate(); math.Abs(got-want)/want > 0.02 {
		t.Errorf("slow start paced at %.0f B/s after the first flight, want %.0f", got, want)
	}
}

// TestHybridRegrowsBeyondALowEstimate: a first flight the sending host
// spread (or whose ACKs a thin return link spread) times the link below
// its rate. Slow start paces a quarter beyond the estimate; once the
// link delivered more than capacityBeaten of it with no queue, the
// estimate was low and slow start grows by half per round trip, not a
// quarter.
func TestHybridRegrowsBeyondALowEstimate(t *testing.T) {
	rtt := 650 * time.Millisecond
	c := NewHybrid(Params{MaxDatagramSize: mss, RTT: NewRTTStats(rtt)})
	c.p.RTT.Update(rtt, 0)
	for i := 0; i*mss < c.initialWindow(); i++ {
		c.OnPacketSent(t0, mss, (i+1)*mss)
	}
	const est = 1e6 // the link carries 30 MB/s
	train(&c.capa, t0.Add(rtt), 32, 10, est, 0)
	c.cwnd = 64 << 20 // slow start's window is no bound here
	c.ackRate = est   // a round at the estimate delivered it
	if got := c.PacingRate() / c.ackRate; math.Abs(got-capacityOvershoot) > 0.01 {
		t.Errorf("at the estimate: paced at %.2f times the delivery rate, want %.2f", got, capacityOvershoot)
	}
	c.ackRate = capacityOvershoot * est // the next delivered a quarter more, no queue
	if got := c.PacingRate() / c.ackRate; math.Abs(got-capacityRegrowth) > 0.01 {
		t.Errorf("beyond the estimate: paced at %.2f times the delivery rate, want %.2f", got, capacityRegrowth)
	}
}

// TestHybridTimesTheFlightNotWhatCameBefore: a small packet 18 ms before
// the first flight (a response's header) and a host stall that delays
// the flight's arrival by 40 ms: the ACK trains are timed from the
// flight's first packet, not from the small one, whose gap to the flight
// the link did not fill.
func TestHybridTimesTheFlightNotWhatCameBefore(t *testing.T) {
	rtt := 600 * time.Millisecond
	c := NewHybrid(Params{MaxDatagramSize: mss, RTT: NewRTTStats(rtt)})
	c.OnPacketSent(t0, 12, 12)
	flight := t0.Add(18 * time.Millisecond)
	for i := 0; i*mss < c.initialWindow(); i++ {
		c.OnPacketSent(flight, mss, (i+1)*mss)
	}
	c.OnAck(t0.Add(rtt), AckEvent{AckedBytes: 12, PriorInFlight: 12, LargestSentAt: t0, RTTUpdated: true, RTT: rtt})
	const rate = 5e6 // bytes/s at the bottleneck
	start := flight.Add(rtt + 40*time.Millisecond)
	for i := 8; i*mss <= c.initialWindow(); i += 8 {
		at := start.Add(time.Duration(float64(i*mss) / rate * float64(time.Second)))
		c.OnAck(at, AckEvent{AckedBytes: 8 * mss, PriorInFlight: c.initialWindow(), LargestSentAt: flight, RTTUpdated: true, RTT: at.Sub(flight)})
	}
	if got := c.capa.estimate(); math.Abs(got-rate)/rate > 0.2 {
		t.Errorf("estimate %.0f B/s, want about %.0f (the flight's)", got, float64(rate))
	}
}

// TestCapacityFromAFlightTheHostSpread: the first flight left over 1 ms
// (a busy sending host) and a 30 MB/s link carried it in 1.6 ms: its
// arrivals span less than twice its sending, yet the link carried it at
// least that fast, which is the estimate (none before: slow start paced
// at twice the initial window per round trip). Packets paced after the
// flight still time nothing.
func TestCapacityFromAFlightTheHostSpread(t *testing.T) {
	var c capacity
	const n = 32
	rate := 30e6
	sendSpread := time.Millisecond
	c.flightAt, c.flightEnd = t0, t0.Add(sendSpread)
	var delivered int64
	linkFree := t0.Add(300 * time.Millisecond)
	for i := 0; i < n; i++ {
		sent := t0.Add(sendSpread * time.Duration(i) / (n - 1))
		start := sent.Add(300 * time.Millisecond)
		if linkFree.After(start) {
			start = linkFree
		}
		arrived := start.Add(time.Duration(mss * float64(time.Second) / rate))
		linkFree = arrived
		delivered += mss
		if i%8 == 0 || i == n-1 {
			c.onAck(arrived.Add(300*time.Millisecond), AckEvent{LargestSentAt: sent, RTTUpdated: true, RTT: 600 * time.Millisecond}, delivered, mss)
		}
	}
	if got := c.estimate(); got < 0.9*rate || got > 1.05*rate {
		t.Errorf("estimate %.0f B/s from a flight the host spread over %v, want about %.0f", got, sendSpread, float64(rate))
	}
	// Paced after the flight at 1 MB/s: no new estimate from these.
	before := c.estimate()
	at := linkFree.Add(time.Second)
	for i := 0; i < 20; i++ {
		sent := at.Add(time.Duration(i) * time.Duration(float64(mss)/1e6*float64(time.Second)))
		delivered += mss
		c.onAck(sent.Add(600*time.Millisecond), AckEvent{LargestSentAt: sent, RTTUpdated: true, RTT: 600 * time.Millisecond}, delivered, mss)
	}
	if got := c.estimate(); got != before {
		t.Errorf("paced packets after the flight moved the estimate from %.0f to %.0f B/s", before, got)
	}
}

// TestCapacityTimedWithinOneAckPacket: a flight of 30 packets through 2.5
// MB/s (20 Mbit/s). The ACK at once of its first packet comes back alone
// over an idle return link; the rest come in one later ACK packet, its
// points ahead of the ACK, held 20 ms longer on the way back than the
// first (the receiver's window updates queued ahead of it at 64 kbit/s).
// Timed from the first ACK, the flight read as 30 packets over 32 ms:
// 1.4 MB/s. The points of one packet left the peer together: their
// spread is the link's.
func TestCapacityTimedWithinOneAckPacket(t *testing.T) {
	const rate = 2.5e6
	start := t0.Add(300 * time.Millisecond)
	at := func(i int) time.Time { return start.Add(time.Duration(float64(i*mss) / rate * float64(time.Second))) }
	for _, known := range []bool{false, true} {
		var c capacity
		pkt := func(n uint64) uint64 {
			if known {
				return n
			}
			return 0
		}
		c.onAck(at(1), AckEvent{AckedBytes: mss, LargestSentAt: t0, RTTUpdated: true, RTT: time.Millisecond, Packet: pkt(1)}, mss, mss)
		// One packet: points at the 10th and 20th packets, then its ACK of
		// the 30th, each delay counted from that packet's arrival.
		sentAt := at(30).Add(5 * time.Millisecond) // the receiver's ack delay
		now := sentAt.Add(20 * time.Millisecond)   // queued behind window updates
		for _, i := range []int{10, 20, 30} {
			c.onAck(now, AckEvent{AckedBytes: 10 * mss, LargestSentAt: t0, RTTUpdated: true, RTT: time.Millisecond, AckDelay: sentAt.Sub(at(i)), Packet: pkt(2)}, int64(i*mss), mss)
		}
		got := c.estimate()
		if known && math.Abs(got-rate)/rate > 0.01 {
			t.Errorf("timed within the ACK packet: estimate %.0f B/s, want %.0f", got, rate)
		}
		if !known && got > 0.7*rate {
			t.Errorf("packets unknown: estimate %.0f B/s, want the span across packets (below %.0f)", got, 0.7*rate)
		}
	}
}

// TestCapacityNotLoweredBySlowSpans: a flight timed at 12 MB/s (LEO's
// 100 Mbit/s), then spans of the page's next packets the sender sent at
// 0.75 MB/s (6 Mbit/s: the objects trickling in from a loaded server)
// that arrived over twice their sending (a loaded receiving host). They
// show that the path delayed them, not that the link is slower: through
// the binary such spans took the estimate to 1-3 Mbit/s, and slow start
// paced the page's objects at that. A span sent at the estimate's rate
// or faster that arrives slower still lowers it.
func TestCapacityNotLoweredBySlowSpans(t *testing.T) {
	var c capacity
	end := train(&c, t0.Add(40*time.Millisecond), 24, 8, 12e6, 0)
	if got := c.estimate(); math.Abs(got-12e6)/12e6 > 0.01 {
		t.Fatalf("the flight timed at %.0f B/s, want 12e6", got)
	}
	delivered := int64(24 * mss)
	ack := func(sent, arrived time.Time, n int) {
		delivered += int64(n * mss)
		c.onAck(arrived, AckEvent{AckedBytes: n * mss, LargestSentAt: sent, RTTUpdated: true, RTT: arrived.Sub(sent)}, delivered, mss)
	}
	at := func(bytes int, rate float64) time.Duration { return time.Duration(float64(bytes) / rate * 1e9) }
	slow := at(8*mss, 0.75e6) // 8 packets at 0.75 MB/s
	sent := end.Add(5 * time.Millisecond)
	for i := 0; i < 4; i++ {
		ack(sent.Add(time.Duration(i)*slow), sent.Add(40*time.Millisecond+time.Duration(2*i)*slow), 8)
	}
	if got := c.estimate(); got < 12e6*0.99 {
		t.Errorf("spans sent at 0.75 MB/s and arriving at half that lowered the estimate to %.0f B/s", got)
	}
	// Sent at 24 MB/s (a burst of 32 packets), arriving at 6 MB/s: the
	// link is slower now.
	sent = sent.Add(time.Second)
	gap, arrive := at(mss, 24e6), at(mss, 6e6)
	for i := 8; i <= 32; i += 8 {
		ack(sent.Add(time.Duration(i)*gap), sent.Add(40*time.Millisecond+time.Duration(i)*arrive), 8)
	}
	if got := c.estimate(); math.Abs(got-6e6)/6e6 > 0.05 {
		t.Errorf("a span sent at 24 MB/s that arrived at 6 MB/s left the estimate at %.0f B/s, want 6e6", got)
	}
}

// TestCapacityNoFasterThanSent: the first flight left over 2 ms (a busy
// sending host) and its arrivals were batched on the way into 1.2 ms (an
// emulator's writer that woke late): a path delivers no faster than it
// was sent into, so the estimate is at most the flight's bytes over its
// sending (it read the flight over the 1.2 ms: 160 Mbit/s of a link that
// carried it at 100).
func TestCapacityNoFasterThanSent(t *testing.T) {
	var c capacity
	const n = 24
	spread := 2 * time.Millisecond
	c.flightAt, c.flightEnd = t0, t0.Add(spread)
	var delivered int64
	start := t0.Add(40 * time.Millisecond)
	for i := 0; i < n; i++ {
		sent := t0.Add(spread * time.Duration(i) / (n - 1))
		arrived := start.Add(1200 * time.Microsecond * time.Duration(i) / (n - 1))
		delivered += mss
		if i%8 == 0 || i == n-1 {
			c.onAck(arrived.Add(40*time.Millisecond), AckEvent{LargestSentAt: sent, RTTUpdated: true, RTT: 80 * time.Millisecond}, delivered, mss)
		}
	}
	want := float64((n-1)*mss) / spread.Seconds()
	if got := c.estimate(); got == 0 || got > want*1.01 {
		t.Errorf("estimate %.0f B/s from a flight sent over %v, want at most %.0f", got, spread, want)
	}
}

// TestCapacityNotLoweredAcrossAckPackets: 20M/64k told nothing, the
// flight timed within its one ACK packet at 2.42 MB/s, then slow start
// paced at that rate, each later ACK in a packet of its own. On the 64
// kbit/s return link each ACK packet takes 7-8 ms, so two that left the
// receiver 2 ms of data apart arrive 7.8 ms apart, and one held 20-30 ms
// on the way (a stall, its own size) arrives that much later than the
// data's pace; spans across them arrived over twice their sending,
// trains by the rule, and lowered the estimate to 0.3-1.2 MB/s all
// through the binary's runs (traced: 34-108 times in 30 s), or raised it
// beyond the link. Through the binary the pacer then fell to 9-13 Mbit/s
// for 100 ms at 1.5 s in a fifth to a half of the runs. The spread of points
// within one ACK packet is the link's alone: such a span still lowers
// the estimate.
func TestCapacityNotLoweredAcrossAckPackets(t *testing.T) {
	const rate = 2.42e6
	start := t0.Add(600 * time.Millisecond)
	flight := func() (*capacity, int64) {
		c := &capacity{}
		c.onAck(start, AckEvent{AckedBytes: mss, LargestSentAt: t0, RTTUpdated: true, RTT: time.Millisecond, Packet: 1}, mss, mss)
		sentAt := start.Add(25 * time.Millisecond) // the flight's held ACK: one packet of points
		for _, i := range []int{10, 20, 30} {
			arrived := start.Add(time.Duration(float64(i*mss) / rate * float64(time.Second)))
			c.onAck(sentAt.Add(8*time.Millisecond), AckEvent{AckedBytes: 10 * mss, LargestSentAt: t0, RTTUpdated: true, RTT: time.Millisecond, AckDelay: sentAt.Sub(arrived), Packet: 2}, int64(i*mss), mss)
		}
		if got := c.estimate(); math.Abs(got-rate)/rate > 0.02 {
			t.Fatalf("the flight timed at %.0f B/s, want %.0f", got, rate)
		}
		return c, int64(30 * mss)
	}
	paced := t0.Add(700 * time.Millisecond)
	gap := func(n int) time.Duration { return time.Duration(float64(n*mss) / (1.02 * rate) * float64(time.Second)) }
	// ACKs every n packets, paced a little above the estimate unless
	// burst; ACK packet i arrives at arrive(i).
	acks := func(c *capacity, delivered int64, n, count int, burst bool, arrive func(i int, sent time.Duration) time.Duration) {
		for i := range count {
			delivered += int64(n * mss)
			sent := gap((i + 1) * n)
			if burst {
				sent = time.Duration(i) * 50 * time.Microsecond
			}
			c.onAck(paced.Add(600*time.Millisecond+arrive(i, sent)), AckEvent{AckedBytes: n * mss, LargestSentAt: paced.Add(sent), RTTUpdated: true, RTT: 600 * time.Millisecond, Packet: uint64(10 + i)}, delivered, mss)
		}
	}
	for _, tc := range []struct {
		name   string
		n      int
		arrive func(i int, sent time.Duration) time.Duration
	}{
		{"one ACK packet held 25 ms", 23, func(i int, sent time.Duration) time.Duration {
			if i >= 5 {
				return sent + 25*time.Millisecond
			}
			return sent
		}},
		{"ACK packets 2 ms of data apart, 7.8 ms apart on the return link", 4, func(i int, _ time.Duration) time.Duration {
			return time.Duration(i) * 7800 * time.Microsecond
		}},
	} {
		c, delivered := flight()
		acks(c, delivered, tc.n, 12, false, tc.arrive)
		if got := c.estimate(); got < 0.98*rate {
			t.Errorf("%s: the estimate fell to %.0f B/s of %.0f", tc.name, got, rate)
		}
	}
	// Nor does one raise it: 14 packets sent as a burst whose ACK packets
	// came 5.4 ms apart read as 2.6 MB/s.
	c, delivered := flight()
	acks(c, delivered, 14, 2, true, func(i int, _ time.Duration) time.Duration {
		return time.Duration(i) * 5400 * time.Microsecond
	})
	if got := c.estimate(); got > 1.01*rate {
		t.Errorf("a burst's ACK packets 5.4 ms apart raised the estimate to %.0f B/s of %.0f", got, rate)
	}
	// Points within one ACK packet that arrived at a third of the rate:
	// the link is slower.
	c, delivered = flight()
	sentAt := paced.Add(650 * time.Millisecond)
	for i := 1; i <= 4; i++ {
		delivered += 8 * mss
		arrived := paced.Add(600*time.Millisecond + time.Duration(float64(8*i*mss)/(rate/3)*float64(time.Second)))
		c.onAck(sentAt.Add(300*time.Millisecond), AckEvent{AckedBytes: 8 * mss, LargestSentAt: paced.Add(gap(8 * i)), RTTUpdated: true, RTT: 600 * time.Millisecond, AckDelay: sentAt.Sub(arrived), Packet: 40}, delivered, mss)
	}
	if got := c.estimate(); math.Abs(got-rate/3)/(rate/3) > 0.05 {
		t.Errorf("points of one ACK packet at a third of the rate left the estimate at %.0f B/s, want %.0f", got, rate/3)
	}
}
