package scps

import (
	"testing"
	"time"
)

// TestPacerMakesUpLateWakes: told the link's rate, the pacer keeps no
// queue at the bottleneck, so each time a loaded host wakes the sender
// late the link idles; the pacer makes that time up at once (up to an
// RTT/16 and 10 ms). A sending host that stalls 5 ms in every 50 ms cost
// told GEO 10/2 1% 6 points of the limit before (93.2% after start-up,
// 99.0% without stalls); 15 ms in every 100 ms took told C2 from 99.7%
// to 95.8%. Told nothing the controller keeps a queue and loses little
// either way.
func TestPacerMakesUpLateWakes(t *testing.T) {
	cases := []struct {
		c          func() condition
		every, dur time.Duration
		want       float64 // % of the payload limit after start-up
	}{
		{condGEO, 50 * time.Millisecond, 5 * time.Millisecond, 98},
		{condC2, 100 * time.Millisecond, 15 * time.Millisecond, 98.5},
		{condAsym, 50 * time.Millisecond, 5 * time.Millisecond, 98},
	}
	for _, tc := range cases {
		c := tc.c()
		c.dur = 20 * time.Second
		c.fwd.SendStallEvery, c.fwd.SendStallFor = tc.every, tc.dur
		c.rev.StallEvery, c.rev.StallFor = tc.every, tc.dur
		r := measure(t, c, "hybrid", "auto", 1)
		got := 100 * r.afterStart / r.limit
		t.Logf("%s, the sender's host stalling %v every %v: %.2f%% of the limit after start-up, %.3f%% queue drops",
			c.name, tc.dur, tc.every, got, 100*r.queueLoss)
		if got < tc.want {
			t.Errorf("%s, host stalls %v/%v: %.2f%% of the limit after start-up, want >= %.1f%%", c.name, tc.dur, tc.every, got, tc.want)
		}
		if r.queueLoss > 0 {
			t.Errorf("%s: %.3f%% queue drops, want none", c.name, 100*r.queueLoss)
		}
	}
}
