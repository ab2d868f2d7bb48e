package scps

import (
	"math"
	"testing"
	"time"
)

// growingRun offers a stream what a QUIC sender in its own slow start
// hands a repaired flow (docs/quic.md): 15 kB in the first round trip,
// twice as much each round trip after, up to the link's rate, over GEO
// 10/2 Mbit/s, 600 ms, rates told. jitter delays each ACK by up to that
// much, in order (a loaded host's scheduling: the delay signal sees a
// queue that is not the link's). It returns when the receiver had size
// bytes, and the smallest window the sender had before all was offered.
func growingRun(t *testing.T, jitter time.Duration, size uint64) (took time.Duration, minCwnd int) {
	t.Helper()
	s := newGEOSimConfig(t, 10e6, 2e6, true, DefaultConfig())
	s.dir[1].p.Jitter = jitter
	id, err := s.a[0].OpenStream([]byte("stream-0"))
	if err != nil {
		t.Fatal(err)
	}
	const (
		rtt     = 600 * time.Millisecond
		first   = 15e3
		tick    = 5 * time.Millisecond
		horizon = 60 * time.Second
	)
	var written uint64
	buf := make([]byte, 64<<10)
	minCwnd = math.MaxInt
	for s.now < horizon {
		next := s.now + tick
		if !s.runUntil(next, func() bool { return false }) && s.now < next {
			s.now = next
		}
		// Slow start's bytes sent by now, first * (2^(t/rtt) - 1), at
		// most the link's rate's.
		offered := min(first*(math.Exp2(s.now.Seconds()/rtt.Seconds())-1), 10e6/8*s.now.Seconds(), float64(size))
		written = writeUpTo(t, s.a[0], id, buf, written, uint64(offered))
		if written < size {
			minCwnd = min(minCwnd, s.a[0].Stats().Cwnd)
		}
		if s.a[1].streams.Flow.Recvd >= size {
			return s.now, minCwnd
		}
	}
	t.Fatalf("%d of %d bytes after %v", s.a[1].streams.Flow.Recvd, size, horizon)
	return 0, 0
}

// TestAppLimitedGrowthKeepsWindow: a sender that grows as QUIC's slow
// start does delivers 5 MB over a told GEO link whose ACKs come up to
// 80 ms late (a loaded host) within 1.25 times its time with punctual
// ACKs: the delay, read as a queue while the sender used a fraction of
// its window, does not cut the window to the application's rate of the
// moment. Cut to it (to 85 kB), the same took 18.7 s against 7.3 s.
func TestAppLimitedGrowthKeepsWindow(t *testing.T) {
	const size = 5_000_000
	quiet, _ := growingRun(t, 0, size)
	busy, minCwnd := growingRun(t, 80*time.Millisecond, size)
	t.Logf("5 MB offered as QUIC's slow start sends: %v with punctual ACKs, %v with ACKs up to 80 ms late (smallest window %d bytes)", quiet, busy, minCwnd)
	if busy > quiet*5/4 {
		t.Errorf("with late ACKs the growing sender took %v, more than 1.25 times %v", busy, quiet)
	}
}
