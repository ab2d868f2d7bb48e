package scps

import (
	"fmt"
	"math"
	"testing"
	"time"

	"scpsvpn/scps/internal/streams"
)

// TestLostRepairKeepsSending: a told GEO download loses a packet and then
// its repair while an earlier hole, repaired once, holds the reader. The
// hole waits two repair round trips; the stream credit ahead of the read
// point must cover what the sender sends meanwhile, or it stops short.
func TestLostRepairKeepsSending(t *testing.T) {
	worst := lostRepairStop{credit: math.MaxUint64}
	for off := time.Duration(0); off < 750*time.Millisecond; off += 150 * time.Millisecond {
		for _, ahead := range []time.Duration{0, 200 * time.Millisecond, 400 * time.Millisecond} {
			worst = worst.max(runLostRepair(t, 10*time.Second+off, ahead, 1))
		}
	}
	t.Logf("longest time the sender sent no new data: %v", worst)
	if worst.stop > 20*time.Millisecond {
		t.Errorf("the sender sent no new data for %v behind a lost repair, want <= 20ms", worst)
	}
}

// TestRepairLostTwiceKeepsSending: as TestLostRepairKeepsSending, the
// repair lost twice: the hole waits three repair round trips, 1.8 s at
// the reader (through the binary, in two runs of 17 whose emulator drew
// the same losses, a hole held the client 1.85 s after its packet was
// due, and the sender stopped 0.40-0.45 s, 2.27-2.31 MB beyond what the
// client had read: the stream's credit of a 3 MB window). The sender
// must go on sending new data until the credit that follows the third
// repair comes back, 4 round trips after the packet left. With the
// window's credit alone (four products, moved by quarters: three ahead
// of the reader at the least) it stopped 0.45 s, on the stream's credit;
// what waits behind a long hole now adds to it (streams' holecredit.go).
func TestRepairLostTwiceKeepsSending(t *testing.T) {
	worst := lostRepairStop{credit: math.MaxUint64}
	for off := time.Duration(0); off < 750*time.Millisecond; off += 150 * time.Millisecond {
		worst = worst.max(runLostRepair(t, 6*time.Second+off, 0, 2))
	}
	t.Logf("longest time the sender sent no new data: %v", worst)
	if worst.stop > 20*time.Millisecond {
		t.Errorf("the sender sent no new data for %v behind a repair lost twice, want <= 20ms", worst)
	}
}

// lostRepairStop is the longest time a sender sent no new stream data,
// and what held it then.
type lostRepairStop struct {
	stop  time.Duration
	limit string
	hole  time.Duration // the reader's longest wait for in-order data
	// credit is the least stream credit the sender had left while it
	// had data unsent.
	credit uint64
}

func (s lostRepairStop) max(o lostRepairStop) lostRepairStop {
	hole, credit := max(s.hole, o.hole), min(s.credit, o.credit)
	if o.stop > s.stop {
		s = o
	}
	s.hole, s.credit = hole, credit
	return s
}

func (s lostRepairStop) String() string {
	if s.limit == "" {
		return fmt.Sprintf("%v, the reader waited %v, the least stream credit left %d", s.stop, s.hole, s.credit)
	}
	return fmt.Sprintf("%v (%s), the reader waited %v", s.stop, s.limit, s.hole)
}

// runLostRepair drops the first data packet sent at or after at and then
// its first lost repairs (each the first repair sent half a second or
// more after the packet or repair before it), and with ahead > 0 the
// first data packet sent ahead before at; it returns the longest time
// the sender then sent no new stream bytes, and what held it.
func runLostRepair(t *testing.T, at, ahead time.Duration, lost int) lostRepairStop {
	c := condGEO()
	c.fwd.Loss, c.rev.Loss = 0, 0
	c.download = true
	s := simOver(t, c, DefaultConfig(), 1)
	s.apps[0].onAccept = func(id uint64, meta []byte) *appStream {
		return &appStream{toSend: 1 << 40, expect: -1, resetAfter: -1}
	}
	s.apps[1].onAccept = nil
	reader := s.apps[1].open("stream-1", 300, -1)
	earlier := ahead == 0
	dropped, last, retx := 0, time.Duration(0), uint64(0)
	waiting := false
	s.observe = func(from int, pkt []byte) bool {
		if from != 0 || len(pkt) < 1000 {
			return false
		}
		switch {
		case !earlier && s.now >= at-ahead:
			earlier = true
			return true
		case dropped == 0 && s.now >= at:
			dropped, last = 1, s.now
			return true
		case dropped > 0 && dropped <= lost && !waiting && s.now >= last+500*time.Millisecond:
			waiting, retx = true, s.a[0].Stats().Retransmits
		case waiting && s.a[0].Stats().Retransmits > retx:
			waiting = false
			dropped, last = dropped+1, s.now
			return true
		}
		return false
	}
	s.runUntil(at-ahead-time.Second, func() bool { return false })
	worst := lostRepairStop{credit: math.MaxUint64}
	var since time.Duration
	sent := s.a[0].Stats().StreamBytesSent
	limit := ""
	read, readAt := reader.received, s.now
	for s.now < at+time.Duration(lost+2)*time.Second {
		s.runUntil(s.now+5*time.Millisecond, func() bool { return false })
		if n := s.a[0].Stats().StreamBytesSent; n != sent {
			sent, since, limit = n, s.now, ""
		} else if limit == "" {
			limit = senderLimit(s.a[0])
		}
		if stop := s.now - since - 5*time.Millisecond; stop > worst.stop {
			worst.stop, worst.limit = stop, limit
		}
		if since == 0 {
			since = s.now
		}
		if bulk := bulkStream(s.a[0]); bulk != nil && bulk.Unsent() > 0 {
			worst.credit = min(worst.credit, bulk.SendCredit())
		}
		if reader.received != read {
			worst.hole = max(worst.hole, s.now-readAt)
			read, readAt = reader.received, s.now
		}
	}
	if dropped != lost+1 {
		t.Fatalf("at %v ahead %v: %d of %d packets dropped, the repairs were not seen", at, ahead, dropped, lost+1)
	}
	return worst
}

// senderLimit says what holds a's bulk stream (the one holding the most
// written data) from sending new data: its stream credit, the
// association's credit, nothing written left unsent (the send buffer
// full of data not acknowledged), or the congestion window.
func senderLimit(a *Association) string {
	bulk := bulkStream(a)
	if bulk == nil {
		return "no stream"
	}
	f := a.streams.Flow
	st := a.Stats()
	held := fmt.Sprintf("stream credit %d, association credit %d, unsent %d, send buffer %d of %d, in flight %d of %d",
		bulk.SendCredit(), int64(f.PeerMax)-int64(f.Sent), bulk.Unsent(), bulk.SendHeld(), bulk.SendWindow(), st.BytesInFlight, st.Cwnd)
	switch {
	case bulk.Unsent() == 0:
		return "nothing unsent: " + held
	case bulk.SendCredit() < DefaultMaxPacketSize:
		return "stream credit: " + held
	case f.Sent+DefaultMaxPacketSize > f.PeerMax:
		return "association credit: " + held
	case st.BytesInFlight >= st.Cwnd:
		return "congestion window: " + held
	}
	return "pacer: " + held
}

// bulkStream is a's stream holding the most written data.
func bulkStream(a *Association) *streams.State {
	var bulk *streams.State
	for _, st := range a.streams.ByID {
		if bulk == nil || st.SendHeld() > bulk.SendHeld() {
			bulk = st
		}
	}
	return bulk
}
