package ackhandler

// This file tests the handlers on their own: loss by packet and time
// threshold and the frames handed back, the history ring across growth,
// and the receiver's ACK policy.

import (
	"testing"
	"time"

	"scpsvpn/scps/cc"
	"scpsvpn/scps/internal/wire"
)

// frameLog records the frames a SentPacketHandler hands back, by stream id.
type frameLog struct{ acked, lost []uint64 }

func (l *frameLog) FrameAcked(f *SentFrame) { l.acked = append(l.acked, f.ID) }
func (l *frameLog) FrameLost(f *SentFrame)  { l.lost = append(l.lost, f.ID) }

func testConfig() Config {
	return Config{
		MaxPacketSize: 1200,
		InitialRTT:    100 * time.Millisecond,
		MinRTO:        200 * time.Millisecond,
		ProbeInterval: time.Second,
		MaxAckDelay:   25 * time.Millisecond,
		Congestion:    cc.DefaultName,
		RTTNoise:      time.Millisecond,
	}
}

// send builds one ack-eliciting packet at now whose single frame names
// stream id (the packet number, here) and records it.
func send(h *SentPacketHandler, now time.Duration) uint64 {
	pn := h.NextPN()
	first := h.FrameEnd()
	f := h.AddFrame()
	f.Kind, f.ID = KindStream, pn
	h.OnPacketSent(now, SentPacket{SentAt: now, FirstFrame: first, NFrames: 1, Size: 1000, AckEliciting: true, InFlight: true})
	return pn
}

// ackOf is the parsed ACK frame of the ranges given, highest first.
func ackOf(t *testing.T, rs ...wire.AckRange) *wire.Ack {
	t.Helper()
	var f wire.Frame
	if _, err := wire.ParseFrame(wire.AppendAck(nil, 0, rs), &f); err != nil {
		t.Fatal(err)
	}
	return &f.Ack
}

func TestLossByPacketAndTimeThreshold(t *testing.T) {
	var h SentPacketHandler
	var log frameLog
	if err := h.Init(testConfig(), time.Unix(0, 0), time.Second, &log); err != nil {
		t.Fatal(err)
	}
	now := time.Second
	for range 5 {
		send(&h, now)
		now += time.Millisecond
	}
	if h.ElicitingInFlight() != 5 || h.BytesInFlight() != 5000 {
		t.Fatalf("in flight: %d packets, %d bytes", h.ElicitingInFlight(), h.BytesInFlight())
	}
	now += 100 * time.Millisecond
	if !h.OnAck(now, ackOf(t, wire.AckRange{Smallest: 4, Largest: 4})) {
		t.Fatal("the ACK of packet 4 acknowledged nothing new")
	}
	// Packets 0 and 1 are 3 or more below the largest acknowledged: lost
	// at once. 2 and 3 wait for the time threshold.
	if len(log.acked) != 1 || log.acked[0] != 4 || len(log.lost) != 2 || log.lost[0] != 0 || log.lost[1] != 1 {
		t.Fatalf("acked %v, lost %v; want [4], [0 1]", log.acked, log.lost)
	}
	if st := h.Stats(); st.PacketsLost != 2 || st.BytesLost != 2000 || st.CongestionEvents != 1 {
		t.Fatalf("stats %+v", st)
	}
	dl := h.TimerDeadline()
	if dl <= now {
		t.Fatalf("loss timer %v not armed after %v", dl, now)
	}
	h.OnTimer(dl, false) // packet 2
	h.OnTimer(h.TimerDeadline(), false)
	if len(log.lost) != 4 || h.ElicitingInFlight() != 0 || h.BytesInFlight() != 0 {
		t.Fatalf("after the loss timer: lost %v, %d packets in flight", log.lost, h.ElicitingInFlight())
	}
	if _, ok := h.OldestSentAt(); ok {
		t.Fatal("resolved packets stayed in the history")
	}
}

// TestHistoryGrows checks that the rings keep packets and their frames
// matched while they grow and wrap: each packet's frames come back when it
// is acknowledged (highest first, as the ACK walks its ranges), whatever
// was resolved before.
func TestHistoryGrows(t *testing.T) {
	var h SentPacketHandler
	var log frameLog
	cfg := testConfig()
	cfg.Congestion = "rate" // no window to fill
	cfg.SendRate = 1e9
	if err := h.Init(cfg, time.Unix(0, 0), time.Second, &log); err != nil {
		t.Fatal(err)
	}
	now := time.Second
	next := uint64(0)
	for round := range 20 {
		n := 3 + round*7 // more each round: the rings grow and wrap
		for range n {
			send(&h, now)
		}
		now += time.Millisecond
		h.OnAck(now, ackOf(t, wire.AckRange{Smallest: next, Largest: h.NextPN() - 1}))
		for i, id := range log.acked {
			if want := h.NextPN() - 1 - uint64(i); id != want {
				t.Fatalf("round %d: frame of packet %d came back, want %d", round, id, want)
			}
		}
		next += uint64(len(log.acked))
		log.acked = log.acked[:0]
		if next != h.NextPN() || len(log.lost) > 0 {
			t.Fatalf("round %d: %d of %d acknowledged, lost %v", round, next, h.NextPN(), log.lost)
		}
	}
}

// TestAckAtOnce: a packet the sender marked (the first of a flight it
// times) is acknowledged at once, and the flight's other ACKs go where they
// would without it: after AckEvery packets counted from the flight's
// first, not from the one after it. A ten-packet first flight at
// 100 Mbit/s (1.2 ms) then comes back as two ACKs that time its arrival.
func TestAckAtOnce(t *testing.T) {
	var r ReceivedPacketHandler
	const every, delay = 10, 10 * time.Millisecond
	const gap = 120 * time.Microsecond // 1500 bytes at 100 Mbit/s
	now := time.Second
	r.OnReceived(0, now, true, every, delay)
	r.AckAtOnce()
	if !r.Due(now) {
		t.Fatal("no ACK due at once for a marked packet")
	}
	r.OnAckSent()
	for pn := uint64(1); pn < every; pn++ {
		now += gap
		r.OnReceived(pn, now, true, every, delay)
		if due := r.Due(now); due != (pn == every-1) {
			t.Fatalf("packet %d: ACK due %v, want an ACK at once only at the flight's tenth", pn+1, due)
		}
	}
	r.OnAckSent()
	// The next ACK by count comes AckEvery packets later, not AckEvery-1.
	for pn := uint64(every); pn < 2*every; pn++ {
		r.OnReceived(pn, now, true, every, delay)
		if due := r.Due(now); due != (pn == 2*every-1) {
			t.Fatalf("packet %d: ACK due %v after the flight's first ACKs", pn+1, due)
		}
	}
	// Unmarked, a first packet waits for the delay (TestAckPolicy).
	r.OnAckSent()
	r.OnReceived(2*every, now+time.Second, true, every, delay)
	if r.Due(now + time.Second) {
		t.Fatal("an ACK due at once for an unmarked packet")
	}
}

// TestAckAtOnceBatch: a marked packet taken in with the rest of its batch
// before the ACK leaves is a point of its own, timed from its arrival
// (the batch's), so the sender's train begins at the flight's first
// packet, not at the batch's last; with nothing after it, the ACK itself
// times it and no point goes out.
func TestAckAtOnceBatch(t *testing.T) {
	var r ReceivedPacketHandler
	r.SetTimed(true)
	const every, delay = 10, 10 * time.Millisecond
	now := time.Second
	r.OnReceived(0, now, true, every, delay)
	r.AckAtOnce()
	if at, _ := ackPointsOf(&r); len(at) != 0 {
		t.Fatalf("points for an ACK of the marked packet alone: %v", at)
	}
	for pn := uint64(1); pn < 8; pn++ {
		r.OnReceived(pn, now, true, every, delay)
	}
	at, frames := ackPointsOf(&r)
	if len(at) != 1 || at[0] != now || len(frames[0]) != 1 || frames[0][0] != (wire.AckRange{Smallest: 0, Largest: 0}) {
		t.Fatalf("points %v %v, want one at the marked packet (0) at %v", at, frames, now)
	}
	r.OnAckSent()
	if at, _ := ackPointsOf(&r); len(at) != 0 {
		t.Fatalf("points after the ACK went out: %v", at)
	}
}

func TestAckPolicy(t *testing.T) {
	var r ReceivedPacketHandler
	const every, delay = 10, 25 * time.Millisecond
	now := time.Second
	r.OnReceived(0, now, true, every, delay)
	if r.Due(now) {
		t.Fatal("an ACK is due at once after one in-order packet")
	}
	if dl, ok := r.Deadline(now); !ok || dl != now+delay {
		t.Fatalf("ACK deadline %v %v, want %v", dl, ok, now+delay)
	}
	r.OnReceived(2, now, true, every, delay) // 1 is missing
	if !r.Due(now) {
		t.Fatal("no ACK due at once after a hole")
	}
	rs := r.Ranges()
	if len(rs) != 2 || rs[0] != (wire.AckRange{Smallest: 2, Largest: 2}) || rs[1] != (wire.AckRange{Smallest: 0, Largest: 0}) {
		t.Fatalf("ranges %v", rs)
	}
	r.OnAckSent()
	if r.Due(now) || !r.Duplicate(2) || r.Duplicate(1) {
		t.Fatal("ACK state after sending")
	}
	r.OnAckAcked(2) // the peer knows about the hole: forget it
	if !r.Duplicate(1) || r.ReceivedTotal() != 0 {
		t.Fatalf("after the ACK was acknowledged: 1 duplicate %v, %d tracked", r.Duplicate(1), r.ReceivedTotal())
	}
}

// TestReceivedAckAckedAt: with several paths, the holes below an
// acknowledged ACK stay until the time given (a packet may still come on a
// slower path) and are forgotten at the first packet after it; raises
// closer than an eighth of the hold to the last are left out.
func TestReceivedAckAckedAt(t *testing.T) {
	var r ReceivedPacketHandler
	r.SetMultipath(true)
	const delay = 10 * time.Millisecond
	r.OnReceived(0, 0, true, 2, delay)
	r.OnReceived(2, 0, true, 2, delay) // 1 on its way on a slower path
	r.OnReceived(5, 0, true, 2, delay) // 3 and 4 too
	r.OnAckSent()
	r.OnAckAckedAt(5, 0, 100*time.Millisecond)
	r.OnAckAckedAt(5, time.Millisecond, 100*time.Millisecond) // no higher: ignored
	r.OnReceived(1, 50*time.Millisecond, true, 2, delay)
	if !r.Duplicate(1) || r.Duplicate(3) {
		t.Fatalf("before the hold ends: 1 duplicate %v, 3 duplicate %v: want 1 taken, 3 still awaited", r.Duplicate(1), r.Duplicate(3))
	}
	r.OnReceived(6, 100*time.Millisecond, true, 2, delay)
	if !r.Duplicate(3) || !r.Duplicate(4) || r.Duplicate(7) {
		t.Fatalf("after the hold: 3 duplicate %v, 4 %v, 7 %v: want the holes below 5 forgotten", r.Duplicate(3), r.Duplicate(4), r.Duplicate(7))
	}
	if rs := r.Ranges(); len(rs) != 1 || rs[0] != (wire.AckRange{Smallest: 6, Largest: 6}) {
		t.Fatalf("ranges after the hold %v: want only 6", rs)
	}
	r.OnReceived(9, 100*time.Millisecond, true, 2, delay)  // 7, 8 missing
	r.OnReceived(12, 100*time.Millisecond, true, 2, delay) // 10, 11 missing
	r.OnAckAckedAt(9, 100*time.Millisecond, 100*time.Millisecond)
	r.OnAckAckedAt(12, 105*time.Millisecond, 100*time.Millisecond) // too close: left out
	r.OnAckAckedAt(12, 120*time.Millisecond, 100*time.Millisecond)
	r.OnReceived(13, 200*time.Millisecond, true, 2, delay)
	if !r.Duplicate(8) || r.Duplicate(10) {
		t.Fatalf("at 200 ms: 8 duplicate %v, 10 %v: want only the holes below 9 forgotten", r.Duplicate(8), r.Duplicate(10))
	}
	r.OnReceived(14, 220*time.Millisecond, true, 2, delay)
	if !r.Duplicate(11) {
		t.Fatal("at 220 ms: 11 still awaited: want the holes below 12 forgotten")
	}
}

// ackPointsOf collects what Points hands out for the ranges an ACK
// would carry now.
func ackPointsOf(r *ReceivedPacketHandler) (at []time.Duration, frames [][]wire.AckRange) {
	r.Points(r.Ranges(), func(t time.Duration, rs []wire.AckRange) {
		at = append(at, t)
		frames = append(frames, append([]wire.AckRange(nil), rs...))
	})
	return at, frames
}

// TestAckPoints: a burst taken in one batch is answered by one ACK,
// preceded by the frames of its points (ackPoint): the train's first
// packet and the first and latest after which an ACK fell due, each cut
// at its packet and timed from its arrival; a point below too many holes
// is left out, and none go out while the ACK budget holds ACKs back.
func TestAckPoints(t *testing.T) {
	var r ReceivedPacketHandler
	r.SetTimed(true)
	const every, delay = 10, 25 * time.Millisecond
	arrival := func(pn uint64) time.Duration { return time.Second + time.Duration(pn)*50*time.Microsecond }
	for pn := uint64(0); pn < 32; pn++ {
		if pn != 5 { // a hole below the second point
			r.OnReceived(pn, arrival(pn), true, every, delay)
		}
	}
	at, frames := ackPointsOf(&r)
	want := []uint64{0, 10, 30} // the train's start, the 10th and (replacing the 20th) the 30th packet received
	if len(at) != len(want) {
		t.Fatalf("points %v %v, want at packets %v", at, frames, want)
	}
	for i, pn := range want {
		if at[i] != arrival(pn) || frames[i][0].Largest != pn {
			t.Errorf("point %d: at %v largest %d, want at %v largest %d", i, at[i], frames[i][0].Largest, arrival(pn), pn)
		}
	}
	if got := frames[1]; len(got) != 2 || got[0] != (wire.AckRange{Smallest: 6, Largest: 10}) || got[1] != (wire.AckRange{Smallest: 0, Largest: 4}) {
		t.Errorf("second point's ranges %v, want 6-10 and 0-4", got)
	}
	r.OnAckSent()
	if at, _ := ackPointsOf(&r); len(at) != 0 {
		t.Fatalf("points after the ACK went out: %v", at)
	}

	// Holes: more than maxPointRanges below a point leave it out.
	base := uint64(100)
	t0 := 2 * time.Second // a new train
	for i := uint64(0); i < 2*every; i++ {
		if i%2 == 1 && i < 12 {
			continue
		}
		r.OnReceived(base+i, t0+time.Duration(i)*time.Millisecond, true, every, delay)
	}
	if at, frames := ackPointsOf(&r); len(at) != 1 || frames[0][0].Largest != base {
		t.Errorf("points below six holes: %v %v, want only the train's start", at, frames)
	}

	// The ACK budget holds the ACK back: no points.
	r.OnAckSent()
	for pn := uint64(200); pn < 230; pn++ {
		r.OnReceived(pn, 3*time.Second+time.Duration(pn)*time.Microsecond, true, every, delay)
	}
	r.Defer()
	if at, _ := ackPointsOf(&r); len(at) != 0 {
		t.Errorf("points while the ACK budget defers: %v", at)
	}

	// Arrivals not timed by the host: no points.
	r.OnAckSent()
	r.SetTimed(false)
	for pn := uint64(300); pn < 330; pn++ {
		r.OnReceived(pn, 4*time.Second, true, every, delay)
	}
	if at, _ := ackPointsOf(&r); len(at) != 0 {
		t.Errorf("points of untimed arrivals: %v", at)
	}
}
