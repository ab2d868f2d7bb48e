package scps

// This file tests rates under virtual time: an unthrottled high-rate link,
// satellite links with and without loss, ACK thinning on a narrow return
// link, and receive-window auto-tuning on a GEO link.

import (
	"testing"
	"time"
)

// bulk runs a one-way transfer of total bytes from side 0 and returns the
// goodput in bit/s (from open to the receiver's EOF).
func bulk(t *testing.T, cfg Config, fwd, rev linkParams, total uint64, limit time.Duration) (float64, *sim) {
	t.Helper()
	s := newSim(t, 11, cfg, cfg, fwd, rev)
	s.attach()
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
		return &appStream{expect: int64(total), resetAfter: -1}
	}
	s.apps[0].open("stream-0", total, 0)
	if !s.runUntil(limit, func() bool { st := s.apps[1].streams[0]; return st != nil && st.eof }) {
		t.Fatalf("transfer of %d bytes not done by %v (received %d)", total, limit, s.apps[1].streams[0].received)
	}
	return float64(total) * 8 / s.apps[1].streams[0].eofAt.Seconds(), s
}

func TestUnthrottledHighRate(t *testing.T) {
	total := uint64(100 << 20)
	if testing.Short() {
		total = 30 << 20
	}
	// 1 Gbit/s, 1 ms RTT, a bottleneck queue of about 2 BDP; SendRate
	// unknown: congestion control alone must find the rate.
	link := linkParams{Rate: 1e9, Delay: 500 * time.Microsecond, QueueBytes: 500_000, Overhead: DefaultWireOverhead}
	cfg := DefaultConfig()
	cfg.InitialRTT = 10 * time.Millisecond
	gp, s := bulk(t, cfg, link, link, total, 60*time.Second)
	st := s.a[0].Stats()
	t.Logf("goodput %.0f Mbit/s over a 1 Gbit/s link (%d packets, lost %d, cwnd %d, srtt %v)",
		gp/1e6, st.PacketsSent, st.PacketsLost, st.Cwnd, st.SRTT)
	// Wire overhead (60 B of 1410 B) alone costs ~4%.
	if gp < 0.80e9 {
		t.Fatalf("goodput %.0f Mbit/s, want >= 800", gp/1e6)
	}
}

func TestSatelliteLossyGoodput(t *testing.T) {
	// C2 of the paper: 1.5 Mbit/s both ways, RTT 300 ms, 3% loss forward.
	fwd := linkParams{Rate: 1.5e6, Delay: 150 * time.Millisecond, Loss: 0.03, Overhead: DefaultWireOverhead, QueueBytes: 100_000}
	rev := linkParams{Rate: 1.5e6, Delay: 150 * time.Millisecond, Overhead: DefaultWireOverhead, QueueBytes: 100_000}
	cfg := DefaultConfig()
	cfg.SendRate, cfg.RecvRate = 1.5e6, 1.5e6
	cfg.InitialRTT = 300 * time.Millisecond
	gp, s := bulk(t, cfg, fwd, rev, 4<<20, 600*time.Second)
	st := s.a[0].Stats()
	t.Logf("C2 (1.5 Mbit/s, 300 ms, 3%% loss, %s): goodput %.0f kbit/s (%.0f%% of link); lost %d retx %d pto %d",
		st.Congestion, gp/1e3, gp/1.5e6*100, st.PacketsLost, st.Retransmits, st.PTOs)
	if gp < 100e3 {
		t.Fatalf("goodput %.0f kbit/s is not sane", gp/1e3)
	}
	// Clean reference (C1).
	fwd.Loss = 0
	gp1, _ := bulk(t, cfg, fwd, rev, 4<<20, 600*time.Second)
	t.Logf("C1 (1.5 Mbit/s, 300 ms, no loss, %s): goodput %.0f kbit/s (%.0f%% of link)", st.Congestion, gp1/1e3, gp1/1.5e6*100)
	if gp1 < 0.85*1.5e6*1350/1410 {
		t.Fatalf("clean satellite goodput %.0f kbit/s", gp1/1e3)
	}
}

func TestAckThinningAndBudget(t *testing.T) {
	// 10 Mbit/s forward, 64 kbit/s return: ACKs must fit the return link
	// and not limit the forward rate.
	fwd := linkParams{Rate: 10e6, Delay: 100 * time.Millisecond, Overhead: DefaultWireOverhead}
	rev := linkParams{Rate: 64e3, Delay: 100 * time.Millisecond, Overhead: DefaultWireOverhead, QueueBytes: 8000}
	cfgA := DefaultConfig()
	cfgA.SendRate, cfgA.RecvRate = 10e6, 64e3
	cfgB := DefaultConfig()
	cfgB.SendRate, cfgB.RecvRate = 64e3, 10e6
	s := newSim(t, 3, cfgA, cfgB, fwd, rev)
	s.attach()
	const total = 20 << 20
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
		return &appStream{expect: total, resetAfter: -1}
	}
	s.apps[0].open("stream-0", total, 0)
	s.runUntil(120*time.Second, func() bool { st := s.apps[1].streams[0]; return st != nil && st.eof })
	st := s.apps[1].streams[0]
	if st == nil || !st.eof {
		t.Fatalf("not done")
	}
	gp := float64(total) * 8 / st.eofAt.Seconds()
	b := s.a[1].Stats()
	a := s.a[0].Stats()
	ackRate := float64(b.BytesSent+b.PacketsSent*uint64(DefaultWireOverhead)) * 8 / st.eofAt.Seconds()
	t.Logf("forward goodput %.2f Mbit/s; return traffic %.1f kbit/s in %d packets for %d data packets (1 per %.1f); deferred %d; return queue drops %d",
		gp/1e6, ackRate/1e3, b.PacketsSent, a.PacketsSent, float64(a.PacketsSent)/float64(b.PacketsSent), b.AcksDeferred, s.dir[1].queueDrop)
	if gp < 8e6 {
		t.Errorf("forward goodput %.2f Mbit/s, want >= 8", gp/1e6)
	}
	if ackRate > 0.55*64e3 {
		t.Errorf("ACK traffic %.1f kbit/s exceeds half the 64 kbit/s return link", ackRate/1e3)
	}
	if s.dir[1].queueDrop > 0 {
		t.Errorf("%d ACK packets dropped at the return link queue", s.dir[1].queueDrop)
	}
}

// TestAckBudgetWithoutRates: told nothing of a 20/0.064 Mbit/s link, the
// receiver's ACKs must still fit the return link (the budget follows the
// data received), so the return queue neither drops ACKs nor inflates the
// RTT into a false congestion signal.
func TestAckBudgetWithoutRates(t *testing.T) {
	c := noRate(condAsym())
	c.dur = 12 * time.Second
	r := measure(t, c, DefaultConfig().Congestion, LossAuto, 1)
	fwd := r.rateBetween(6*time.Second, c.dur) // after slow start
	ackRate := r.returnPerByte * r.overall
	t.Logf("forward %.1f%% of the payload limit from 6 s; ACK traffic %.1f kbit/s on the 64 kbit/s return link, %d ACKs deferred",
		100*fwd/r.limit, ackRate/1e3, r.peer.AcksDeferred)
	if ackRate > 0.65*64e3 {
		t.Errorf("ACK traffic %.1f kbit/s, want at most 65%% of the 64 kbit/s return link", ackRate/1e3)
	}
	if fwd < 0.9*r.limit {
		t.Errorf("forward goodput %.1f%% of the payload limit from 6 s, want >= 90%%", 100*fwd/r.limit)
	}
}

func TestAckEveryN(t *testing.T) {
	link := linkParams{Rate: 100e6, Delay: 5 * time.Millisecond}
	cfg := DefaultConfig()
	cfg.SendRate = 100e6
	_, s := bulk(t, cfg, link, link, 20<<20, 60*time.Second)
	a, b := s.a[0].Stats(), s.a[1].Stats()
	ratio := float64(a.PacketsSent) / float64(b.PacketsSent)
	t.Logf("%d data packets, %d ACK packets: one per %.1f", a.PacketsSent, b.PacketsSent, ratio)
	if ratio < 5 || ratio > 11 {
		t.Errorf("one ACK per %.1f packets, want about %d", ratio, DefaultAckEvery)
	}
}

func TestGEOWindowAutotune(t *testing.T) {
	// 20 Mbit/s, 600 ms RTT: the bandwidth-delay product is 1.5 MB, far
	// above the initial 64 KiB stream credit; auto-tuning must open the
	// windows so the link fills once slow start is over.
	link := linkParams{Rate: 20e6, Delay: 300 * time.Millisecond, Overhead: DefaultWireOverhead}
	cfg := DefaultConfig()
	cfg.SendRate, cfg.RecvRate = 20e6, 20e6
	cfg.InitialRTT = 600 * time.Millisecond
	total := uint64(40 << 20)
	if testing.Short() {
		total = 20 << 20
	}
	s := newSim(t, 11, cfg, cfg, link, link)
	s.attach()
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
		return &appStream{expect: int64(total), resetAfter: -1}
	}
	s.apps[0].open("stream-0", total, 0)
	var window uint64
	recv := func() uint64 {
		if st := s.a[1].streams.ByID[0]; st != nil {
			window = max(window, st.RecvWindow())
		}
		if st := s.apps[1].streams[0]; st != nil {
			return st.received
		}
		return 0
	}
	s.runUntil(120*time.Second, func() bool { return recv() >= total/3 })
	t1, r1 := s.now, recv()
	if !s.runUntil(600*time.Second, func() bool { recv(); return s.apps[1].streams[0].eof }) {
		t.Fatal("not done")
	}
	steady := float64(total-r1) * 8 / (s.apps[1].streams[0].eofAt - t1).Seconds()
	overall := float64(total) * 8 / s.apps[1].streams[0].eofAt.Seconds()
	t.Logf("goodput %.1f Mbit/s after the ramp (%.1f overall, ramp %v); stream window grew to %d, connection window to %d",
		steady/1e6, overall/1e6, t1, window, s.a[1].streams.Flow.Window.Size)
	if window < 1500_000 || s.a[1].streams.Flow.Window.Size < 1500_000 {
		t.Errorf("windows %d / %d stayed below the BDP", window, s.a[1].streams.Flow.Window.Size)
	}
	if steady < 0.85*20e6*1350/1410 {
		t.Errorf("steady goodput %.1f Mbit/s on a 20 Mbit/s GEO link", steady/1e6)
	}
}

// lanJitterGoodput runs a bulk transfer with controller mode for dur of
// virtual time over a fast LAN whose host adds 0-3 ms of processing delay
// to each packet (in order) both ways, and returns the goodput in bit/s
// from dur/3 to dur and the sender's stats.
func lanJitterGoodput(t *testing.T, mode string, dur time.Duration) (float64, Stats) {
	t.Helper()
	// 2 Gbit/s, 50 us each way, a deep (8 MB, 32 ms) buffer; no
	// configured rate, as on an unthrottled veth.
	link := linkParams{Rate: 2e9, Delay: 50 * time.Microsecond, QueueBytes: 8 << 20,
		Jitter: 3 * time.Millisecond, Overhead: tunnelOverhead}
	cfg := DefaultConfig()
	cfg.MaxPacketSize, cfg.WireOverhead = tunnelPacketSize, tunnelOverhead
	cfg.Congestion = mode
	s := newSim(t, 5, cfg, cfg, link, link)
	s.attach()
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream { return &appStream{expect: -1, resetAfter: -1} }
	s.apps[0].open("stream-0", 1<<40, 0)
	warm := dur / 3
	s.runUntil(warm, func() bool { return false })
	b0 := s.a[1].streams.Flow.Recvd
	s.runUntil(dur, func() bool { return false })
	return float64(s.a[1].streams.Flow.Recvd-b0) * 8 / (dur - warm).Seconds(), s.a[0].Stats()
}

// TestHostJitterLAN: on a path whose base RTT is 100 us, the host's own
// processing delay (milliseconds, growing with load) is not a bottleneck
// queue; the default controller must not hold its window to a few packets
// above the base RTT, and must get about what loss-based NewReno gets.
func TestHostJitterLAN(t *testing.T) {
	dur := 3 * time.Second
	if testing.Short() {
		dur = 1500 * time.Millisecond
	}
	limit := payloadLimit(2e9, 0)
	vj, _ := lanJitterGoodput(t, "vj", dur)
	gp, st := lanJitterGoodput(t, DefaultConfig().Congestion, dur)
	t.Logf("%s: %.0f Mbit/s (%.1f%% of the payload limit; vj %.0f Mbit/s); cwnd %d, min RTT %v, srtt %v, lost %d",
		st.Congestion, gp/1e6, 100*gp/limit, vj/1e6, st.Cwnd, st.MinRTT, st.SRTT, st.PacketsLost)
	if gp < 0.8*limit {
		t.Errorf("%s: %.0f Mbit/s, want >= 80%% of the %.0f Mbit/s payload limit", st.Congestion, gp/1e6, limit/1e6)
	}
}
