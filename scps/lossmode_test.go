package scps

// This file tests the loss-cause modes and the behaviour docs/transport.md
// promises of the default controller with "auto": full rate under random loss with no
// queue, backing off to a bottleneck narrower than the configured rate,
// following a capacity drop, and the performance targets of
// docs/transport.md (asserted with margins, in virtual time).

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestAutoKeepsFullRateUnderRandomLoss(t *testing.T) {
	// C2: 1.5 Mbit/s configured and real, 3% random loss, no queue.
	c := condC2()
	c.dur = 40 * time.Second
	for _, k := range []struct {
		mode, loss string
		min, max   float64 // % of the payload limit
	}{
		{"hybrid", LossAuto, 95, 101},
		{"vj", LossAuto, 95, 101},
		// The same losses taken for congestion: NewReno halves its window
		// three times a second and cannot fill a 300 ms pipe.
		{"vj", LossCongestion, 0, 60},
	} {
		r := measure(t, c, k.mode, k.loss, 1)
		t.Logf("%s/%s: %.1f%% of the payload limit; loss events: %d congestion, %d corruption",
			k.mode, k.loss, r.pct(), r.stats.LossEventsCongestion, r.stats.LossEventsCorruption)
		if r.pct() < k.min || r.pct() > k.max {
			t.Errorf("%s/%s: %.1f%% of the payload limit, want %.0f..%.0f%%", k.mode, k.loss, r.pct(), k.min, k.max)
		}
		// One loss costs one repair: the bytes sent again are the bytes
		// the lost packets carried (a full packet less its 6-byte STREAM
		// frame header), not more.
		if st := r.stats; st.PacketsLost > 0 {
			ratio := float64(st.RetransmitBytes) / float64(st.PacketsLost*(tunnelPacketSize-6))
			t.Logf("%s/%s: %d packets lost, %d bytes repaired: %.3f repairs per loss", k.mode, k.loss, st.PacketsLost, st.RetransmitBytes, ratio)
			if ratio > 1.05 || ratio < 0.9 {
				t.Errorf("%s/%s: %.3f repairs per lost packet, want one", k.mode, k.loss, ratio)
			}
		}
		if k.loss == LossAuto {
			if r.stats.LossEventsCorruption == 0 || r.stats.LossEventsCongestion > r.stats.LossEventsCorruption/20 {
				t.Errorf("%s/auto: %d loss events taken for congestion, %d for corruption, with no queue",
					k.mode, r.stats.LossEventsCongestion, r.stats.LossEventsCorruption)
			}
		}
	}
}

func TestAutoBacksOffToNarrowBottleneck(t *testing.T) {
	// 10 Mbit/s configured, 5 real, a one-BDP drop-tail queue.
	for _, mode := range []string{"hybrid", "vegas"} {
		r := measure(t, condNarrow(), mode, LossAuto, 1)
		real := payloadLimit(5e6, 0)
		t.Logf("%s: %.0f kbit/s (%.1f%% of the 5 Mbit/s payload limit), queue-overflow loss %.2f%%",
			mode, r.goodput/1e3, 100*r.goodput/real, 100*r.queueLoss)
		if r.goodput > real*1.001 || r.goodput < 0.85*real {
			t.Errorf("%s: settled at %.0f kbit/s, want at or below %.0f and not collapsed", mode, r.goodput/1e3, real/1e3)
		}
		if r.queueLoss >= 0.02 {
			t.Errorf("%s: %.2f%% of packets lost to queue overflow", mode, 100*r.queueLoss)
		}
	}
}

func TestFollowsCapacityDrop(t *testing.T) {
	// 50 Mbit/s at 600 ms falls to 10 Mbit/s after 15 s; the queue holds
	// one BDP of the old rate (3 s at the new one).
	c := condDrop()
	s := simOver(t, c, DefaultConfig(), 1)
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream { return &appStream{expect: -1, resetAfter: -1} }
	s.apps[0].open("stream-0", 1<<40, 0)
	s.runUntil(c.schedule[0].at, func() bool { return false })
	s.dir[0].p.Rate = c.schedule[0].rate
	drop := s.now
	dropsBefore := s.dir[0].queueDrop
	sentBefore := s.dir[0].sent
	var sent []sample
	var bytes uint64
	var maxQueue time.Duration
	s.observe = func(from int, p []byte) bool {
		if from == 0 {
			bytes += uint64(len(p) + tunnelOverhead)
			sent = append(sent, sample{at: s.now, bytes: bytes})
			maxQueue = max(maxQueue, s.dir[0].busyUntil-s.now)
		}
		return false
	}
	s.runUntil(c.dur, func() bool { return false })
	// The first RTT-long window after the drop in which the sender put no
	// more than 1.2 times the new rate on the wire.
	followed := time.Duration(-1)
	for i, j := 0, 0; i < len(sent); i++ {
		for sent[i].at-sent[j].at > c.rtt {
			j++
		}
		if sent[i].at-sent[j].at >= c.rtt*9/10 {
			if rate := float64(sent[i].bytes-sent[j].bytes) * 8 / (sent[i].at - sent[j].at).Seconds(); rate <= 1.2*10e6 {
				followed = sent[j].at - drop
				break
			}
		}
	}
	drops := s.dir[0].queueDrop - dropsBefore
	lossPct := 100 * float64(drops) / float64(s.dir[0].sent-sentBefore)
	st := s.a[0].Stats()
	t.Logf("sending at the new rate %v (%.1f RTTs) after the drop; queue peaked at %v of 3 s; %d packets (%.2f%%) lost to overflow; cwnd %d, srtt %v",
		followed, followed.Seconds()/c.rtt.Seconds(), maxQueue.Round(time.Millisecond), drops, lossPct, st.Cwnd, st.SRTT)
	if followed < 0 || followed > 4*c.rtt {
		t.Errorf("sender followed the drop after %v, want within 4 RTTs", followed)
	}
	if lossPct >= 1 {
		t.Errorf("%.2f%% lost to queue overflow after the drop", lossPct)
	}
}

// TestPerformanceTargets asserts the targets docs/transport.md sets for the
// default controller: 97% of the payload limit with the rate configured (90% of the
// rate within 3 RTTs), 90% with the rate 2x too high or unset (under 2% lost
// to queue overflow).
func TestPerformanceTargets(t *testing.T) {
	type target struct {
		c       condition
		pct     float64
		to90RTT float64 // 0: not asserted
	}
	targets := []target{
		{condC2(), 97, 3}, {condGEO(), 97, 3}, {condAsym(), 97, 3},
		// A configured rate is a ceiling, not a promise: told 20 Mbit/s
		// on a 10 Mbit/s GEO link (docs/adaptation.md).
		{wrongRate(condC2(), 2), 90, 0}, {wrongRate(condGEO(), 2), 95, 0},
		{wrongRate(condC2(), 0), 90, 0}, {wrongRate(condGEO(), 0), 90, 0},
	}
	var rs []result
	for _, k := range targets {
		t.Run(k.c.name, func(t *testing.T) {
			r := measure(t, k.c, DefaultConfig().Congestion, LossAuto, 1)
			rs = append(rs, r)
			if r.pct() < k.pct {
				t.Errorf("%.1f%% of the payload limit, want >= %.0f%%", r.pct(), k.pct)
			}
			if k.to90RTT > 0 && (r.to90 < 0 || r.to90.Seconds() > k.to90RTT*r.rtt.Seconds()) {
				t.Errorf("90%% of the rate after %v (%.1f RTTs), want within %.0f RTTs", r.to90, r.to90.Seconds()/r.rtt.Seconds(), k.to90RTT)
			}
			if r.queueLoss >= 0.01 {
				t.Errorf("%.2f%% of packets lost to queue overflow", 100*r.queueLoss)
			}
		})
	}
	t.Logf("default controller %q:\n%s", DefaultConfig().Congestion, formatResults(rs))
}

// TestNoConfigurationTargets asserts the "untold" target for the
// default controller told nothing of the link: at least 95% of the
// payload limit after start-up and 90% over a 30 s download, under 1%
// lost to queue overflow. (The 250 Mbit/s runs of the matrix take too
// long for every test run.)
func TestNoConfigurationTargets(t *testing.T) {
	var rs []result
	for _, c := range []condition{noRate(condC2()), noRate(condGEO()), noRate(condAsym())} {
		t.Run(c.name, func(t *testing.T) {
			r := measure(t, c, DefaultConfig().Congestion, LossAuto, 1)
			rs = append(rs, r)
			if after := 100 * r.afterStart / r.limit; after < 95 {
				t.Errorf("%.1f%% of the payload limit after start-up, want >= 95%%", after)
			}
			if overall := 100 * r.overall / r.limit; overall < 90 {
				t.Errorf("%.1f%% of the payload limit over %v, want >= 90%%", overall, c.dur)
			}
			if r.queueLoss >= 0.01 {
				t.Errorf("%.2f%% of packets lost to queue overflow", 100*r.queueLoss)
			}
		})
	}
	t.Logf("\n%s", formatResults(rs))
}

// TestRainFade: told 50 Mbit/s, the link carries 50, then 10 (a DVB-S2
// terminal in rain falls back to a robust modulation), then 50 again. The
// configured rate is a ceiling: the sender holds 95% of what the link
// carries during the fade, overflows the queue with under 1% of its
// packets, and is soon back at the restored rate. The target is 2 s;
// the standard fade (condFade) takes 1.8 s, but a window cut that
// coincides with the return holds the resumption back by up to two round
// trips (a queue that the sender's own cut drained says nothing of the
// link), so the bound here is 2.5 s.
func TestRainFade(t *testing.T) {
	for _, sched := range [][]rateStep{
		{{10 * time.Second, 10e6}, {25 * time.Second, 50e6}},
		{{8 * time.Second, 10e6}, {20 * time.Second, 50e6}},
	} {
		c := condFade()
		c.schedule = sched
		c.dur = sched[1].at + 10*time.Second
		c.name = fmt.Sprintf("rain fade %v-%v", sched[0].at, sched[1].at)
		r := measure(t, c, DefaultConfig().Congestion, LossAuto, 1)
		t.Logf("\n%s", formatResults([]result{r}))
		fade, back := r.phases[1], r.phases[2]
		if fade.pct < 95 {
			t.Errorf("%s: %.1f%% of the faded link's payload limit, want >= 95%%", c.name, fade.pct)
		}
		if back.reach95 < 0 || back.reach95 > 2500*time.Millisecond {
			t.Errorf("%s: back at 95%% of the restored link after %v, want within 2.5 s", c.name, back.reach95)
		}
		if r.queueLoss >= 0.01 {
			t.Errorf("%s: %.2f%% of packets lost to queue overflow", c.name, 100*r.queueLoss)
		}
	}
}

// TestFadeSmallQueue: told 50 Mbit/s, the link falls to 10 Mbit/s 5 s
// into a download of about 60 MB and stays there, behind a modem queue
// far below a bandwidth-delay product of the told rate (1.5 MB and
// 0.75 MB; condFade's holds 3.75 MB). Each congestion event during the
// fade must not send the told rate's round trip into the queue again:
// the whole transfer delivers >= 95% of what the link could carry from
// the first byte (the payload limit at each moment's rate), and the
// queue drops packets only in the round trips the fade itself overflows
// (the told rate until the delay signal returns), none later. Before
// fadeLoss (cc/hybrid.go) a resume went straight back to 50 Mbit/s for a
// round trip: with the 1.5 MB queue a second loss episode 4.5 s after
// the first, 94.7% and 6.2% of packets dropped (now 97.5%, 3.2%).
func TestFadeSmallQueue(t *testing.T) {
	for _, queue := range []int{1_500_000, 750_000} {
		c := condFade()
		c.fwd.QueueBytes = queue
		c.schedule = []rateStep{{5 * time.Second, 10e6}}
		c.dur = 30 * time.Second
		c.name = fmt.Sprintf("fade 50->10M at 5s told 50, queue %.2f MB", float64(queue)/1e6)
		r := measure(t, c, DefaultConfig().Congestion, LossAuto, 1)
		// What the link could carry from the first byte's arrival (the
		// told start before it is the same with or without a fade).
		first := r.series[slices.IndexFunc(r.series, func(s sample) bool { return s.bytes > 0 })].at
		carried := (payloadLimit(50e6, 0)*(5*time.Second-first).Seconds() + payloadLimit(10e6, 0)*(c.dur-5*time.Second).Seconds()) / 8
		pct := 100 * float64(r.delivered) / carried
		t.Logf("%s: %.1f MB, %.1f%% of what the link carried, fade %.1f%%, queue drops %.2f%%, congestion events %d",
			c.name, float64(r.delivered)/1e6, pct, r.phases[1].pct, 100*r.queueLoss, r.stats.LossEventsCongestion)
		if pct < 95 {
			t.Errorf("%s: %.1f%% of what the link carried, want >= 95%%", c.name, pct)
		}
		onset := r.series[slices.IndexFunc(r.series, func(s sample) bool { return s.at >= 5*time.Second+3*r.rtt })].drops
		if last := r.series[len(r.series)-1].drops; last > onset {
			t.Errorf("%s: %d packets dropped by the queue later than 3 RTTs into the fade (%d before)", c.name, last-onset, onset)
		}
	}
}

// TestFadeWholeTransfer: the fade counted as a user counts it, from the
// request (a download: the receiver asks, the sender answers) to the end,
// against what the link carried at each moment's rate (the payload limit,
// the told start's round trip included), behind the bench's queue of one
// bandwidth-delay product of 50 Mbit/s. The fade that holds (50 -> 10
// Mbit/s 5 s in, 33 s: a 60 MB download, the bench's FADE-HOLD) and the
// bench's FADE (50 -> 10 -> 50, 40 s). Neither can reach 100%: the
// request's round trip carries nothing (3.65 MB of 50 Mbit/s, partly
// made up by the queue the fade holds) and the tunnel's headers cost 1.1%
// beyond TCP's (docs/adaptation.md). FADE loses 3.8% more where the link
// comes back: docs/adaptation.md, "The fade counted from the request".
func TestFadeWholeTransfer(t *testing.T) {
	hold := condFade()
	hold.name = "fade 50->10M at 5s told 50, held"
	hold.schedule = []rateStep{{5 * time.Second, 10e6}}
	hold.dur = 33 * time.Second
	for _, tc := range []struct {
		c    condition
		want float64
	}{{hold, 95}, {condFade(), 93}} {
		c := tc.c
		c.download = true
		r := measure(t, c, DefaultConfig().Congestion, LossAuto, 1)
		var carried float64
		from, rate := time.Duration(0), c.fwd.Rate
		for i := 0; i <= len(c.schedule); i++ {
			to := c.dur
			if i < len(c.schedule) {
				to = c.schedule[i].at
			}
			carried += payloadLimit(rate, 0) * (to - from).Seconds() / 8
			if i < len(c.schedule) {
				from, rate = c.schedule[i].at, c.schedule[i].rate
			}
		}
		pct := 100 * float64(r.delivered) / carried
		t.Logf("%s: %.1f of %.1f MB, %.1f%% of what the link carried from the request, queue drops %.2f%%",
			c.name, float64(r.delivered)/1e6, carried/1e6, pct, 100*r.queueLoss)
		if pct < tc.want {
			t.Errorf("%s: %.1f%% of what the link carried from the request, want >= %.1f%%", c.name, pct, tc.want)
		}
	}
}
