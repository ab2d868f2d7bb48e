package scps

// This file checks the cut of a stalled reader's credit
// (internal/streams/readerstall.go) on a simulated GEO link: what
// streams whose readers stop, or read slowly, cost the other streams.

import (
	"fmt"
	"testing"
	"time"
)

// TestStalledReadersLeaveTheLink: ten streams whose readers never read,
// opened 8 s before a fresh one, on a 10 Mbit/s GEO link, its rate told
// (every new stream gets four bandwidth-delay products of credit at
// once) and not (1 MiB, and the rate the first packets arrive at sizes
// the windows of readers that keep up). The stalled streams take what was in flight when
// their credit was cut and a window beyond, so the fresh stream gets the
// link after its start-up. With the credit left as granted they took 3
// MB each, 25 s of the link, and the fresh one a share of it.
func TestStalledReadersLeaveTheLink(t *testing.T) {
	for _, told := range []bool{true, false} {
		t.Run(map[bool]string{true: "told", false: "untold"}[told], func(t *testing.T) { stalledReadersLeaveTheLink(t, told) })
	}
}

func stalledReadersLeaveTheLink(t *testing.T, told bool) {
	s := newGEOSimTold(t, 10e6, 2e6, 0, told)
	const rtt = 600 * time.Millisecond
	stall := true
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
		return &appStream{expect: -1, resetAfter: -1, stallRead: stall}
	}
	for i := range 10 {
		s.apps[0].open(fmt.Sprintf("stream-%d", 2*i), 1<<40, 0)
	}
	s.runUntil(8*time.Second, func() bool { return false })
	stall = false
	s.apps[0].open("stream-20", 1<<40, 0)
	fresh := func() *appStream { return s.apps[1].streams[20] }
	start := s.now
	s.runUntil(start+20*time.Second, func() bool { return fresh() != nil && fresh().received > 0 })
	if fresh() == nil {
		t.Fatal("the fresh stream never delivered")
	}
	// After its start-up: four round trips after its first byte.
	from := s.now + 4*rtt
	s.runUntil(from, func() bool { return false })
	b0 := fresh().received
	s.runUntil(from+10*time.Second, func() bool { return false })
	rate := float64(fresh().received-b0) * 8 / 10
	limit := payloadLimit(10e6, 0)
	var took uint64
	for i := range 10 {
		took += s.a[1].streams.ByID[uint64(2*i)].Received()
	}
	t.Logf("ten stalled streams took %d bytes of the link; the fresh one then got %.2f Mbit/s (%.1f%% of the payload limit)", took, rate/1e6, 100*rate/limit)
	if rate < 0.9*limit {
		t.Errorf("fresh stream: %.2f Mbit/s beside ten stalled ones, want at least 90%% of %.2f", rate/1e6, limit/1e6)
	}
}

// TestSlowReaderCostsItsRate: a reader of 100 kB/s beside a bulk stream
// on a 10 Mbit/s GEO link, told and untold, costs the link about its read rate: over 20 s
// no more crosses for it than it read, what was in flight when its
// credit was cut, and a window beyond. With the credit left as granted
// its first four bandwidth-delay products crossed at once, 3 MB that it
// took 30 s to read.
func TestSlowReaderCostsItsRate(t *testing.T) {
	for _, told := range []bool{true, false} {
		t.Run(map[bool]string{true: "told", false: "untold"}[told], func(t *testing.T) { slowReaderCostsItsRate(t, told) })
	}
}

func slowReaderCostsItsRate(t *testing.T, told bool) {
	s := newGEOSimTold(t, 10e6, 2e6, 0, told)
	const readRate = 100_000 // bytes per second
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
		return &appStream{expect: -1, resetAfter: -1, stallRead: id == 2}
	}
	s.apps[0].open("stream-0", 1<<40, 0)
	s.apps[0].open("stream-2", 1<<40, 0)
	buf := make([]byte, 4096)
	var read uint64
	s.runUntil(20*time.Second, func() bool {
		if _, ok := s.apps[1].streams[2]; !ok {
			return false // not open yet
		}
		due := uint64(s.now.Seconds() * readRate)
		for read < due {
			n, err := s.a[1].StreamRead(2, buf[:min(uint64(len(buf)), due-read)])
			if err != nil {
				t.Fatalf("slow read: %v", err)
			}
			if n == 0 {
				break
			}
			read += uint64(n)
		}
		return false
	})
	slow := s.a[1].streams.ByID[2]
	cost := float64(slow.Received()) / 20
	bulk := float64(s.apps[1].streams[0].received) * 8 / 20
	limit := payloadLimit(10e6, 0)
	t.Logf("slow reader read %.0f kB/s, the link carried %.0f kB/s for it; the bulk stream got %.2f Mbit/s (%.1f%% of the payload limit)",
		float64(read)/20/1000, cost/1000, bulk/1e6, 100*bulk/limit)
	if cost > 1.5*readRate {
		t.Errorf("the slow reader cost the link %.0f kB/s, want at most 1.5 times its %d kB/s", cost/1000, readRate/1000)
	}
	if float64(read) < 0.9*readRate*20 {
		t.Errorf("the slow reader read %d bytes in 20 s, want about %d", read, readRate*20)
	}
}
