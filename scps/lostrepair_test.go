package scps

import (
	"testing"
	"time"
)

// TestLostRepairKeepsSending: a told GEO download loses a packet and then
// its repair while an earlier hole, repaired once, holds the reader. The
// hole waits two repair round trips; the stream credit ahead of the read
// point must cover what the sender sends meanwhile, or it stops short.
func TestLostRepairKeepsSending(t *testing.T) {
	worst := time.Duration(0)
	for off := time.Duration(0); off < 750*time.Millisecond; off += 150 * time.Millisecond {
		for _, ahead := range []time.Duration{0, 200 * time.Millisecond, 400 * time.Millisecond} {
			stop := lostRepairStop(t, 10*time.Second+off, ahead)
			worst = max(worst, stop)
		}
	}
	t.Logf("longest time the sender sent no new data: %v", worst)
	if worst > 20*time.Millisecond {
		t.Errorf("the sender sent no new data for %v behind a lost repair, want <= 20ms", worst)
	}
}

// lostRepairStop drops the first data packet sent at or after at and the
// first repair sent half a second or more after it, and with ahead > 0
// the first data packet sent ahead before at; it returns the longest
// time the sender then sent no new stream bytes.
func lostRepairStop(t *testing.T, at, ahead time.Duration) time.Duration {
	c := condGEO()
	c.fwd.Loss, c.rev.Loss = 0, 0
	c.download = true
	s := simOver(t, c, DefaultConfig(), 1)
	s.apps[0].onAccept = func(id uint64, meta []byte) *appStream {
		return &appStream{toSend: 1 << 40, expect: -1, resetAfter: -1}
	}
	s.apps[1].onAccept = nil
	s.apps[1].open("stream-1", 300, -1)
	earlier := ahead == 0
	phase, retx := 0, uint64(0)
	s.observe = func(from int, pkt []byte) bool {
		if from != 0 || len(pkt) < 1000 {
			return false
		}
		switch {
		case !earlier && s.now >= at-ahead:
			earlier = true
			return true
		case phase == 0 && s.now >= at:
			phase = 1
			return true
		case phase == 1 && s.now >= at+500*time.Millisecond:
			phase, retx = 2, s.a[0].Stats().Retransmits
		case phase == 2 && s.a[0].Stats().Retransmits > retx:
			phase = 3
			return true
		}
		return false
	}
	s.runUntil(at-ahead-time.Second, func() bool { return false })
	var stop, since time.Duration
	sent := s.a[0].Stats().StreamBytesSent
	for s.now < at+3*time.Second {
		s.runUntil(s.now+5*time.Millisecond, func() bool { return false })
		if n := s.a[0].Stats().StreamBytesSent; n != sent {
			sent, since = n, s.now
		}
		stop = max(stop, s.now-since-5*time.Millisecond)
		if since == 0 {
			since = s.now
		}
	}
	if phase != 3 {
		t.Fatalf("at %v ahead %v: phase %d, the second repair was not seen", at, ahead, phase)
	}
	return stop
}
