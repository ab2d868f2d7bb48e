package bench

import (
	"testing"
	"time"
)

// TestBurstFigures: the careful-resume figures of a synthetic download on
// GEO 10/2 (600 ms): nothing for the first round trip after the first
// byte, half the limit for the second, the limit from then on. 90% is
// reached 1.8 RTT after the first byte, the third round trip is at the
// rate, and the goal reads the two as the issue states them.
func TestBurstFigures(t *testing.T) {
	c, ok := conditionByName("GEO-10/2-CLEAN-NORATE")
	if !ok {
		t.Fatal("no GEO-10/2-CLEAN-NORATE")
	}
	limit := c.PayloadCapacity() // bytes/s
	ttfb, rtt := 700*time.Millisecond, c.RTT
	rateAt := func(t time.Duration) float64 {
		switch {
		case t < ttfb+rtt:
			return 0
		case t < ttfb+2*rtt:
			return limit / 2
		}
		return limit
	}
	d := &sized{ttfb: ttfb, samples: []Sample{{}}}
	var got float64
	for at := resumeSampleEvery; ; at += resumeSampleEvery {
		got += rateAt(at-resumeSampleEvery) * resumeSampleEvery.Seconds()
		d.samples = append(d.samples, Sample{T: at, Bytes: int64(got)})
		if at >= ttfb+8*rtt {
			d.took = at
			break
		}
	}
	for _, tc := range []struct {
		name, want string
		drops      float64
	}{{CaseRestartBurst, "met", 0}, {CaseCapacityFell, "met", 1.9}, {CaseCapacityFell, "not met", 2.1}} {
		br := BurstResult{Case: tc.name, QueueDropPct: tc.drops}
		br.figures(d, c, int64(got))
		// The first round trip at 90%: a fifth of it at half the rate.
		if br.To90RTTs == nil || *br.To90RTTs < 1.75 || *br.To90RTTs > 1.85 {
			t.Errorf("%s: 90%% after %s RTT, want 1.8", tc.name, rttsCell(br.To90RTTs))
		}
		if br.ThirdRTTShare == nil || *br.ThirdRTTShare < 0.99 || *br.ThirdRTTShare > 1.01 {
			t.Errorf("%s: third round trip %+v of the limit, want 1", tc.name, br)
		}
		if g := br.resumeGoal(); g != tc.want {
			t.Errorf("%s with %.1f%% drops: goal %s, want %s", tc.name, tc.drops, g, tc.want)
		}
	}
	late := BurstResult{Case: CaseNewAssoc}
	d.samples = d.samples[:0:0]
	d.samples = append(d.samples, Sample{}, Sample{T: d.took, Bytes: int64(got)})
	late.figures(d, c, int64(got))
	if late.resumeGoal() != "not met" {
		t.Errorf("a download at an even rate from the dial reads as the rate within 2 RTT: %+v", late)
	}
}
