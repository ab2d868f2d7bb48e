package cc

// This file tests each controller against its definition with synthetic
// ACKs: Hybla's slow start and congestion avoidance, Vegas holding its
// queue estimate between alpha and beta, hybrid's slow start, exit on delay
// and steering, rate's open loop, the window cap a configured rate implies,
// and that no controller shrinks its window for corruption or outage.

import (
	"math"
	"testing"
	"time"
)

const mss = 1000

var t0 = time.Unix(1000, 0)

func params(rtt time.Duration, sendRate int64) Params {
	r := NewRTTStats(rtt)
	r.Update(rtt, 0)
	return Params{MaxDatagramSize: mss, RTT: r, SendRate: sendRate}
}

// ackDriver feeds a controller one ACK per packet of a window, spread over
// a round trip, each reporting rtt.
type ackDriver struct {
	c   Controller
	now time.Time
}

// untilRoundEnd acknowledges packets one at a time, with inFlight bytes
// outstanding and an RTT sample of rtt each, until the controller's round
// ends. ACKs arrive at inFlight per rtt, as they do from a full pipe.
func (d *ackDriver) untilRoundEnd(r *rounds, inFlight int, rtt time.Duration) {
	n := r.count
	gap := rtt * mss / time.Duration(max(inFlight, mss))
	for i := 0; r.count == n; i++ {
		if i > 1e6 {
			panic("round never ends")
		}
		d.now = d.now.Add(gap)
		d.c.OnAck(d.now, AckEvent{AckedBytes: mss, PriorInFlight: inFlight,
			LargestSentAt: d.now.Add(-rtt), RTTUpdated: true, RTT: rtt})
	}
}

// round acknowledges n packets over one round trip, with inFlight bytes
// outstanding and an RTT sample of rtt for each.
func (d *ackDriver) round(n, inFlight int, rtt time.Duration) {
	for i := 0; i < n; i++ {
		d.now = d.now.Add(rtt / time.Duration(n))
		d.c.OnAck(d.now, AckEvent{AckedBytes: mss, PriorInFlight: inFlight,
			LargestSentAt: d.now.Add(-rtt), RTTUpdated: true, RTT: rtt})
	}
}

// rttFor is the RTT at which inFlight bytes leave q packets queued over
// base: q = inFlight*(rtt-base)/rtt.
func rttFor(base time.Duration, inFlight int, q float64) time.Duration {
	return time.Duration(float64(base) * float64(inFlight) / (float64(inFlight) - q*mss))
}

func TestHyblaSlowStartGrowth(t *testing.T) {
	for _, rtt := range []time.Duration{25 * time.Millisecond, 100 * time.Millisecond, 600 * time.Millisecond} {
		p := params(rtt, 0)
		c := NewHybla(p)
		rho := min(float64(rtt)/float64(hyblaRTT0), maxRho)
		if got := c.Rho(); math.Abs(got-rho) > 1e-9 {
			t.Fatalf("rtt %v: rho %v, want %v", rtt, got, rho)
		}
		w := c.Window()
		// One ACK of one packet opens 2^rho - 1 packets.
		c.OnAck(t0, AckEvent{AckedBytes: mss, PriorInFlight: w, LargestSentAt: t0})
		want := min(w+int((math.Exp2(rho)-1)*mss), maxWindow)
		if c.Window() != want || !c.InSlowStart() {
			t.Errorf("rtt %v: slow start %d -> %d, want %d (2^rho - 1 = %.0f packets per ACK)", rtt, w, c.Window(), want, math.Exp2(rho)-1)
		}
	}
}

func TestHyblaCongestionAvoidance(t *testing.T) {
	p := params(100*time.Millisecond, 0) // rho 4
	c := NewHybla(p)
	c.OnAck(t0, AckEvent{AckedBytes: 10 * mss, PriorInFlight: c.Window(), LargestSentAt: t0})
	t1 := t0.Add(time.Second)
	c.OnCongestionEvent(t1, LossEvent{LostBytes: mss, PriorInFlight: c.Window(), LargestSentAt: t1.Add(-time.Millisecond)})
	w := c.Window()
	if c.InSlowStart() {
		t.Fatal("still in slow start after a congestion loss")
	}
	// One window of ACKs adds rho^2 packets.
	t2 := t1.Add(time.Second)
	for acked := 0; acked < w; acked += mss {
		c.OnAck(t2, AckEvent{AckedBytes: mss, PriorInFlight: w, LargestSentAt: t2})
	}
	// (The window grows during the round, so a little less.)
	if got, want := c.Window()-w, 16*mss; got < want*85/100 || got > want {
		t.Errorf("congestion avoidance grew %d bytes per window, want rho^2 = %d", got, want)
	}
}

// TestHyblaHalvesFlight: a congestion loss halves the window, or what was
// in flight when that was less (RFC 5681's FlightSize / 2): Hybla's slow
// start on a long path opens the window far beyond what the path took
// (2^24 packets per packet acknowledged at 600 ms), and halving that
// alone left it there for as many losses.
func TestHyblaHalvesFlight(t *testing.T) {
	c := NewHybla(params(600*time.Millisecond, 0))
	c.OnAck(t0, AckEvent{AckedBytes: mss, PriorInFlight: c.Window(), LargestSentAt: t0})
	if c.Window() < 1000*initialWindow(mss) {
		t.Fatalf("slow start at 600 ms opened the window to %d only", c.Window())
	}
	t1 := t0.Add(time.Second)
	c.OnCongestionEvent(t1, LossEvent{LostBytes: mss, PriorInFlight: 2_000_000, LargestSentAt: t1.Add(-time.Millisecond)})
	if got := c.Window(); got != 1_000_000 {
		t.Errorf("after a loss with 2 MB in flight: window %d, want 1000000", got)
	}
	// A window below what is in flight halves as before.
	t2 := t1.Add(time.Second)
	w := c.Window()
	c.OnCongestionEvent(t2, LossEvent{LostBytes: mss, PriorInFlight: 3 * w, LargestSentAt: t2.Add(-time.Millisecond)})
	if got := c.Window(); got != w/2 {
		t.Errorf("after a loss with 3 windows in flight: window %d, want %d", got, w/2)
	}
}

func TestVegasHoldsBetweenAlphaAndBeta(t *testing.T) {
	base := 100 * time.Millisecond
	p := params(base, 0)
	c := NewVegas(p)
	d := &ackDriver{c: c, now: t0}
	// Leave slow start by a queue: diff > gamma.
	d.round(10, c.Window(), base)
	for c.InSlowStart() {
		w := c.Window()
		d.round(w/mss, w, rttFor(base, w, 3))
		if d.now.Sub(t0) > time.Minute {
			t.Fatal("never left slow start")
		}
	}
	// Each round acknowledges the window one packet per ACK (a burst of
	// one packet), so the queue Vegas acts on is q - 1.
	cases := []struct {
		q     float64
		delta int
	}{
		{0, +mss},   // diff < alpha: grow
		{1.5, +mss}, // still below alpha
		{4, 0},      // diff 3: hold
		{5, 0},      // diff 4 = beta: hold
		{8, -mss},   // diff 7 > beta: shrink
	}
	for _, k := range cases {
		w := c.Window()
		rtt := rttFor(base, w, k.q)
		d.untilRoundEnd(&c.r, w, rtt) // a round all at this queue
		w = c.Window()
		d.untilRoundEnd(&c.r, w, rtt) // the decision on it
		if got := c.Window() - w; got != k.delta {
			t.Errorf("queue %.1f packets (diff %.1f): window %+d, want %+d", k.q, k.q-1, got, k.delta)
		}
	}
}

func TestHybridSlowStartExitAndSteering(t *testing.T) {
	base := 600 * time.Millisecond // rho 24: slow start opens at once
	p := params(base, 0)
	c := NewHybrid(p)
	// Hybrid counts delay up to HostNoise as pipe, not queue: the queues
	// below are over base + HostNoise.
	pipe := base + HostNoise
	d := &ackDriver{c: c, now: t0}
	w0 := c.Window()
	d.round(1, w0, base)
	if c.Window() <= 1000*w0 || !c.InSlowStart() {
		t.Fatalf("hybla slow start: %d -> %d", w0, c.Window())
	}
	// The pacer holds slow start to twice the measured delivery rate when
	// the link rate is unknown.
	d.round(10, 10*mss, base)
	if r, limit := c.PacingRate(), 2*float64(max(10*mss, c.initialWindow()))/base.Seconds(); r > 2*limit {
		t.Errorf("slow start pacing %.0f B/s with a delivery of %.0f B/s", r, limit/2)
	}
	// A queue beyond gamma ends slow start at what the pipe holds.
	in := 500 * mss
	d.round(20, in, rttFor(pipe, in, 30))
	if c.InSlowStart() {
		t.Fatal("slow start did not end with 30 packets queued")
	}
	if w := c.Window(); w > in || w < in*9/10 {
		t.Errorf("left slow start at %d bytes with %d in flight, 30 packets of them queued", w, in)
	}
	// Each case: a round at one queue and the decision at its end (on the
	// freshest samples, all at that queue). ACKs of one packet each make a
	// burst of one packet, which the queue estimate leaves out.
	step := func(q float64) (before, after int) {
		before = c.Window()
		d.untilRoundEnd(&c.r, before, rttFor(pipe, before, q))
		return before, c.Window()
	}
	// No queue: grow fast, by cwnd/10 every other round (a growth shows
	// in the RTT a round later).
	step(4) // a round of holding first
	w, got := step(0)
	if want := w / 10; got-w < want-mss || got-w > want+mss {
		t.Errorf("no queue: grew %d, want %d", got-w, want)
	}
	if w, got := step(0); got != w {
		t.Errorf("grew %d in the round after a growth", got-w)
	}
	// A little queue (diff below alpha): one packet.
	step(4)
	if w, got := step(2.5); got-w != mss {
		t.Errorf("diff 1.5: grew %d, want one packet", got-w)
	}
	// Between alpha and beta: hold.
	if w, got := step(4); got != w {
		t.Errorf("diff 3: window %d -> %d, want held", w, got)
	}
	// Far above beta: jump to the window that leaves (alpha+beta)/2
	// packets queued.
	w, got = step(60)
	if target := w - 60*mss + 3*mss; got < target-2*mss || got > target+2*mss {
		t.Errorf("60 packets queued: window %d -> %d, want about %d", w, got, target)
	}
	w = c.Window()
	// Corruption changes nothing; a congestion loss cuts to the pipe.
	c.OnCongestionEvent(d.now, LossEvent{LostBytes: mss, PriorInFlight: w, LargestSentAt: d.now, Cause: CauseCorruption})
	if c.Window() != w {
		t.Errorf("corruption changed the window %d -> %d", w, c.Window())
	}
	d.round(10, w, rttFor(pipe, w, 40))
	c.OnCongestionEvent(d.now, LossEvent{LostBytes: mss, PriorInFlight: w, LargestSentAt: d.now, Cause: CauseCongestion})
	if got := c.Window(); got > w-30*mss || got < w/2 {
		t.Errorf("congestion loss with 40 packets queued: %d -> %d", w, got)
	}
}

func TestRateOpenLoop(t *testing.T) {
	if _, err := New("rate", Params{MaxDatagramSize: mss, RTT: NewRTTStats(time.Second)}); err == nil {
		t.Fatal("rate without SendRate accepted")
	}
	p := params(600*time.Millisecond, 10e6)
	c, err := New("rate", p)
	if err != nil {
		t.Fatal(err)
	}
	bdp := 10e6 / 8 * 0.6
	if w := c.Window(); w != int(2*bdp)+initialWindow(mss) {
		t.Errorf("window %d, want 2 BDP + IW = %d", w, int(2*bdp)+initialWindow(mss))
	}
	if r := c.PacingRate(); r != 10e6/8 {
		t.Errorf("pacing %v, want the link rate", r)
	}
	w := c.Window()
	c.OnCongestionEvent(t0, LossEvent{LostBytes: 100 * mss, LargestSentAt: t0, Persistent: true})
	if c.Window() != w || c.InSlowStart() {
		t.Errorf("rate reacted to loss")
	}
}

func TestWindowCapWithLinkRate(t *testing.T) {
	for _, name := range Names() {
		p := params(300*time.Millisecond, 1.5e6)
		c, err := New(name, p)
		if err != nil {
			t.Fatal(err)
		}
		d := &ackDriver{c: c, now: t0}
		for i := 0; i < 200; i++ {
			w := c.Window()
			d.round(max(w/mss, 1), w, 300*time.Millisecond)
		}
		limit := windowCap(&p)
		if w := c.Window(); w > limit || w < limit/2 {
			t.Errorf("%s: window %d after 200 clean rounds, cap %d", name, w, limit)
		}
	}
}

func TestNoControllerShrinksForCorruptionOrOutage(t *testing.T) {
	for _, name := range Names() {
		for _, cause := range []Cause{CauseCorruption, CauseOutage} {
			c, err := New(name, params(100*time.Millisecond, 10e6))
			if err != nil {
				t.Fatal(err)
			}
			d := &ackDriver{c: c, now: t0}
			d.round(10, c.Window(), 100*time.Millisecond)
			w := c.Window()
			for i := 0; i < 5; i++ {
				d.now = d.now.Add(time.Second)
				c.OnCongestionEvent(d.now, LossEvent{LostBytes: 10 * mss, PriorInFlight: w, LargestSentAt: d.now, Cause: cause, Persistent: i == 4})
			}
			if c.Window() < w {
				t.Errorf("%s: %v losses shrank the window %d -> %d", name, cause, w, c.Window())
			}
		}
		// A congestion loss shrinks every window-based controller.
		c, _ := New(name, params(100*time.Millisecond, 10e6))
		d := &ackDriver{c: c, now: t0}
		d.round(10, c.Window(), 100*time.Millisecond)
		w := c.Window()
		c.OnCongestionEvent(d.now.Add(time.Second), LossEvent{LostBytes: mss, PriorInFlight: w, LargestSentAt: d.now.Add(time.Second)})
		if name != "rate" && c.Window() >= w {
			t.Errorf("%s: congestion loss left the window at %d", name, c.Window())
		}
	}
}
