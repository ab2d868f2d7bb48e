package scps

// This file tests complete transfers over the simulated link: many streams
// in both directions under loss, reordering, duplication and burst loss.

import (
	"fmt"
	"testing"
	"time"
)

// transferSpec: side 0 opens streams; stream i sends up[i] bytes and the
// peer answers with down[i] bytes.
type transferSpec struct {
	up, down []uint64
}

func sizesSpec(n int, seed uint64, maxUp, maxDown uint64) transferSpec {
	var sp transferSpec
	x := seed*2654435761 + 1
	next := func(m uint64) uint64 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		if m == 0 {
			return 0
		}
		// mix of tiny, small and large
		switch x % 4 {
		case 0:
			return x % 100
		case 1:
			return x % 5000
		default:
			return x % m
		}
	}
	for i := 0; i < n; i++ {
		sp.up = append(sp.up, next(maxUp))
		sp.down = append(sp.down, next(maxDown))
	}
	return sp
}

// startTransfer opens the streams of sp on side 0 and answers on side 1.
func startTransfer(s *sim, sp transferSpec) {
	s.attach()
	byID := map[uint64]int{}
	for i := range sp.up {
		id := uint64(2 * i)
		byID[id] = i
	}
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
		i, ok := byID[id]
		if !ok {
			s.t.Fatalf("unexpected stream %d", id)
		}
		return &appStream{toSend: sp.down[i], expect: int64(sp.up[i]), resetAfter: -1}
	}
	for i := range sp.up {
		s.apps[0].open(fmt.Sprintf("stream-%d", 2*i), sp.up[i], int64(sp.down[i]))
	}
}

func checkTransfer(t *testing.T, s *sim, sp transferSpec) {
	t.Helper()
	for side := 0; side < 2; side++ {
		for id, st := range s.apps[side].streams {
			if !st.eof || !st.closed || st.closeErr != nil || st.resetErr != nil {
				t.Errorf("side %d stream %d: eof=%v closed=%v closeErr=%v resetErr=%v received=%d/%d written=%d/%d",
					side, id, st.eof, st.closed, st.closeErr, st.resetErr, st.received, st.expect, st.written, st.toSend)
			}
		}
		if n := s.a[side].Stats().StreamsOpen; n != 0 {
			t.Errorf("side %d: %d streams still in the table", side, n)
		}
	}
	if got := s.apps[1].accepted; got != len(sp.up) {
		t.Errorf("accepted %d streams, want %d", got, len(sp.up))
	}
}

func TestTransferClean(t *testing.T) {
	link := linkParams{Rate: 10e6, Delay: 20 * time.Millisecond}
	s := newSim(t, 1, DefaultConfig(), DefaultConfig(), link, link)
	sp := sizesSpec(10, 1, 200_000, 200_000)
	startTransfer(s, sp)
	ok := s.runUntil(60*time.Second, func() bool { return s.apps[0].done() && s.apps[1].done() })
	if !ok {
		t.Fatalf("transfer did not finish by %v", s.now)
	}
	checkTransfer(t, s, sp)
	st := s.a[0].Stats()
	t.Logf("finished at %v; side0 %+v", s.now, st)
}

// BufferedBytes counts the stream buffers' memory: some while a transfer
// runs, none once every stream is done.
func TestBufferedBytes(t *testing.T) {
	link := linkParams{Rate: 1e6, Delay: 100 * time.Millisecond}
	s := newSim(t, 1, DefaultConfig(), DefaultConfig(), link, link)
	sp := sizesSpec(4, 1, 500_000, 500_000)
	startTransfer(s, sp)
	if !s.runUntil(10*time.Second, func() bool { return s.a[0].Stats().BufferedBytes > 0 && s.a[1].Stats().BufferedBytes > 0 }) {
		t.Fatalf("no buffered bytes during the transfer: %+v / %+v", s.a[0].Stats(), s.a[1].Stats())
	}
	if !s.runUntil(120*time.Second, func() bool { return s.apps[0].done() && s.apps[1].done() }) {
		t.Fatalf("transfer did not finish by %v", s.now)
	}
	checkTransfer(t, s, sp)
	for side := range 2 {
		if n := s.a[side].Stats().BufferedBytes; n != 0 {
			t.Errorf("side %d: %d bytes still buffered after the transfer", side, n)
		}
	}
}

func TestTransferImpaired(t *testing.T) {
	base := linkParams{Rate: 10e6, Delay: 20 * time.Millisecond, QueueBytes: 200_000}
	cases := []struct {
		name string
		mod  func(*linkParams)
	}{
		{"loss3", func(p *linkParams) { p.Loss = 0.03 }},
		{"loss20", func(p *linkParams) { p.Loss = 0.20 }},
		{"reorder", func(p *linkParams) { p.Reorder = 0.1; p.ReorderDelay = 15 * time.Millisecond }},
		{"dup", func(p *linkParams) { p.Dup = 0.1 }},
		{"burst", func(p *linkParams) { p.BurstEnter = 0.01; p.BurstLeave = 0.3 }},
		{"everything", func(p *linkParams) {
			p.Loss = 0.05
			p.Dup = 0.05
			p.Reorder = 0.05
			p.ReorderDelay = 5 * time.Millisecond
			p.BurstEnter = 0.005
			p.BurstLeave = 0.5
		}},
	}
	for _, c := range cases {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%s/seed%d", c.name, seed), func(t *testing.T) {
				p := base
				c.mod(&p)
				s := newSim(t, seed, DefaultConfig(), DefaultConfig(), p, p)
				sp := sizesSpec(24, seed, 300_000, 300_000)
				startTransfer(s, sp)
				if !s.runUntil(600*time.Second, func() bool { return s.apps[0].done() && s.apps[1].done() }) {
					for side := 0; side < 2; side++ {
						for id, st := range s.apps[side].streams {
							if !st.closed {
								t.Logf("side %d stream %d: %+v", side, id, *st)
							}
						}
						t.Logf("side %d: %+v", side, s.a[side].Stats())
					}
					t.Fatalf("transfer did not finish by %v", s.now)
				}
				checkTransfer(t, s, sp)
				st := s.a[0].Stats()
				t.Logf("done at %v: lost %d retx %d pto %d dup %d", s.now, st.PacketsLost, st.Retransmits, st.PTOs, st.DuplicatePackets)
			})
		}
	}
}
