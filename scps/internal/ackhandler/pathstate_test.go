package ackhandler

import (
	"testing"
	"time"

	"scpsvpn/scps/internal/wire"
)

// twoPaths is a handler with path 0 and a path 1 of 600 ms initial RTT,
// at its clock's now.
func twoPaths(t *testing.T) (h *SentPacketHandler, log *frameLog, now time.Duration) {
	t.Helper()
	h, log, now = &SentPacketHandler{}, &frameLog{}, time.Second
	if err := h.Init(testConfig(), time.Unix(0, 0), now, log); err != nil {
		t.Fatal(err)
	}
	if err := h.SetPath(1, PathConfig{InitialRTT: 600 * time.Millisecond}, now); err != nil {
		t.Fatal(err)
	}
	return h, log, now
}

// TestPathsJudgedApart: a packet on a slow path is not lost because later
// packets of a fast path were acknowledged first; each path counts its own
// bytes in flight and measures its own RTT.
func TestPathsJudgedApart(t *testing.T) {
	h, log, now := twoPaths(t)
	h.Use(1)
	slow := send(h, now)
	h.Use(0)
	for range 5 {
		send(h, now)
	}
	if h.PathInFlight(1) != 1000 || h.PathInFlight(0) != 5000 || h.BytesInFlight() != 6000 {
		t.Fatalf("in flight %d on 0, %d on 1, %d in all", h.PathInFlight(0), h.PathInFlight(1), h.BytesInFlight())
	}
	now += 50 * time.Millisecond
	h.OnAck(now, ackOf(t, wire.AckRange{Smallest: slow + 1, Largest: slow + 5}))
	if len(log.lost) != 0 {
		t.Fatalf("lost %v after the fast path's ACK: the slow path's packet is judged on its own path", log.lost)
	}
	if got := h.PathRTT(0).Smoothed(); got != 50*time.Millisecond {
		t.Errorf("fast path RTT %v, want 50ms", got)
	}
	now += 550 * time.Millisecond
	h.OnAck(now, ackOf(t, wire.AckRange{Smallest: slow, Largest: slow + 5}))
	if got := h.PathRTT(1).Smoothed(); got != 600*time.Millisecond {
		t.Errorf("slow path RTT %v, want 600ms", got)
	}
	if h.PathInFlight(1) != 0 || h.BytesInFlight() != 0 || len(log.lost) != 0 {
		t.Errorf("after both ACKs: %d in flight on path 1, %d in all, lost %v", h.PathInFlight(1), h.BytesInFlight(), log.lost)
	}
	// A packet of the slow path is lost by its own path's evidence: an
	// ACK that reaches below it shows it missing (one that does not says
	// nothing of it).
	h.Use(1)
	a, b := send(h, now), send(h, now)
	c, d := send(h, now), send(h, now)
	h.OnAck(now+600*time.Millisecond, ackOf(t, wire.AckRange{Smallest: b, Largest: d}))
	if len(log.lost) != 0 {
		t.Fatalf("lost %v on an ACK that does not reach below them", log.lost)
	}
	h.OnAck(now+600*time.Millisecond, ackOf(t, wire.AckRange{Smallest: b, Largest: d}, wire.AckRange{Smallest: slow, Largest: slow + 5}))
	if len(log.lost) != 1 || log.lost[0] != a || c != a+2 {
		t.Errorf("lost %v, want [%d]", log.lost, a)
	}
	// LosePath loses one path's packets only.
	h.Use(0)
	send(h, now)
	h.Use(1)
	send(h, now)
	h.LosePath(now, 1)
	if h.PathInFlight(1) != 0 || h.PathInFlight(0) != 1000 {
		t.Errorf("after LosePath(1): %d in flight on 0, %d on 1", h.PathInFlight(0), h.PathInFlight(1))
	}
}

// TestMultipathAckRanges: with several paths an ACK reports the range of
// every packet that arrived since the last ACK, a late one on a slow path
// too, below more holes than a single path's ACK holds; with one path it
// reports the newest maxAckRanges ranges only.
func TestMultipathAckRanges(t *testing.T) {
	for _, multi := range []bool{false, true} {
		var r ReceivedPacketHandler
		r.SetMultipath(multi)
		now := time.Second
		for pn := uint64(0); pn < 200; pn += 2 { // the odd ones are on a slow path
			r.OnReceived(pn, now, true, 2, time.Millisecond)
		}
		r.OnReceived(1, now, true, 2, time.Millisecond)
		rs := r.Ranges()
		has := false
		for _, x := range rs {
			if x.Smallest <= 1 && 1 <= x.Largest {
				has = true
			}
		}
		want := maxAckRanges
		if multi {
			want = 99 // 0-2, then 4, 6, ... 198 apart
		}
		if len(rs) != want || rs[0].Largest != 198 || has != multi {
			t.Errorf("multipath %v: %d ranges from %d, packet 1's range reported %v", multi, len(rs), rs[0].Largest, has)
		}
		for i := 1; i < len(rs); i++ {
			if rs[i].Largest+1 >= rs[i-1].Smallest {
				t.Fatalf("multipath %v: ranges %v not descending and apart", multi, rs)
			}
		}
	}
}

// TestPathRTTFromItsOwnLoop: a path's RTT takes the ACKs that came back
// over another path only until one came back over the path itself; that
// one starts it afresh, and later ACKs back over another path time it no
// more. A 600 ms GEO path's packet acknowledged over a 40 ms LEO takes
// 320 ms, which the GEO's loop never does.
func TestPathRTTFromItsOwnLoop(t *testing.T) {
	h, _, now := twoPaths(t)
	h.Use(1)
	ackOn := func(sent, rtt time.Duration, on int) {
		t.Helper()
		pn := send(h, sent)
		h.OnAckOn(sent+rtt, ackOf(t, wire.AckRange{Smallest: pn, Largest: pn}), on)
	}
	ackOn(now, 320*time.Millisecond, 0)
	if got := h.PathRTT(1).Min(); got != 320*time.Millisecond {
		t.Fatalf("before any ACK over the path itself: min RTT %v, want the 320ms another path's ACK took", got)
	}
	now += time.Second
	ackOn(now, 600*time.Millisecond, 1)
	if r := h.PathRTT(1); r.Min() != 600*time.Millisecond || r.Smoothed() != 600*time.Millisecond || r.Samples() != 1 {
		t.Fatalf("after an ACK over the path: min %v, smoothed %v, %d samples; want 600ms from that one sample", r.Min(), r.Smoothed(), r.Samples())
	}
	now += time.Second
	ackOn(now, 320*time.Millisecond, 0)
	if r := h.PathRTT(1); r.Min() != 600*time.Millisecond || r.Samples() != 1 {
		t.Errorf("an ACK over another path after one over the path: min %v, %d samples; want it left out", r.Min(), r.Samples())
	}
}

// TestMultipathAckBatch: a host that takes its packets in batches takes
// in a slow path's packets and then more than lateFills of a fast path's
// (in runs between the slow path's holes, more holes above the slow
// path's packets than an ACK holds) before its next ACK. Every
// packet that arrived is in an ACK: the slow path's in the first, or the
// next ones if the first has no room.
func TestMultipathAckBatch(t *testing.T) {
	var r ReceivedPacketHandler
	r.SetMultipath(true)
	now := time.Second
	reported := map[uint64]bool{}
	ack := func() {
		rs := r.Ranges()
		for _, x := range rs {
			for pn := x.Smallest; pn <= x.Largest; pn++ {
				reported[pn] = true
			}
		}
		r.OnAckRanges(rs)
		r.OnAckSent()
	}
	var slow []uint64
	for batch := range uint64(20) {
		// 100 packets per batch: every tenth on the slow path, which
		// arrive four batches late (the slow path's delay), below 40
		// holes.
		base := batch * 100
		if batch >= 4 {
			for pn := base - 400; pn < base-300; pn += 10 {
				r.OnReceived(pn, now, true, 10, time.Millisecond)
				slow = append(slow, pn)
			}
		}
		for pn := base; pn < base+100; pn++ {
			if pn%10 != 0 {
				r.OnReceived(pn, now, true, 10, time.Millisecond)
			}
		}
		ack()
		ack() // a second ACK before the next batch
		now += 10 * time.Millisecond
	}
	missed := 0
	for _, pn := range slow {
		if !reported[pn] {
			missed++
		}
	}
	if missed > 0 {
		t.Errorf("%d of the slow path's %d packets were in no ACK", missed, len(slow))
	}
}
