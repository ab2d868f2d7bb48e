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
	rounds := func() int {
		for n := 1; n <= 64; n++ {
			now = now.Add(rtt)
			if c.resume(now, 0, c.Window()) {
				return n
			}
		}
		return -1
	}
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
