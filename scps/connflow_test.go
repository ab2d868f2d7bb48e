package scps

// This file checks connection-level flow control (internal/streams/connflow.go): streams
// whose readers stall hold their own credit, not the association's.

import (
	"fmt"
	"testing"
	"time"
)

// TestStalledReadersIsolated: ten streams whose readers stopped (a paused
// video) fill up; a fresh stream beside them still gets the link. With
// connection credit returned only on reads, the stalled streams' unread
// data held all of it and the fresh stream froze.
func TestStalledReadersIsolated(t *testing.T) {
	s := newGEOSim(t, 10e6, 2e6, 0)
	stall := true
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
		return &appStream{expect: -1, resetAfter: -1, stallRead: stall}
	}
	for i := range 10 {
		s.apps[0].open(fmt.Sprintf("stream-%d", 2*i), 1<<40, 0)
	}
	// Until the stalled streams have taken all they can.
	last, since := uint64(0), time.Duration(0)
	s.runUntil(120*time.Second, func() bool {
		if got := s.a[1].streams.Flow.Recvd; got != last {
			last, since = got, s.now
		}
		return s.now-since > 5*time.Second
	})
	held := s.a[1].streams.Flow.Recvd
	stall = false
	s.apps[0].open("stream-20", 1<<40, 0)
	start := s.now
	s.runUntil(start+2*time.Second, func() bool { return false })
	b0 := s.apps[1].streams[20].received
	s.runUntil(start+12*time.Second, func() bool { return false })
	rate := float64(s.apps[1].streams[20].received-b0) * 8 / 10
	limit := payloadLimit(10e6, 0)
	t.Logf("ten stalled streams hold %d bytes; the fresh one then got %.2f Mbit/s (%.1f%% of the payload limit)", held, rate/1e6, 100*rate/limit)
	if rate < 0.9*limit {
		t.Errorf("fresh stream: %.2f Mbit/s beside ten stalled ones, want at least 90%% of %.2f", rate/1e6, limit/1e6)
	}
}

// newGEOSim is a GEO link (600 ms RTT, queues of a BDP) carrying ab bit/s
// from side 0 to side 1 and ba back, both rates configured, and memory the
// budget of both associations (0: none); the applications are attached.
func newGEOSim(t *testing.T, ab, ba float64, memory uint64) *sim {
	return newGEOSimTold(t, ab, ba, memory, true)
}

// newGEOSimTold is newGEOSim with the rates configured (told) or not.
func newGEOSimTold(t *testing.T, ab, ba float64, memory uint64, told bool) *sim {
	cfg := DefaultConfig()
	cfg.Memory = memory
	return newGEOSimConfig(t, ab, ba, told, cfg)
}

// newGEOSimConfig is newGEOSimTold with both sides configured from cfg.
func newGEOSimConfig(t *testing.T, ab, ba float64, told bool, cfg Config) *sim {
	const rtt = 600 * time.Millisecond
	dir := func(rate float64) linkParams {
		return linkParams{Rate: rate, Delay: rtt / 2, QueueBytes: int(rate / 8 * rtt.Seconds()), Overhead: tunnelOverhead}
	}
	cfg.MaxPacketSize, cfg.WireOverhead = tunnelPacketSize, tunnelOverhead
	cfg.InitialRTT = rtt
	ca, cb := cfg, cfg
	if told {
		ca.SendRate, ca.RecvRate = int64(ab), int64(ba)
		cb.SendRate, cb.RecvRate = int64(ba), int64(ab)
	}
	s := newSim(t, 1, ca, cb, dir(ab), dir(ba))
	s.attach()
	return s
}

// TestAbortReturnsHeldCredit: streams reset while data waits behind holes
// (a lossy link, readers stalled) give back every byte of connection
// credit they held, in order or not; a byte kept would shrink the
// association's window for good.
func TestAbortReturnsHeldCredit(t *testing.T) {
	link := linkParams{Rate: 10e6, Delay: 50 * time.Millisecond, QueueBytes: 200_000, Loss: 0.05}
	cfg := DefaultConfig()
	s := newSim(t, 3, cfg, cfg, link, link)
	s.attach()
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
		return &appStream{expect: -1, resetAfter: -1, stallRead: true}
	}
	for i := range 4 {
		s.apps[0].open(fmt.Sprintf("stream-%d", 2*i), 1<<40, 0)
	}
	b := s.a[1]
	holes := false
	s.runUntil(20*time.Second, func() bool {
		for _, st := range b.streams.ByID {
			if st.Unsettled() > 0 {
				holes = true
			}
		}
		return holes && s.now > 2*time.Second
	})
	if !holes {
		t.Fatal("no stream held data behind a hole; the test proves nothing")
	}
	for id := range s.apps[1].streams {
		if err := b.StreamReset(id, 7); err != nil {
			t.Fatal(err)
		}
	}
	f := &b.streams.Flow
	check := func(when string) {
		if f.Settled != f.Recvd || f.Consumed != f.Recvd {
			t.Errorf("%s: received %d, settled %d, consumed %d; want all equal", when, f.Recvd, f.Settled, f.Consumed)
		}
	}
	check("at the resets")
	s.runUntil(s.now+5*time.Second, func() bool { return false })
	check("5 s later")
}
