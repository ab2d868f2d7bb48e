package scps

// This file checks the memory budget (memory.go): many stalled streams
// stay within it, and a new stream still starts at once.

import (
	"fmt"
	"testing"
	"time"

	"scpsvpn/scps/internal/streams"
)

// TestMemoryBudgetStalledUploads: 1000 uploads over GEO 10/2 toward a
// reader that never reads fill what the budget lets them; both sides stay
// within it (plus each stream's floor), and a request opened beside them,
// while they still send and once they stalled, gets its reply's first
// byte within 2 RTTs. Each upload's buffer is small then; when such
// streams went ahead of bulk like requests do, the request waited behind
// a frame of each (3.4 RTT with 1000, 5.7 with 2000).
func TestMemoryBudgetStalledUploads(t *testing.T) {
	const (
		n      = 1000
		budget = 96 << 20
		rtt    = 600 * time.Millisecond
	)
	s := newGEOSim(t, 2e6, 10e6, budget)
	requests := map[uint64]bool{}
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
		if requests[id] {
			return &appStream{expect: -1, resetAfter: -1, replyAfterEOF: 5 << 20}
		}
		return &appStream{expect: -1, resetAfter: -1, stallRead: true}
	}
	for i := range n {
		s.apps[0].open(fmt.Sprintf("stream-%d", 2*i), 1<<40, 0)
	}
	bound := uint64(budget + n*streams.SendFloor)
	var peak [2]int
	check := func() {
		for i := range 2 {
			peak[i] = max(peak[i], s.a[i].Stats().BufferedBytes)
			if r := s.a[i].streams.Flow.RecvMax - s.a[i].streams.Flow.Consumed; r > budget {
				t.Fatalf("side %d: %d bytes of receive credit outstanding, budget %d", i, r, budget)
			}
			if h := s.a[i].streams.Mem.SendHeld; h > bound {
				t.Fatalf("side %d: %d bytes in send buffers, bound %d", i, h, bound)
			}
		}
	}
	// request opens a request beside the uploads and waits for its
	// reply's first byte.
	request := func(when string) {
		id := s.a[0].streams.NextLocalID
		requests[id] = true
		st := s.apps[0].open(fmt.Sprintf("stream-%d", id), 100, -1)
		start := s.now
		s.runUntil(start+10*rtt, func() bool { check(); return st.received > 0 })
		if st.received == 0 {
			t.Fatalf("%s: a request got no reply in %v", when, 10*rtt)
		}
		wait := s.now - start
		t.Logf("%s: a request got its first reply byte after %v (%.1f RTT)", when, wait, wait.Seconds()/rtt.Seconds())
		if wait > 2*rtt+100*time.Millisecond {
			t.Errorf("%s: first reply byte after %v, want within 2 RTTs (%v)", when, wait, 2*rtt)
		}
	}
	// While the uploads still have credit to send with, and once the
	// reader's side has taken all the budget lets them have.
	s.runUntil(20*time.Second, func() bool { check(); return false })
	request("uploads sending")
	last, since := uint64(0), s.now
	s.runUntil(150*time.Second, func() bool {
		check()
		if got := s.a[1].streams.Flow.Recvd; got != last {
			last, since = got, s.now
		}
		return s.now-since > 10*time.Second
	})
	t.Logf("%d stalled uploads: %d bytes crossed in %v; peak buffered A %d, B %d (budget %d, bound with floors %d)",
		n, last, s.now.Round(time.Second), peak[0], peak[1], budget, bound)
	for i := range 2 {
		if uint64(peak[i]) > bound {
			t.Errorf("side %d held %d bytes in stream buffers, over %d", i, peak[i], bound)
		}
	}
	request("uploads stalled")
}

// TestMemoryBudgetKeepsOneStreamFast: a modest budget does not slow one
// bulk download over GEO 10 Mbit/s: its share covers the windows the link
// needs.
func TestMemoryBudgetKeepsOneStreamFast(t *testing.T) {
	s := newGEOSim(t, 10e6, 2e6, 32<<20)
	s.apps[0].open("stream-0", 1<<40, 0)
	s.runUntil(5*time.Second, func() bool { return false })
	b0 := s.apps[1].streams[0].received
	s.runUntil(15*time.Second, func() bool { return false })
	rate := float64(s.apps[1].streams[0].received-b0) * 8 / 10
	limit := payloadLimit(10e6, 0)
	t.Logf("one download with a 32 MiB budget: %.2f Mbit/s (%.1f%% of the payload limit)", rate/1e6, 100*rate/limit)
	if rate < 0.9*limit {
		t.Errorf("%.2f Mbit/s, want at least 90%% of %.2f", rate/1e6, limit/1e6)
	}
}

// TestSetMemoryShrinks: a running association given a smaller budget
// (an endpoint's reload that adds peers) keeps every byte it holds and
// carries on, and once what it held then is read, it stays within the
// new budget. Uploads toward a reader that stalls fill a 64 MiB budget;
// the budget drops to 16 MiB; the reader drains everything; when it
// stalls again, the receive credit beyond the initial stays within the
// smaller budget's eighth and the send buffers within a quarter of it
// and their floors (what the larger budget let them hold is far more).
func TestSetMemoryShrinks(t *testing.T) {
	const (
		n      = 50
		before = 64 << 20
		after  = 16 << 20
	)
	s := newGEOSim(t, 10e6, 2e6, before)
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
		return &appStream{expect: -1, resetAfter: -1, stallRead: true}
	}
	for i := range n {
		s.apps[0].open(fmt.Sprintf("stream-%d", 2*i), 1<<40, 0)
	}
	stall := func(on bool) {
		for _, st := range s.apps[1].streams {
			st.stallRead = on
			if !on {
				s.apps[1].service(st)
			}
		}
	}
	// peaks of what the budget bounds: A's send buffers, B's receive
	// credit granted beyond the initial and not read.
	var sendPeak, recvPeak uint64
	watch := func() bool {
		sendPeak = max(sendPeak, s.a[0].streams.Mem.SendHeld)
		recvPeak = max(recvPeak, s.a[1].streams.Mem.RecvGranted)
		return false
	}
	s.runUntil(30*time.Second, watch)
	t.Logf("budget %d MiB, reader stalled: send buffers %d, receive credit %d", before>>20, sendPeak, recvPeak)
	sendBound := uint64(after/4 + n*streams.SendFloor)
	if sendPeak <= sendBound || recvPeak <= after/8 {
		t.Fatalf("the stalled uploads held only %d in send buffers and %d in receive credit: nothing for a smaller budget to bound", sendPeak, recvPeak)
	}
	received := func() (b uint64) {
		for _, st := range s.apps[1].streams {
			b += st.received
		}
		return b
	}
	held := received()
	for i := range 2 {
		if err := s.a[i].SetMemory(after); err != nil {
			t.Fatal(err)
		}
	}
	stall(false)
	// What the sender wrote under the larger budget drains at its
	// streams' share of the link: the receiver whose reader stalled took
	// no more of it than was in flight (streams/readerstall.go). Read
	// until that is sent and acknowledged: the send buffers hold no more
	// than the new budget's eighth and their floors.
	s.runUntil(s.now+300*time.Second, func() bool {
		return s.a[0].streams.Mem.SendHeld <= after/8+n*streams.SendFloor && received() > held+uint64(after)
	})
	if got := received(); got <= held+uint64(after) {
		t.Fatalf("after the budget shrank the reader got %d more bytes, want the held data and more", got-held)
	}
	stall(true)
	sendPeak, recvPeak = 0, 0
	s.runUntil(s.now+30*time.Second, watch)
	t.Logf("budget %d MiB, reader stalled again: send buffers %d, receive credit %d", after>>20, sendPeak, recvPeak)
	if sendPeak > sendBound {
		t.Errorf("send buffers held %d, over a quarter of the new budget and the floors (%d)", sendPeak, sendBound)
	}
	if recvPeak > after/8 {
		t.Errorf("receive credit beyond the initial reached %d, over the new budget's eighth (%d)", recvPeak, after/8)
	}
	for i := range 2 {
		for _, st := range s.apps[i].streams {
			if st.resetErr != nil {
				t.Errorf("side %d stream %d: %v", i, st.id, st.resetErr)
			}
		}
	}
	if err := s.a[0].SetMemory(0); err == nil {
		t.Error("SetMemory(0) accepted: an association with a budget cannot drop it")
	}
}
