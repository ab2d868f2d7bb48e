package cc

// This file tests hybrid's resumed slow start backing off when it finds
// nothing.

import (
	"testing"
	"time"
)

func TestFutileResumesBackOff(t *testing.T) {
	rtt := 300 * time.Millisecond
	c := NewHybrid(Params{MaxDatagramSize: mss, RTT: NewRTTStats(rtt)})
	c.p.RTT.Update(rtt, 0)
	c.ss, c.peakRate, c.ackRate, c.roundAckRate = false, 180e3, 180e3, 180e3
	now := t0.Add(10 * time.Second)
	// quietRounds rounds resume slow start; the resume finds no more
	// than the best rate seen, so the next needs twice as many.
	rounds := func() int { return roundsToResume(c, &now, rtt) }
	for i, want := range []int{quietRounds, 2 * quietRounds, 4 * quietRounds} {
		if got := rounds(); got != want {
			t.Fatalf("resume %d after %d quiet rounds, want %d", i, got, want)
		}
		c.resumeFound()
		c.ss, c.resumed = false, false
	}
	// One that finds more resets the backoff.
	if got := rounds(); got != 8*quietRounds {
		t.Fatalf("fourth resume after %d rounds", got)
	}
	c.peakRate = 1.2 * c.resumePeak
	c.resumeFound()
	c.ss, c.resumed = false, false
	c.ackRate, c.roundAckRate = c.peakRate, c.peakRate
	if got := rounds(); got != quietRounds {
		t.Errorf("after a resume that found more, the next after %d rounds, want %d", got, quietRounds)
	}
}

// TestSharedLinkStopsFadeShortcut: told a rate and delivering half the
// best rate seen, one quiet round resumes slow start (a fade may have
// ended). A resume that then raises the delivery rate only part of the
// way to the best seen pushed another flow aside: the next resume waits
// for quiet rounds backed off as for a futile one, not one round. A
// resume that finds the rate unchanged (the fade goes on) keeps the
// shortcut.
func TestSharedLinkStopsFadeShortcut(t *testing.T) {
	rtt := 600 * time.Millisecond
	c := NewHybrid(Params{MaxDatagramSize: mss, RTT: NewRTTStats(rtt), SendRate: 10e6})
	c.p.RTT.Update(rtt, 0)
	peak := 10e6 / 8.0
	c.ss, c.peakRate, c.ackRate, c.roundAckRate = false, peak, peak/2, peak/2
	now := t0.Add(10 * time.Second)
	rounds := func() int { return roundsToResume(c, &now, rtt) }
	end := func(rate float64) {
		c.ackRate = rate
		c.resumeFound()
		c.ss, c.resumed = false, false
		c.ackRate, c.roundAckRate = peak/2, peak/2
	}
	if got := rounds(); got != 1 {
		t.Fatalf("at half the best rate, told: resume after %d rounds, want 1", got)
	}
	end(peak / 2) // nothing changed: a fade that goes on
	if got := rounds(); got != 1 {
		t.Fatalf("after a resume that left the rate alone: next after %d rounds, want 1", got)
	}
	end(0.65 * peak) // took part of another flow's share
	if got := rounds(); got != quietRounds<<c.futile || got == 1 {
		t.Fatalf("after a resume that found the link shared: next after %d rounds, want %d", got, quietRounds<<c.futile)
	}
	end(peak) // the link is all ours again
	if got := rounds(); got != 1 {
		t.Errorf("after a resume back at the best rate: next after %d rounds, want 1", got)
	}
}

// roundsToResume ends quiet avoidance rounds of rtt at *now until c
// resumes slow start, and reports how many it took (-1: not in 64).
func roundsToResume(c *Hybrid, now *time.Time, rtt time.Duration) int {
	for n := 1; n <= 64; n++ {
		*now = now.Add(rtt)
		if c.resume(*now, 0, c.Window()) {
			return n
		}
	}
	return -1
}

// TestFadeDrainPacedAtTheLinkRate: told 50 Mbit/s, the link fades to 10
// and the queue holds 2 s. The cut for that queue sizes the window by the
// faded rate; the round's RTT samples still hold the queue, and pacing the
// window over them ran at about half the faded rate once the queue was
// gone. In a fade the pacer keeps to the rate the cut measured; beside
// another flow (a resume found the link shared) it does not.
func TestFadeDrainPacedAtTheLinkRate(t *testing.T) {
	base, queued := 600*time.Millisecond, 2*time.Second
	const told, faded = 50e6 / 8, 10e6 / 8
	for _, shared := range []bool{false, true} {
		c := NewHybrid(Params{MaxDatagramSize: mss, RTT: NewRTTStats(base), SendRate: 50e6})
		c.p.RTT.Update(base, 0)
		c.ss = false
		now := t0.Add(base)
		ack := func(rtt time.Duration, rate float64, in int) {
			now = now.Add(time.Duration(float64(mss) / rate * float64(time.Second)))
			c.p.RTT.Update(rtt, 0)
			c.OnAck(now, AckEvent{AckedBytes: mss, PriorInFlight: in, LargestSentAt: now.Add(-rtt), RTTUpdated: true, RTT: rtt})
		}
		for range 3 * int(told*base.Seconds()/mss) { // three rounds at the told rate
			ack(base, told, c.Window())
		}
		c.shared = shared
		full := c.Window()
		for i := 0; c.Window() >= full; i++ {
			if i > 1e5 {
				t.Fatal("no cut for a 2 s queue")
			}
			ack(base+queued, faded, full)
		}
		// The queue drains: a few ACKs with RTTs below the round's.
		for range 8 {
			ack(base+queued/2, faded, c.Window())
		}
		got := c.PacingRate()
		if !shared && got < faded {
			t.Errorf("in a fade, after the cut: paced at %.0f kB/s, want at least the faded %.0f", got/1e3, faded/1e3)
		}
		if shared && got >= faded {
			t.Errorf("on a shared link, after the cut: paced at %.0f kB/s, want the window over the round's RTT (below %.0f)", got/1e3, faded/1e3)
		}
	}
}

// TestHybridSlowStartExitNotBeyondInFlight: told no rate, slow start's
// window is no bound (the pacer is), and the queue that ends it comes
// with a batch of ACKs a stalled host handed over at once: 40 ACKs 10 us
// apart, and the rate of the last ones (the recent rate's ring) is seven
// times the link's. The cut to that rate's pipe left a window of 65 MB
// with 15 MB in flight (through the binary, 250/3 at load 16: 1 GiB,
// avoidance paced at 1.25 times it per RTT, 16 Gbit/s, and 3.6% of the
// transfer dropped at the modem queue). The window that built the queue
// is at most what is in flight.
func TestHybridSlowStartExitNotBeyondInFlight(t *testing.T) {
	base := 650 * time.Millisecond
	c := NewHybrid(Params{MaxDatagramSize: mss, RTT: NewRTTStats(base)})
	c.p.RTT.Update(base, 0)
	c.cwnd = maxWindow // slow start after the jump to the timed rate
	const inFlight = 15 << 20
	now := t0.Add(base)
	sent := t0
	// A round at 20 MB/s with no queue: slow start goes on.
	step := time.Duration(float64(mss) / 20e6 * float64(time.Second))
	for range 200 {
		now, sent = now.Add(step), sent.Add(step)
		c.OnAck(now, AckEvent{AckedBytes: mss, PriorInFlight: inFlight, LargestSentAt: sent, RTTUpdated: true, RTT: base})
	}
	if !c.InSlowStart() {
		t.Fatalf("slow start ended without a queue (window %d)", c.Window())
	}
	// The batch: 20 ms of queue, handed over 10 us apart.
	for range 40 {
		now, sent = now.Add(10*time.Microsecond), sent.Add(step)
		c.OnAck(now, AckEvent{AckedBytes: mss, PriorInFlight: inFlight, LargestSentAt: sent, RTTUpdated: true, RTT: base + 20*time.Millisecond})
	}
	if c.InSlowStart() {
		t.Fatalf("slow start went on over 20 ms of queue")
	}
	if w := c.Window(); w > inFlight {
		t.Errorf("window %d after slow start ended with %d bytes in flight, want at most that", w, inFlight)
	}
}

// TestHybridFlightQueueDoesNotEndSlowStart: told no rate, RTT samples of
// the first flight's own packets that carry a queue (the burst's, or its
// ACKs' on a 64 kbit/s return link: 70-210 ms through the binary) do not
// end slow start, which had cut the window to the flight's 45-65 kB on a
// 1.5 MB pipe; samples of packets sent after the flight still do.
func TestHybridFlightQueueDoesNotEndSlowStart(t *testing.T) {
	base := 600 * time.Millisecond
	c := NewHybrid(Params{MaxDatagramSize: mss, RTT: NewRTTStats(base)})
	sent := t0
	flight := c.FirstFlight() / mss
	for range flight {
		c.OnPacketSent(sent, mss, mss)
		sent = sent.Add(10 * time.Microsecond)
	}
	now := t0.Add(base)
	for i := range flight {
		at := t0.Add(time.Duration(i) * 10 * time.Microsecond)
		rtt := base + time.Duration(i)*7*time.Millisecond // each ACK 7 ms behind the last
		now = at.Add(rtt)
		c.p.RTT.Update(rtt, 0)
		c.OnAck(now, AckEvent{AckedBytes: mss, PriorInFlight: flight * mss, LargestSentAt: at, RTTUpdated: true, RTT: rtt})
	}
	if !c.InSlowStart() {
		t.Fatalf("slow start ended on the first flight's own samples (window %d)", c.Window())
	}
	// Packets sent after the flight that queue end it.
	in := 2 * flight * mss
	for i := range 40 {
		at := now.Add(time.Duration(i) * time.Millisecond)
		c.OnPacketSent(at, mss, in)
		rtt := base + 50*time.Millisecond
		c.OnAck(at.Add(rtt), AckEvent{AckedBytes: mss, PriorInFlight: in, LargestSentAt: at, RTTUpdated: true, RTT: rtt})
	}
	if c.InSlowStart() {
		t.Fatalf("slow start went on over 50 ms of queue after the flight")
	}
}

// TestHybridDelayCutKeepsInFlight: told no rate, on a path that lost
// nothing for several rounds, a loaded host's ACKs come in bunches with
// gaps between, and then with a queue's delay: the rate of the latest
// ACKs spans a gap, and the cut to it left the window at half of what was
// in flight (through the binary, 250/3 told nothing: 19.6 MB, then 10.4,
// then 4.7 with 10 MB in flight, the link at a fraction of its rate for
// seconds). The cut keeps Vegas' target of what is in flight: the queue
// it shows drains, no more.
func TestHybridDelayCutKeepsInFlight(t *testing.T) {
	base := 650 * time.Millisecond
	c := NewHybrid(Params{MaxDatagramSize: mss, RTT: NewRTTStats(base)})
	c.p.RTT.Update(base, 0)
	c.ss, c.cwnd, c.ssthresh = false, 20_000_000, 20_000_000
	const in = 10_000_000 // bytes in flight, at 15 MB/s over the base RTT
	const per = 10 * mss  // bytes an ACK acknowledges
	step := time.Second / (15e6 / per)
	now, sent := t0.Add(base), t0
	ack := func(rtt time.Duration) {
		now, sent = now.Add(step), sent.Add(step)
		c.OnPacketSent(sent, per, in)
		c.OnAck(now, AckEvent{AckedBytes: per, PriorInFlight: in, LargestSentAt: sent, RTTUpdated: true, RTT: rtt})
	}
	for now.Before(t0.Add(10 * base)) {
		ack(base)
	}
	before := c.Window()
	if before < in {
		t.Fatalf("window %d before the bunches, want at least the %d in flight", before, in)
	}
	// For 3 s: 20 ms of ACKs 25 ms late, then 20 ms of none.
	for range 75 {
		for range 20 * time.Millisecond / step {
			ack(base + 25*time.Millisecond)
		}
		now = now.Add(20 * time.Millisecond)
	}
	if c.Window() >= before {
		t.Fatalf("no cut on 25 ms of queue (window %d)", c.Window())
	}
	if want := in * 9 / 10; c.Window() < want {
		t.Errorf("window %d after the cut with %d in flight, want >= %d", c.Window(), in, want)
	}
}
