package scps

import (
	"testing"
	"time"
)

// floodShare runs a bulk stream from a[0] to a[1] over a 10 Mbit/s link
// with the rate configured, and with flood > 0 also datagrams of 1200
// bytes offered at flood bit/s. It returns the stream's and the
// datagrams' goodput in bit/s over the last two thirds of dur.
func floodShare(t *testing.T, flood float64, dur time.Duration) (stream, dgram float64) {
	t.Helper()
	const rate = 10e6
	link := linkParams{Rate: rate, Delay: 50 * time.Millisecond, QueueBytes: 256 << 10}
	cfg := DefaultConfig()
	cfg.SendRate, cfg.RecvRate = rate, rate
	s := newSim(t, 7, cfg, cfg, link, link)
	s.attach()
	var dgBytes int
	s.a[1].SetDatagramHandler(func(p []byte) { dgBytes += len(p) })
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream { return &appStream{expect: -1, resetAfter: -1} }
	s.apps[0].open("stream-0", 1<<40, 0)
	payload := make([]byte, 1200)
	var owed float64
	warm := dur / 3
	var s0 uint64
	d0 := 0
	for s.now < dur {
		if flood > 0 {
			owed += flood / 8 / 1000 // a millisecond's worth
			for ; owed >= float64(len(payload)); owed -= float64(len(payload)) {
				s.a[0].SendDatagram(payload) // dropped when the queue is full: a flood
			}
		}
		if s.now < warm && s.now+time.Millisecond >= warm {
			s0, d0 = s.a[1].flow.recvd, dgBytes
		}
		s.runUntil(s.now+time.Millisecond, func() bool { return false })
	}
	secs := (dur - warm).Seconds()
	return float64(s.a[1].flow.recvd-s0) * 8 / secs, float64(dgBytes-d0) * 8 / secs
}

// TestDatagramFloodLeavesStreamsTheirShare: datagrams offered at twice the
// link's rate (a UDP flood from one LAN) no longer go ahead of every
// stream: the bulk stream keeps at least half of the link, and the
// datagrams get the rest of their share.
func TestDatagramFloodLeavesStreamsTheirShare(t *testing.T) {
	dur := 9 * time.Second
	alone, _ := floodShare(t, 0, dur)
	withFlood, dgrams := floodShare(t, 20e6, dur)
	limit := payloadLimit(10e6, 0)
	t.Logf("stream alone %.2f Mbit/s (%.0f%% of the payload limit); under a 20 Mbit/s datagram flood: stream %.2f Mbit/s (%.0f%%), datagrams %.2f Mbit/s (%.0f%%)",
		alone/1e6, 100*alone/limit, withFlood/1e6, 100*withFlood/limit, dgrams/1e6, 100*dgrams/limit)
	if withFlood < 0.5*limit {
		t.Errorf("the stream kept %.0f%% of the link under the flood, want at least 50%%", 100*withFlood/limit)
	}
	if dgrams < 0.2*limit {
		t.Errorf("datagrams got %.0f%% of the link, want about a third", 100*dgrams/limit)
	}
}
