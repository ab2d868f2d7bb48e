package cc

// This file tests the RTT estimator, NewReno and the registry.

import (
	"slices"
	"testing"
	"time"

	"scpsvpn/scps/settings"
)

func TestRTTStats(t *testing.T) {
	r := NewRTTStats(100 * time.Millisecond)
	if r.Smoothed() != 100*time.Millisecond || r.Samples() != 0 {
		t.Fatalf("initial %v", r.Smoothed())
	}
	r.Update(50*time.Millisecond, 0)
	if r.Smoothed() != 50*time.Millisecond || r.Var() != 25*time.Millisecond || r.Min() != 50*time.Millisecond {
		t.Fatalf("after first sample: %v %v %v", r.Smoothed(), r.Var(), r.Min())
	}
	// Ack delay is subtracted only while the result stays above min RTT.
	r.Update(60*time.Millisecond, 5*time.Millisecond)
	if want := (7*50*time.Millisecond + 55*time.Millisecond) / 8; r.Smoothed() != want {
		t.Errorf("smoothed %v, want %v", r.Smoothed(), want)
	}
	// An ACK delay that would take the sample below min RTT is subtracted
	// down to min RTT only.
	r.Update(52*time.Millisecond, 20*time.Millisecond)
	if r.Min() != 50*time.Millisecond || r.Latest() != 52*time.Millisecond || r.Adjusted() != 50*time.Millisecond {
		t.Errorf("min %v latest %v adjusted %v", r.Min(), r.Latest(), r.Adjusted())
	}
	if pto := r.PTO(25*time.Millisecond, time.Second); pto != time.Second {
		t.Errorf("PTO floor not applied: %v", pto)
	}
	if d := r.LossDelay(); d < r.Smoothed() || d > r.Smoothed()*2 {
		t.Errorf("loss delay %v for srtt %v", d, r.Smoothed())
	}
}

func newVJ(t *testing.T) (*NewReno, *RTTStats) {
	rtt := NewRTTStats(100 * time.Millisecond)
	c, err := New("vj", Params{MaxDatagramSize: 1000, RTT: rtt})
	if err != nil {
		t.Fatal(err)
	}
	return c.(*NewReno), rtt
}

func TestNewRenoSlowStartAvoidanceAndLoss(t *testing.T) {
	c, _ := newVJ(t)
	t0 := time.Unix(0, 0)
	w0 := c.Window()
	if w0 != 10000 || !c.InSlowStart() {
		t.Fatalf("initial window %d", w0)
	}
	// Slow start: the window grows by what is acknowledged.
	c.OnAck(t0, AckEvent{AckedBytes: 5000, PriorInFlight: w0, LargestSentAt: t0})
	if c.Window() != 15000 {
		t.Fatalf("slow start window %d", c.Window())
	}
	// App-limited: no growth.
	c.OnAck(t0, AckEvent{AckedBytes: 1000, PriorInFlight: 2000, LargestSentAt: t0})
	if c.Window() != 15000 {
		t.Fatalf("app-limited growth to %d", c.Window())
	}
	// Loss halves once per round trip.
	t1 := t0.Add(time.Second)
	c.OnCongestionEvent(t1, LossEvent{LostBytes: 1000, LargestSentAt: t1.Add(-time.Millisecond)})
	if c.Window() != 7500 || c.InSlowStart() {
		t.Fatalf("after loss %d", c.Window())
	}
	c.OnCongestionEvent(t1.Add(time.Millisecond), LossEvent{LostBytes: 1000, LargestSentAt: t1.Add(-2 * time.Millisecond)})
	if c.Window() != 7500 {
		t.Fatalf("second loss of the same round trip reduced again: %d", c.Window())
	}
	// Acks of packets sent before the reduction do not grow the window.
	c.OnAck(t1, AckEvent{AckedBytes: 7500, PriorInFlight: 7500, LargestSentAt: t1.Add(-time.Millisecond)})
	if c.Window() != 7500 {
		t.Fatalf("grew in recovery: %d", c.Window())
	}
	// Congestion avoidance: one packet per window.
	t2 := t1.Add(time.Second)
	c.OnAck(t2, AckEvent{AckedBytes: 7500, PriorInFlight: 7500, LargestSentAt: t2})
	if c.Window() != 8500 {
		t.Fatalf("congestion avoidance: %d", c.Window())
	}
	// Persistent congestion: minimum window.
	c.OnCongestionEvent(t2.Add(time.Second), LossEvent{LostBytes: 5000, LargestSentAt: t2.Add(time.Second), Persistent: true})
	if c.Window() != 2000 {
		t.Fatalf("persistent congestion: %d", c.Window())
	}
}

func TestNewRenoIgnoresNonCongestionLoss(t *testing.T) {
	for _, cause := range []Cause{CauseCorruption, CauseOutage} {
		c, _ := newVJ(t)
		w := c.Window()
		now := time.Unix(10, 0)
		c.OnCongestionEvent(now, LossEvent{LostBytes: 1000, LargestSentAt: now, Cause: cause})
		if c.Window() != w || !c.InSlowStart() {
			t.Errorf("%v loss changed the window %d -> %d", cause, w, c.Window())
		}
	}
}

func TestPacingRate(t *testing.T) {
	c, rtt := newVJ(t)
	rtt.Update(100*time.Millisecond, 0)
	if got, want := c.PacingRate(), 2*10000/0.1; got != want {
		t.Errorf("slow-start pacing %v, want %v", got, want)
	}
}

func TestRegistry(t *testing.T) {
	if _, err := New("nope", Params{MaxDatagramSize: 1000, RTT: NewRTTStats(time.Second)}); err == nil {
		t.Error("unknown controller accepted")
	}
	if c, err := New("", Params{MaxDatagramSize: 1000, RTT: NewRTTStats(time.Second)}); err != nil || c.Name() != DefaultName {
		t.Errorf("default: %v %v", c, err)
	}
	if !Known("vj") || !Known("") || Known("x") {
		t.Error("Known")
	}
	if _, err := New("vj", Params{MaxDatagramSize: 1000}); err == nil {
		t.Error("missing RTT accepted")
	}
}

// TestRegistryMatchesSettings: the controllers the config file may name
// (settings.Congestions) are the ones registered here, each under the name
// it gives itself; a controller added here must be named there too.
func TestRegistryMatchesSettings(t *testing.T) {
	named := slices.Sorted(slices.Values(settings.Congestions()))
	if got := Names(); !slices.Equal(got, named) {
		t.Errorf("registered controllers %v; settings.Congestions names %v: name each registered controller there", got, named)
	}
	for _, n := range Names() {
		c, err := New(n, Params{MaxDatagramSize: 1000, RTT: NewRTTStats(time.Second), SendRate: settings.MinRate})
		if err != nil {
			t.Errorf("controller %q: %v", n, err)
		} else if c.Name() != n {
			t.Errorf("controller registered as %q names itself %q", n, c.Name())
		}
	}
}
