package cc

// This file tests hybrid's competition mode beside a loss-based flow.

import (
	"testing"
	"time"
)

// ackRound feeds c one round of ACKs of cwnd bytes at rtt, delivered at
// rate bytes/s, ending at now; it returns when the round ended.
func ackRound(c *Hybrid, now time.Time, rtt time.Duration, rate float64) time.Time {
	n := max(c.Window()/mss, 1)
	step := time.Duration(float64(mss) / rate * float64(time.Second))
	for i := 0; i < n; i++ {
		now = now.Add(step)
		c.OnAck(now, AckEvent{AckedBytes: mss, PriorInFlight: c.Window(), LargestSentAt: now.Add(-rtt), RTTUpdated: true, RTT: rtt})
	}
	return now
}

func TestHybridCompetesWithAStandingQueue(t *testing.T) {
	base := 600 * time.Millisecond
	// Told 10 Mbit/s; a loss-based flow keeps 300 ms of queue whatever
	// hybrid does: after competeRounds hybrid stops cutting and grows.
	c := NewHybrid(Params{MaxDatagramSize: mss, RTT: NewRTTStats(base), SendRate: 10e6})
	c.p.RTT.Update(base, 0)
	c.ss = false
	now := t0.Add(base)
	for range 3 * competeRounds {
		c.p.RTT.Update(base+300*time.Millisecond, 0)
		now = ackRound(c, now, base+300*time.Millisecond, 0.2e6)
	}
	if !c.comp.on {
		t.Fatalf("no competition after %d rounds of a standing 300 ms queue (window %d)", 3*competeRounds, c.Window())
	}
	w := c.Window()
	now = ackRound(c, now, base+300*time.Millisecond, 0.2e6)
	if c.Window() <= w {
		t.Errorf("competing below a fair share, the window went %d -> %d, want growth", w, c.Window())
	}
	// The probe finds the queue gone (the competitor left): delay
	// control resumes.
	for i := 0; c.comp.on && i < 2*competeProbeEvery; i++ {
		now = ackRound(c, now, base, 0.6e6)
	}
	if c.comp.on {
		t.Error("still competing two probes after the queue drained")
	}
	// A queue of hybrid's own, its few packets, never starts competition.
	own := NewHybrid(Params{MaxDatagramSize: mss, RTT: NewRTTStats(base), SendRate: 10e6})
	own.p.RTT.Update(base, 0)
	own.ss = false
	now = t0.Add(base)
	for range 3 * competeRounds {
		now = ackRound(own, now, base+3*time.Millisecond, 1.2e6)
	}
	if own.comp.on {
		t.Error("a 3 ms queue started competition")
	}
}
