package scps

// This file tests link outages and keep-alives over the simulated link: a
// 30 s outage in the middle of a transfer (nothing lost, only probes sent
// into the dead link, full rate right after), an outage in one direction
// only, the end of patience after MaxOutage, and an idle link that must
// not look like an outage.

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// outageEvents is what EventOutage reported to one side's application.
func outageEvents(p *simApp) []bool { return p.outages }

func TestOutageMidTransfer(t *testing.T) {
	c := condGEO()
	c.fwd.Loss, c.rev.Loss = 0, 0
	s := simOver(t, c, DefaultConfig(), 7)
	const total = 40 << 20 // 32 s at 10 Mbit/s
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
		if id == 0 {
			return &appStream{expect: total, resetAfter: -1}
		}
		return &appStream{toSend: 50_000, expect: 20_000, resetAfter: -1}
	}
	s.apps[0].open("stream-0", total, 0)
	for i := 1; i <= 4; i++ {
		s.apps[0].open(fmt.Sprintf("stream-%d", 2*i), 20_000, 50_000)
	}

	const down, outage = 10 * time.Second, 30 * time.Second
	s.runUntil(down, func() bool { return false })
	// Until a round trip after the link died, the sender cannot know (the
	// ACKs of what it sent before still arrive); after that only probes
	// should go into the dead link.
	knowable := down + c.rtt + c.rtt/4
	var deadPkts, deadBytes, deadData, unknowing int
	var lastData time.Duration
	s.observe = func(from int, p []byte) bool {
		if s.now < knowable {
			unknowing++
			return true
		}
		deadPkts++
		deadBytes += len(p)
		if len(p) > 200 {
			deadData++ // carries stream data, not a probe
			lastData = s.now
		}
		return true
	}
	before := [2]Stats{s.a[0].Stats(), s.a[1].Stats()}
	s.runUntil(down+outage, func() bool { return false })
	s.observe = nil
	up := s.now
	mid := [2]Stats{s.a[0].Stats(), s.a[1].Stats()}
	for i := 0; i < 2; i++ {
		if !mid[i].Outage {
			t.Errorf("side %d not in outage mode after %v of silence", i, outage)
		}
	}
	// Watch the sender's rate after the link comes back.
	var sentAfter []sample
	var sentBytes uint64
	s.observe = func(from int, p []byte) bool {
		if from == 0 {
			sentBytes += uint64(len(p) + tunnelOverhead)
			sentAfter = append(sentAfter, sample{at: s.now, bytes: sentBytes})
		}
		return false
	}
	if !s.runUntil(200*time.Second, func() bool { return s.apps[0].done() && s.apps[1].done() }) {
		t.Fatalf("transfer did not finish after the outage (now %v)", s.now)
	}
	for side := 0; side < 2; side++ {
		for id, st := range s.apps[side].streams {
			if !st.eof || st.closeErr != nil || st.resetErr != nil {
				t.Errorf("side %d stream %d failed: %+v", side, id, *st)
			}
		}
	}
	if got := s.apps[1].streams[0].received; got != total {
		t.Errorf("bulk stream delivered %d of %d bytes", got, total)
	}
	a, b := s.a[0].Stats(), s.a[1].Stats()
	probes := (a.OutageProbes - before[0].OutageProbes) + (b.OutageProbes - before[1].OutageProbes)
	t.Logf("%d packets went into the dead link in the round trip before the sender could know; after that %d packets (%d bytes, %d with data, the last %v after the link died); probes %d+%d; outages %d/%d, time %v/%v",
		unknowing, deadPkts, deadBytes, deadData, lastData-down, a.OutageProbes, b.OutageProbes, a.Outages, b.Outages, a.OutageTime, b.OutageTime)
	if a.Outages != 1 || b.Outages != 1 {
		t.Errorf("outages entered %d / %d, want 1", a.Outages, b.Outages)
	}
	// Probes at 1 s on both sides, plus the probe timeouts of the first
	// OutageAfter before the outage was declared.
	maxProbes := 2 * int(outage/DefaultProbeInterval+1)
	if int(probes) > maxProbes || probes < uint64(maxProbes/2) {
		t.Errorf("%d probes in a %v outage, want about %d", probes, outage, maxProbes)
	}
	if deadData > 10 {
		t.Errorf("%d data packets sent into the dead link", deadData)
	}
	// The simulated link delivers what was already on its way, so ACKs keep
	// arriving for half a round trip after it died; then the silence hold
	// (outageDetector.silence) stops new data within a few ACK intervals.
	// Without it the sender filled its window: 645 packets in this window.
	if unknowing > 400 {
		t.Errorf("%d packets sent in the %v after the link died", unknowing, knowable-down)
	}
	if deadPkts > maxProbes+deadData+4 {
		t.Errorf("%d packets sent into the dead link (probes %d, data %d)", deadPkts, probes, deadData)
	}
	// Both sides told their owners: down, then up.
	for i := 0; i < 2; i++ {
		if ev := outageEvents(s.apps[i]); len(ev) != 2 || !ev[0] || ev[1] {
			t.Errorf("side %d outage events %v, want [true false]", i, ev)
		}
	}
	// Full rate: the first 100 ms window after the link returned in which
	// the sender put at least 90% of the link rate on the wire.
	resumed := time.Duration(-1)
	for i, j := 0, 0; i < len(sentAfter); i++ {
		for sentAfter[i].at-sentAfter[j].at > 100*time.Millisecond {
			j++
		}
		if d := sentAfter[i].at - sentAfter[j].at; d >= 90*time.Millisecond {
			if rate := float64(sentAfter[i].bytes-sentAfter[j].bytes) * 8 / d.Seconds(); rate >= 0.9*c.fwd.Rate {
				resumed = sentAfter[j].at - up
				break
			}
		}
	}
	t.Logf("full rate %v after the link came back", resumed)
	if resumed < 0 || resumed > DefaultProbeInterval+c.fwd.Delay+100*time.Millisecond {
		t.Errorf("full rate %v after the link came back, want within the probe interval plus one-way delay", resumed)
	}
	if a.LossEventsCongestion > before[0].LossEventsCongestion {
		t.Errorf("the outage counted as congestion: %d events", a.LossEventsCongestion-before[0].LossEventsCongestion)
	}
}

func TestOutageOneWay(t *testing.T) {
	// Only the forward direction dies: the sender still hears the peer
	// (probes, keep-alives) but nothing it sends is acknowledged.
	link := linkParams{Rate: 10e6, Delay: 100 * time.Millisecond}
	cfg := DefaultConfig()
	cfg.SendRate, cfg.RecvRate = 10e6, 10e6
	cfg.InitialRTT = 200 * time.Millisecond
	s := newSim(t, 3, cfg, cfg, link, link)
	s.attach()
	const total = 10 << 20
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
		return &appStream{expect: total, resetAfter: -1}
	}
	s.apps[0].open("stream-0", total, 0)
	s.runUntil(2*time.Second, func() bool { return false })
	s.dir[0].p.Down = true
	s.runUntil(12*time.Second, func() bool { return false })
	if !s.a[0].InOutage() || !s.a[1].InOutage() {
		t.Errorf("outage: sender %v receiver %v", s.a[0].InOutage(), s.a[1].InOutage())
	}
	s.dir[0].p.Down = false
	runDone(t, s, 60*time.Second)
	if st := s.apps[1].streams[0]; st.received != total {
		t.Errorf("received %d of %d", st.received, total)
	}
	if s.a[0].InOutage() || s.a[1].InOutage() {
		t.Errorf("still in outage after the link came back")
	}
}

func TestMaxOutageResetsStreams(t *testing.T) {
	cfg := DefaultConfig()
	cfg.OutageAfter = time.Second
	cfg.MaxOutage = 5 * time.Second
	link := linkParams{Rate: 10e6, Delay: 20 * time.Millisecond}
	s := newSim(t, 1, cfg, cfg, link, link)
	s.attach()
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
		return &appStream{expect: -1, resetAfter: -1}
	}
	st := s.apps[0].open("stream-0", 1<<30, -1)
	s.runUntil(time.Second, func() bool { return false })
	s.dir[0].p.Down, s.dir[1].p.Down = true, true
	down := s.now
	s.runUntil(60*time.Second, func() bool { return s.a[0].Closed() && s.a[1].Closed() })
	for i := 0; i < 2; i++ {
		if !errors.Is(s.a[i].Err(), ErrOutage) {
			t.Errorf("side %d: %v, want ErrOutage", i, s.a[i].Err())
		}
	}
	if took := s.now - down; took < cfg.OutageAfter+cfg.MaxOutage || took > cfg.OutageAfter+cfg.MaxOutage+time.Second {
		t.Errorf("closed %v after the link died, want OutageAfter + MaxOutage = %v", took, cfg.OutageAfter+cfg.MaxOutage)
	}
	if !st.closed || !errors.Is(st.closeErr, ErrOutage) {
		t.Errorf("stream: closed %v err %v, want ErrOutage", st.closed, st.closeErr)
	}
}

func TestIdleLinkNoOutage(t *testing.T) {
	// An idle association on a lossy GEO link: keep-alives keep both sides
	// from declaring an outage, and cost little. (At 10% loss each way a
	// streak of lost keep-alives and probes now and then adds up to
	// OutageAfter; the outage then ends with the next packet heard.)
	link := linkParams{Rate: 2e6, Delay: 300 * time.Millisecond, Loss: 0.03}
	cfg := DefaultConfig()
	cfg.InitialRTT = 600 * time.Millisecond
	s := newSim(t, 5, cfg, cfg, link, link)
	s.attach()
	const idle = 10 * time.Minute
	s.runUntil(idle, func() bool { return false })
	for i := 0; i < 2; i++ {
		st := s.a[i].Stats()
		if st.Outages != 0 {
			t.Errorf("side %d declared %d outages on an idle link", i, st.Outages)
		}
		t.Logf("side %d: %d keep-alives, %d packets sent in %v", i, st.KeepAlives, st.PacketsSent, idle)
		// About one keep-alive per OutageAfter/3 between both sides.
		if limit := uint64(2 * idle / cfg.keepAliveInterval()); st.PacketsSent > limit {
			t.Errorf("side %d sent %d packets while idle, want at most %d", i, st.PacketsSent, limit)
		}
	}
	if total := s.a[0].Stats().KeepAlives + s.a[1].Stats().KeepAlives; total == 0 {
		t.Errorf("no keep-alives sent")
	}
	// Then the link dies for good: both sides notice within OutageAfter.
	s.dir[0].p.Down, s.dir[1].p.Down = true, true
	dead := s.now
	s.runUntil(dead+DefaultOutageAfter+time.Second, func() bool { return s.a[0].InOutage() && s.a[1].InOutage() })
	if !s.a[0].InOutage() || !s.a[1].InOutage() {
		t.Errorf("outage not declared %v after the link died", s.now-dead)
	}
}

func TestTransferWithOutages(t *testing.T) {
	// Many streams both ways over a lossy link that goes down five times,
	// for less and for more than OutageAfter: every byte arrives once, in
	// order, and no stream fails.
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			link := linkParams{Rate: 10e6, Delay: 50 * time.Millisecond, QueueBytes: 300_000, Loss: 0.05,
				Reorder: 0.02, ReorderDelay: 10 * time.Millisecond, Dup: 0.02}
			cfg := DefaultConfig()
			cfg.SendRate, cfg.RecvRate = 10e6, 10e6
			cfg.OutageAfter = time.Second
			s := newSim(t, seed, cfg, cfg, link, link)
			sp := sizesSpec(24, seed, 2_000_000, 2_000_000)
			startTransfer(s, sp)
			downs := []struct{ at, for_ time.Duration }{
				{300 * time.Millisecond, 5 * time.Second},
				{6 * time.Second, 500 * time.Millisecond}, // shorter than OutageAfter
				{8 * time.Second, 12 * time.Second},
				{21 * time.Second, 2 * time.Second},
				{25 * time.Second, 700 * time.Millisecond},
			}
			for _, d := range downs {
				s.runUntil(d.at, func() bool { return false })
				s.dir[0].p.Down, s.dir[1].p.Down = true, true
				s.runUntil(d.at+d.for_, func() bool { return false })
				s.dir[0].p.Down, s.dir[1].p.Down = false, false
			}
			if !s.runUntil(600*time.Second, func() bool { return s.apps[0].done() && s.apps[1].done() }) {
				t.Fatalf("transfer did not finish by %v", s.now)
			}
			checkTransfer(t, s, sp)
			a := s.a[0].Stats()
			t.Logf("done at %v: outages %d (%v), probes %d, lost %d, congestion events %d", s.now, a.Outages, a.OutageTime, a.OutageProbes, a.PacketsLost, a.LossEventsCongestion)
			if a.Outages < 3 {
				t.Errorf("%d outages entered, want at least the 3 longer than OutageAfter", a.Outages)
			}
		})
	}
}
