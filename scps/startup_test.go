package scps

// This file tests the start-up of a sender told no rate (docs/startup.md):
// on an association that never carried data, the first flight times the
// link and the sender is at its rate a round trip later, with the
// receiver's windows sized from the same timing.

import (
	"fmt"
	"testing"
	"time"
)

// startupConditions are the links of the untold start-up: no
// [peer.link] rates, the windows as the configuration leaves them (auto),
// a one-BDP modem queue.
func startupConditions(dur time.Duration) []condition {
	var cs []condition
	for _, c := range []condition{condGEO(), condGEO50(), condAsym(), condK250(), condK250Loss()} {
		c = wrongRate(c, 0)
		c.dur = dur
		cs = append(cs, c)
	}
	return cs
}

// TestUntoldStartup: told nothing of the link, a bulk transfer on a fresh
// association carries 90% of the payload limit over a round trip that
// starts within 2.5 RTTs of its first byte (the bench's time to rate;
// the target is 4; 1 RTT on the lossless links, 2 with 1% loss each way
// at 250 Mbit/s, where the holes hold in-order delivery), holds it after start-up, and drops < 1% at the modem
// queue. Before the first flight's timing set the start (slow start paced
// at half the timed rate, windows doubling from 1 MiB once per round
// trip), GEO 10/2 took 3.4 RTTs from the first byte, GEO 50/0.5 4.6,
// 20M/64k 2.6, GEO 250/3 6.4, and 250/3 with 1% loss each way did not
// reach it within the 8 s.
func TestUntoldStartup(t *testing.T) {
	for _, c := range startupConditions(8 * time.Second) {
		t.Run(c.name, func(t *testing.T) {
			checkStartup(t, c, measure(t, c, "hybrid", LossAuto, 1), 0.95)
		})
	}
}

// hostStalls makes both hosts of c stall for 100 ms out of every 300 ms
// (a machine at a load average of 20-30 on two cores: RTT samples 20-200
// ms long in runs of the real binary), handing the packets that arrived
// meanwhile over together at the stall's end; untimed, the associations
// do not learn when the packets arrived (no receive timestamps).
func hostStalls(c condition, untimed bool) condition {
	for _, d := range []*linkParams{&c.fwd, &c.rev} {
		d.StallEvery, d.StallFor, d.StallUntimed = 300*time.Millisecond, 100*time.Millisecond, untimed
	}
	c.name += ", host stalls"
	return c
}

// TestUntoldStartupHostStalls: the hosts stall (hostStalls) and hand
// packets over in batches, each with the time it arrived (the tunnel's
// kernel receive timestamps): told nothing, the start-up reaches the
// link's rate within 2.5 RTTs of the first byte and holds >= 90% of it
// after 4 RTTs. Timed from when the batch was handed over (as the tunnel
// did), the ACKs of a batch carried RTTs up to a stall too long, slow
// start took that for a queue and cut the window to the rate of a stalled
// quarter round trip: 54.6% of the limit after 4 RTTs (now 94.2%).
func TestUntoldStartupHostStalls(t *testing.T) {
	c := hostStalls(wrongRate(condGEO(), 0), false)
	c.dur = 10 * time.Second
	checkStartup(t, c, measure(t, c, "hybrid", LossAuto, 1), 0.9)
}

// checkStartup checks a start-up told nothing on c: 90% of the payload
// limit over a round trip that starts within 2.5 RTTs of the first byte,
// at least the share want of it from 4 RTTs after the first byte, and
// < 1% queue drops.
func checkStartup(t *testing.T, c condition, r result, want float64) {
	t.Helper()
	checkStartupWithin(t, c, r, want, 2.5)
}

// checkStartupWithin is checkStartup with 90% of the limit due within
// rtts round trips of the first byte.
func checkStartupWithin(t *testing.T, c condition, r result, want, rtts float64) {
	t.Helper()
	first := c.fwd.Delay // the first byte arrives one way after the open
	at := r.reach(first, 0.9*r.limit, true)
	after := r.rateBetween(first+4*r.rtt, c.dur) / r.limit
	t.Logf("90%% of the limit from %.2f RTTs after the first byte; %.1f%% of it after 4 RTTs, %.1f%% over %v from the open; queue drops %.2f%%",
		at.Seconds()/r.rtt.Seconds(), 100*after, 100*r.overall/r.limit, c.dur, 100*r.queueLoss)
	if due := time.Duration(rtts * float64(r.rtt)); at < 0 || at > due {
		t.Errorf("90%% of the limit from %v after the first byte, want within %.1f RTTs (%v)", at, rtts, due)
	}
	if after < want {
		t.Errorf("%.1f%% of the limit from 4 RTTs after the first byte, want >= %.0f%%", 100*after, 100*want)
	}
	if r.queueLoss >= 0.01 {
		t.Errorf("queue drops %.2f%%, want < 1%%", 100*r.queueLoss)
	}
}

// hostBatches makes both hosts of c take packets in batches: each holds
// what arrived over 1.5 ms of every 2 ms and hands it over at once, with
// the time each packet arrived (a receiving endpoint's socket reads and
// scheduling; at 250 Mbit/s a whole first flight arrives within 1.5 ms).
func hostBatches(c condition) condition {
	for _, d := range []*linkParams{&c.fwd, &c.rev} {
		d.StallEvery, d.StallFor = 2*time.Millisecond, 1500*time.Microsecond
	}
	c.name += ", batched hand-over"
	return c
}

// TestUntoldStartupBatchedReceiver: at 250 Mbit/s the receiving host
// hands the first flight over in one or two batches (hostBatches), so
// one ACK answers what ACKs every AckEvery packets would have timed.
func TestUntoldStartupBatchedReceiver(t *testing.T) {
	c := hostBatches(wrongRate(condK250(), 0))
	c.dur = 8 * time.Second
	checkStartup(t, c, measure(t, c, "hybrid", LossAuto, 1), 0.95)
}

// TestUntoldStartupFedInChunks: the sender's data comes from a TCP
// connection on its LAN leg still in slow start (ten packets, then twice
// as many every 5 ms: a loaded host's round trip through the netstack),
// as through the tunnel, not all at once: the first flight still goes out
// as one burst that times the link.
func TestUntoldStartupFedInChunks(t *testing.T) {
	for _, c := range startupConditions(8 * time.Second) {
		c.feedEvery = 5 * time.Millisecond
		c.name += ", fed in chunks"
		t.Run(c.name, func(t *testing.T) {
			checkStartup(t, c, measure(t, c, "hybrid", LossAuto, 1), 0.95)
		})
	}
}

// releaseInBatches makes the forward link of c let packets out every
// every only (ReleaseEvery), the receiving host stamping each as it
// comes: a first flight that the link carries in less than that arrives
// all at once.
func releaseInBatches(c condition, every time.Duration) condition {
	c.fwd.ReleaseEvery = every
	c.name += fmt.Sprintf(", released every %v", every)
	return c
}

// TestUntoldStartupCompressedFlight: at 250 Mbit/s the first flight
// (33 packets, 1.5 ms on the link) left the bench's link emulator in one
// write whenever its writer woke a millisecond or two late, and the
// receiving endpoint stamped it as one burst: the whole flight within
// 0.5 ms, too short to time (capacityMinSpan). With no estimate slow
// start paced at twice the initial window per round trip and doubled
// from there: 13-20 RTTs to 90% of the link through the binary, where a
// run whose flight the emulator let out in pieces took 6 (before the
// fix, here: 10.4 RTTs and 34.8% of the limit after 4 RTTs; with 1%
// loss never within the 8 s). Now a flight too fast to time is timed
// again twice as long (Hybrid.retime), as soon as its ACKs are in: 90%
// within 2.5 RTTs of the first byte, the target being 4 (3.0 and
// 3.4 RTTs while the second flight waited for the ACK of a packet sent
// after the first, a round trip later; over 12 s from the open 78.1% and
// 78.3% of the limit then, 84.0% and 83.6% now). The releases
// also stamp more packets at one instant than the receiver's train
// timing kept (cc.ArrivalRate): its windows stayed at the floor and,
// with 1% loss, flow control held the link at a quarter of its rate for
// a round trip.
func TestUntoldStartupCompressedFlight(t *testing.T) {
	for _, c := range []condition{condK250(), condK250Loss()} {
		c = releaseInBatches(wrongRate(c, 0), 3*time.Millisecond)
		c.dur = 12 * time.Second
		t.Run(c.name, func(t *testing.T) {
			checkStartupWithin(t, c, measure(t, c, "hybrid", LossAuto, 1), 0.95, 2.5)
		})
	}
}

// TestUntoldStartupFlightInOneBatch: 250/3 told nothing, the forward link
// letting packets out every 5 ms only: the first flight (33 packets, 1.5
// ms on the link) arrives in one batch, too fast to time, and so did the
// flight timed again at twice its size (3 ms); only the third, a round
// trip later, was timed: 90% of the limit 3 RTTs after the first byte,
// 67.4% of it over 8 s (56.6% with 1% loss each way). The first flight
// timed again is four times the first (retimeFirstGrowth): 2 RTTs, 76.1%.
// Released every 8 ms, the first retime fit one batch too: 4.38 RTTs and
// 65.2% before, 3.25 RTTs and 74.1% now.
func TestUntoldStartupFlightInOneBatch(t *testing.T) {
	for _, tc := range []struct {
		every time.Duration
		rtts  float64
	}{{5 * time.Millisecond, 2.5}, {8 * time.Millisecond, 3.5}} {
		c := releaseInBatches(wrongRate(condK250(), 0), tc.every)
		c.dur = 8 * time.Second
		t.Run(c.name, func(t *testing.T) {
			checkStartupWithin(t, c, measure(t, c, "hybrid", LossAuto, 1), 0.95, tc.rtts)
		})
	}
}

// TestUntoldStartupThinReturnJitter: 20M/64k told nothing, the hosts
// adding up to 1 ms each way (linkParams.Jitter). The first flight's
// ACKs left one by one every AckEvery packets and queued behind each
// other on the 64 kbit/s return link; the sender timed that queue as the
// flight's spread (1.37 MB/s of 2.4) and took 3.6 RTTs from the first
// byte to 90% of the link, as the binary's traces showed (0.47 MB/s).
// Now the timed flight's ACKs wait an ack delay and go as one packet of
// points (ReceivedPacketHandler.AckAtOnce): 1.1 RTTs.
func TestUntoldStartupThinReturnJitter(t *testing.T) {
	c := wrongRate(condAsym(), 0)
	c.fwd.Jitter, c.rev.Jitter = time.Millisecond, time.Millisecond
	c.name += ", 1ms jitter"
	c.dur = 8 * time.Second
	checkStartup(t, c, measure(t, c, "hybrid", LossAuto, 1), 0.95)
}

// TestUntoldStartupReturnPathJitter: GEO 50/0.5 and 20M/64k told nothing,
// each ACK packet delayed by up to 5 ms on its way back (rev.Jitter: the
// receiver's window updates queued ahead of it on the thin return link,
// a loaded host). The flight's ACK at once for its first packet goes
// alone and early, its later ACKs later by varying amounts: timed across
// ACK packets the flight read as a fraction of the link (through the
// binary 0.41 of it on both links, in two quiet runs), and slow start
// climbed from there at a quarter, then a half per round trip (1.88 and
// 2.13 RTTs to 90% here). The points one ACK packet carries left the
// peer together (cc.AckEvent.Packet): timed within the packet, 1.0 RTT.
func TestUntoldStartupReturnPathJitter(t *testing.T) {
	for _, c := range []condition{condGEO50(), condAsym()} {
		c = wrongRate(c, 0)
		c.rev.Jitter = 5 * time.Millisecond
		c.name += ", 5ms return jitter"
		c.dur = 6 * time.Second
		t.Run(c.name, func(t *testing.T) {
			checkStartupWithin(t, c, measure(t, c, "hybrid", LossAuto, 1), 0.95, 1.5)
		})
	}
}

// TestUntoldStartupCreepingArrivalRate: 20M/64k and GEO 50/0.5 told
// nothing, the far end handing over a burst's first packet a millisecond
// ahead of the rest (linkParams.BurstLag). The receiver times its arrival
// rate over a train from that packet, so the rate crept up with every
// packet of the first flight, and each step of the receive window that
// follows it (RateWindow) went as a window update in a packet of its own,
// carrying the ACK so far: an ACK per packet, no ACK packet with the
// flight's points, the ACKs spaced by the return link's queue (7.5 ms
// each at 64 kbit/s), and the sender timed that queue as the link (0.41
// MB/s of 2.4 after ten ACKs here, falling; through the binary 0.2 MB/s
// in two of four runs, slow start at 1.7-3 Mbit/s for seconds): 40.5% of
// the limit after 4 RTTs (GEO 50/0.5: 81.8%). While the flight's ACKs
// are held the window now moves in steps of an eighth
// (streams.rateWindowStep).
func TestUntoldStartupCreepingArrivalRate(t *testing.T) {
	for _, c := range []condition{condAsym(), condGEO50()} {
		c = wrongRate(c, 0)
		c.fwd.BurstLag = time.Millisecond
		c.name += ", 1ms burst lag"
		c.dur = 6 * time.Second
		t.Run(c.name, func(t *testing.T) {
			checkStartup(t, c, measure(t, c, "hybrid", LossAuto, 1), 0.95)
		})
	}
}

// TestUntoldSendBufferFollowsTheEstimate: told no rate, the ACK packet
// that brings the first flight's estimate raises the pacer at once, and
// the streams' send buffers must follow it from that packet, not from
// the next one. Sized before the packet's frames, from the rate of the
// last packet sent, they stayed at the 4 MiB floor until another packet
// came; through the binary (250/3 told nothing, the flight's ACKs in one
// packet) that was a round trip later, and the first paced round carried
// 4 MB of the 30 it was paced for. Here a later ACK comes 25 ms after, so
// the check is on the state right after the estimate's packet.
func TestUntoldSendBufferFollowsTheEstimate(t *testing.T) {
	c := wrongRate(condK250(), 0)
	cfg := DefaultConfig()
	cfg.MaxPacketSize, cfg.WireOverhead = tunnelPacketSize, tunnelOverhead
	cfg.InitialRTT = c.rtt
	cfg.Congestion = "hybrid"
	fwd, rev := c.fwd, c.rev
	fwd.Overhead, rev.Overhead = tunnelOverhead, tunnelOverhead
	s := newSim(t, 1, cfg, cfg, fwd, rev)
	s.attach()
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
		return &appStream{expect: -1, resetAfter: -1}
	}
	s.apps[0].open("stream-0", 1<<40, 0)
	a := s.a[0]
	const jumped = 1e6 // bytes/s: the initial window per RTT is 145 kB/s
	for at := time.Millisecond; at < 2*c.rtt; at += 100 * time.Microsecond {
		s.runUntil(at, func() bool { return false })
		rate := a.sent.Controller().PacingRate()
		if rate < jumped {
			continue
		}
		want := uint64(0.9 * windowBDPs * rate * a.windowRTT().Seconds())
		t.Logf("at %v: pacing %.1f Mbit/s, send window %d, unsent limit %d (want >= %d)",
			at, 8*rate/1e6, a.streams.SendRateWindow, a.streams.UnsentLimit, want)
		if a.streams.SendRateWindow < want {
			t.Errorf("send rate window %d bytes right after the pacer rose to %.1f Mbit/s, want >= %d", a.streams.SendRateWindow, 8*rate/1e6, want)
		}
		if a.streams.UnsentLimit < want/2 {
			t.Errorf("unsent limit %d bytes right after the pacer rose to %.1f Mbit/s, want >= %d", a.streams.UnsentLimit, 8*rate/1e6, want/2)
		}
		return
	}
	t.Fatalf("the pacer never rose above %.0f kB/s within two round trips", jumped/1e3)
}

// fullStreamHeader is the STREAM frame header of a full bulk packet: the
// type, a stream id below 64 and an offset from 16 KiB to 1 GiB (4 bytes).
const fullStreamHeader = 6

// coldStartBound is the most of the payload limit a download told
// nothing can carry over dur from the request, on a path of round trip
// rtt: its first byte arrives a round trip after the request, the first
// flight's ACKs tell the link's rate a round trip after that, and from
// then on each full packet carries its payload where TCP's would carry
// 1460 bytes (the limit's geometry). The first flight itself (an initial
// window, 2-6% of a GEO round trip) is left out.
func coldStartBound(dur, rtt time.Duration) float64 {
	best := float64(tunnelPacketSize-fullStreamHeader) / 1460
	return best * (dur - 2*rtt).Seconds() / dur.Seconds()
}

// perRTT is the share of r's payload limit delivered in each of the first
// n round trips after from.
func perRTT(r result, from time.Duration, n int) []float64 {
	var s []float64
	for k := range n {
		at := from + time.Duration(k)*r.rtt
		s = append(s, r.rateBetween(at, at+r.rtt)/r.limit)
	}
	return s
}

// firstByteAt is when r's first stream byte arrived, to the sample.
func firstByteAt(r result) time.Duration {
	for _, s := range r.series {
		if s.bytes > 0 {
			return s.at
		}
	}
	return -1
}

// TestUntoldDownloadNearItsBound: told nothing, a 30 s download on a
// fresh association, timed from the request as the bench times it from
// connect(), comes near the cold start's bound (coldStartBound) on GEO
// 10/2 1%, GEO 50/0.5 and 20M/64k: the round trip after the first flight
// carries >= 93% of the limit, and the rest of the run holds it, within
// 0.6 points of the bound on the lossless links (the bottleneck idle at
// most 0.5% of the time after start-up) and a point on GEO 10/2 1%. The
// bound is 95.0%, 94.7% and 95.0% on these links: the 95% over
// 30 s asks the first flight's round trip, or fewer header bytes, of a
// start told nothing (docs/startup.md, "Where the 30 s figure's last
// points go"). Before the ACK burst joined the cut's target
// (Hybrid.ackBurstAllowance), 20M/64k left its bottleneck idle 0.88% of
// the time after start-up, 0.96 points below the bound.
func TestUntoldDownloadNearItsBound(t *testing.T) {
	for _, c := range []condition{condGEO(), condGEO50(), condAsym()} {
		c = wrongRate(c, 0)
		c.dur, c.download = 30*time.Second, true
		t.Run(c.name, func(t *testing.T) {
			r := measure(t, c, "hybrid", LossAuto, 1)
			f := firstByteAt(r)
			rtts := perRTT(r, f-r.rtt/8, 4)
			bound := coldStartBound(c.dur, r.rtt)
			share := r.overall / r.limit
			sp := spentAfterStart(r, c.fwd.Rate, c.fwd.Loss)
			inOrder := float64(r.inOrder) * 8 / r.series[len(r.series)-1].at.Seconds() / r.limit
			t.Logf("first byte %v; per RTT %.3f; over %v from the request %.2f%% (read in order %.2f%%, %d kB behind holes), bound %.2f%%; after start-up %v",
				f, rtts, c.dur, 100*share, 100*inOrder, (r.delivered-r.inOrder)/1000, 100*bound, sp)
			if rtts[1] < 0.93 {
				t.Errorf("%.1f%% of the limit in the second round trip after the first byte, want >= 93%%", 100*rtts[1])
			}
			within, idle := 0.006, 0.005
			if c.fwd.Loss > 0 {
				within, idle = 0.01, 0.01
			}
			if share < bound-within {
				t.Errorf("%.2f%% of the limit over %v from the request, want within %.1f points of the cold start's bound %.2f%%",
					100*share, c.dur, 100*within, 100*bound)
			}
			if sp.idle > idle {
				t.Errorf("the bottleneck idle %.2f%% of the time after start-up, want <= %.1f%%", 100*sp.idle, 100*idle)
			}
			// What the application read by the end is what the bench
			// counts: on the lossless links all that arrived, on GEO
			// 10/2 1% less what arrived behind a hole whose repair was
			// still on its way (a lost packet's repair comes a round
			// trip after it, and one is lost every 0.12 s).
			lag := float64(r.delivered-r.inOrder) * 8 / r.series[len(r.series)-1].at.Seconds() / r.limit
			if maxLag := 0.001 + 2.5*c.fwd.Loss; lag > maxLag {
				t.Errorf("%.2f points of the limit arrived behind holes at the end, want <= %.1f", 100*lag, 100*maxLag)
			}
			if r.queueLoss >= 0.01 {
				t.Errorf("queue drops %.2f%%, want < 1%%", 100*r.queueLoss)
			}
		})
	}
}
