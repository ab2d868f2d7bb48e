package ackhandler

// This file tests the choice of tail copies: newest first, each packet
// once, never a copy, only packets younger than the age bound, within the
// credit, and a lost copy queues nothing.

import (
	"testing"
	"time"

	"scpsvpn/scps/internal/wire"
)

// sendData is send with a stream frame that carries n bytes; copy marks
// the packet a tail copy.
func sendData(h *SentPacketHandler, now time.Duration, n uint64, copy bool) uint64 {
	pn := h.NextPN()
	first := h.FrameEnd()
	f := h.AddFrame()
	f.Kind, f.ID, f.N = KindStream, pn, n
	h.OnPacketSent(now, SentPacket{SentAt: now, FirstFrame: first, NFrames: 1, Size: 1000, AckEliciting: true, InFlight: true, Copy: copy})
	return pn
}

func TestTailCopiesNewestFirstOnce(t *testing.T) {
	var h SentPacketHandler
	var log frameLog
	if err := h.Init(testConfig(), time.Unix(0, 0), time.Second, &log); err != nil {
		t.Fatal(err)
	}
	now := time.Second
	// A first exchange: the minimum RTT is 100 ms.
	sendData(&h, now, 1000, false)
	now += 100 * time.Millisecond
	h.OnAck(now, ackOf(t, wire.AckRange{Smallest: 0, Largest: 0}))
	// A burst of 40 packets, 1 ms apart, then nothing: what is younger
	// than the minimum RTT may be copied, newest first, each once.
	for range 40 {
		sendData(&h, now, 1000, false)
		now += time.Millisecond
	}
	var copied, copies []uint64
	var frames []SentFrame
	for {
		p := h.NextCopy(now)
		if p == nil {
			break
		}
		frames = h.TakeCopy(p, frames[:0])
		if len(frames) != 1 || frames[0].N != 1000 {
			t.Fatalf("copy frames %+v", frames)
		}
		copied = append(copied, frames[0].ID)
		copies = append(copies, sendData(&h, now, 1000, true)) // the copy goes out
	}
	if len(copied) == 0 || copied[0] != 40 {
		t.Fatalf("copied %v: want the newest packet (40) first", copied)
	}
	for i := 1; i < len(copied); i++ {
		if copied[i] != copied[i-1]-1 {
			t.Fatalf("copied %v: want newest first, each once", copied)
		}
	}
	// The credit bounds them: on a new association it starts at its cap,
	// half the window (a quarter of the bytes sent is added to it
	// after, up to that cap).
	credit := h.Controller().Window() / 2
	if want := (credit + 999) / 1000; len(copied) != want {
		t.Errorf("%d copies of a 40-packet burst, want the credit's %d", len(copied), want)
	}
	// Later, more credit: the rest of the burst younger than the minimum
	// RTT is copied (its repair would leave only once it is that old),
	// the older part is not.
	for range 100 {
		sendData(&h, now, 0, false) // control-only packets earn credit, carry no data
	}
	now += 80 * time.Millisecond
	late := 0
	for p := h.NextCopy(now); p != nil; p = h.NextCopy(now) {
		if p.SentAt < now-100*time.Millisecond {
			t.Fatalf("packet sent at %v copied at %v: older than the minimum RTT", p.SentAt, now)
		}
		late++
		h.TakeCopy(p, nil)
	}
	if late == 0 {
		t.Errorf("none of the burst copied at 81-100 ms of age, want the packets younger than the minimum RTT")
	}
	// A lost copy queues nothing: its original decides the repair.
	log.lost = nil
	first := h.NextPN()
	sendData(&h, now, 1000, true)
	sendData(&h, now, 1000, false)
	for range 3 {
		sendData(&h, now, 1000, false)
	}
	now += 100 * time.Millisecond
	h.OnAck(now, ackOf(t, wire.AckRange{Smallest: first + 2, Largest: first + 4}))
	lost := map[uint64]bool{}
	for _, id := range log.lost {
		lost[id] = true
	}
	if !lost[first+1] {
		t.Errorf("lost frames %v lack packet %d's", log.lost, first+1)
	}
	for _, pn := range append(copies, first) {
		if lost[pn] {
			t.Errorf("copy %d was lost and its frames handed back: %v", pn, log.lost)
		}
	}
}
