package scps

import (
	"testing"
	"time"
)

// nearEndStalls makes c's forward link's near end stall for f every e
// (linkParams.InStallEvery): the link idles, and what the sender paced
// out meanwhile enters it at once and queues for about f.
func nearEndStalls(c condition, e, f time.Duration) condition {
	c.fwd.InStallEvery, c.fwd.InStallFor = e, f
	c.name += ", near-end stalls"
	return c
}

// TestToldNearEndStalls: told the link's rate (GEO 10/2 Mbit/s, 1%), the
// link's near end stalls for 40 or 60 ms every 1.5 s, as the bench's
// userspace emulator does on a loaded host: each stall leaves a queue of
// its length that the link delivers at the told rate. Slow start, paced
// at that rate, does not end on it (Hybrid.toldHeld). Taken for a rate
// the link lacks, the queue ended slow start, the window fell to the pipe
// and below, and the window-limited sender lost link time at each later
// stall: 94.4% and 83.7% of the payload limit after start-up (now 98.9%
// and 98.7%; 98.9% without stalls).
func TestToldNearEndStalls(t *testing.T) {
	for _, f := range []time.Duration{40 * time.Millisecond, 60 * time.Millisecond} {
		c := nearEndStalls(condGEO(), 1500*time.Millisecond, f)
		c.dur = 30 * time.Second
		r := measure(t, c, "hybrid", LossAuto, 1)
		after := r.rateBetween(c.fwd.Delay+4*r.rtt, c.dur) / r.limit
		t.Logf("%v stalls: %.1f%% of the limit after start-up, %.1f%% overall, window %d, slow start %v, queue drops %.2f%%",
			f, 100*after, 100*r.overall/r.limit, r.stats.Cwnd, r.stats.InSlowStart, 100*r.queueLoss)
		if after < 0.97 {
			t.Errorf("%v stalls: %.1f%% of the limit after start-up, want >= 97%%", f, 100*after)
		}
		if r.queueLoss >= 0.01 {
			t.Errorf("%v stalls: queue drops %.2f%%, want < 1%%", f, 100*r.queueLoss)
		}
	}
}
