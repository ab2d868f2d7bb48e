package bench

import (
	"math"
	"strings"
	"testing"
	"time"
)

// TestTwoLinkConditions: the two-link conditions are the links,
// valid, and their testbed gives each path its own emulator model and
// [peer.path.link] lines.
func TestTwoLinkConditions(t *testing.T) {
	want := map[string][2]time.Duration{"GEO+CELL": {600 * time.Millisecond, 60 * time.Millisecond}, "LEO+GEO": {40 * time.Millisecond, 600 * time.Millisecond},
		"GEO+CELL-BACKUP": {600 * time.Millisecond, 60 * time.Millisecond}}
	for _, c := range TwoLinkConditions {
		if err := c.Validate(); err != nil {
			t.Error(err)
		}
		w, ok := want[c.Name]
		if !ok || c.Second == nil || c.RTT != w[0] || c.Second.RTT != w[1] {
			t.Errorf("%s: RTTs %v / %v, want %v", c.Name, c.RTT, c.Second, w)
			continue
		}
		cfg := multipathConfig(RunConfig{Condition: c, Seed: 7, Contender: SCPSContender("")})
		if !cfg.TwoPaths || cfg.Link.Ret.Delay+cfg.Link.Fwd.Delay != w[0] || cfg.Link2.Ret.Delay+cfg.Link2.Fwd.Delay != w[1] || cfg.Link.Seed == cfg.Link2.Seed {
			t.Errorf("%s: testbed links %+v / %+v", c.Name, cfg.Link, cfg.Link2)
		}
		for i, rtt := range w {
			if !strings.Contains(cfg.PathLinks[i], "rtt = \""+rtt.String()+"\"") {
				t.Errorf("%s: path %d's link lines %q, want rtt %v", c.Name, i, cfg.PathLinks[i], rtt)
			}
		}
		if cfg.BackupPath != (c.Name == "GEO+CELL-BACKUP") {
			t.Errorf("%s: backup path %v", c.Name, cfg.BackupPath)
		}
		if !strings.Contains(c.Summary(), "beside it") {
			t.Errorf("%s: summary %q names one link", c.Name, c.Summary())
		}
	}
	if LEO := TwoLinkConditions[1]; LEO.OutageEvery.Every != 15*time.Second || LEO.OutageEvery.Duration != 50*time.Millisecond {
		t.Errorf("LEO+GEO's cuts: %+v", LEO.OutageEvery)
	}
}

// TestStallAt: the wait at a cut is the stall that begins within the
// drain after it, not a later one (a repair over the link left).
func TestStallAt(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms ...int) (out []time.Time) {
		for _, m := range ms {
			out = append(out, t0.Add(time.Duration(m)*time.Millisecond))
		}
		return out
	}
	// Bytes until 20 ms after the cut, then 480 ms of nothing, then a
	// later stall of 900 ms.
	reads := at(-50, 5, 20, 500, 510, 600, 1500, 1510)
	if got := stallAt(reads, t0, cutDrain); got != 480*time.Millisecond {
		t.Errorf("stall at the cut %v, want 480ms", got)
	}
	if got := longestGap(reads, t0); got != 900*time.Millisecond {
		t.Errorf("longest stall %v, want 900ms", got)
	}
	// Nothing at all after the cut: no stall measured (the download
	// ended before it).
	if got := stallAt(at(-50), t0, cutDrain); got != 0 {
		t.Errorf("no reads after the cut: %v", got)
	}
}

// TestFollowReplies: ping -D reply lines give their arrival times, and
// the wait after a cut runs to the end of the echoes when no reply came.
func TestFollowReplies(t *testing.T) {
	at, ok := pingReplyAt("[1733100000.250000] 64 bytes from 10.2.0.1: icmp_seq=5 ttl=64 time=601 ms")
	if !ok || at.Unix() != 1733100000 || at.Nanosecond()/1e6 != 250 {
		t.Errorf("reply line: %v %v", at, ok)
	}
	for _, l := range []string{"PING 10.2.0.1 (10.2.0.1) 56(84) bytes of data.", "[1733100000.3] From 10.1.0.1 icmp_seq=6 Destination Host Unreachable", "[x] 64 bytes from"} {
		if _, ok := pingReplyAt(l); ok {
			t.Errorf("%q read as a reply", l)
		}
	}
	t0 := time.Unix(1000, 0)
	var r replies
	for _, ms := range []int{-100, 0, 100, 900, 1000} {
		r.add(t0.Add(time.Duration(ms) * time.Millisecond))
	}
	r.end = t0.Add(1100 * time.Millisecond)
	if ms, n := r.stallFrom(t0.Add(50 * time.Millisecond)); ms != 800 || n != 3 {
		t.Errorf("after the cut: %v ms, %d replies; want 800, 3", ms, n)
	}
	r.end = t0.Add(3 * time.Second)
	if ms, n := r.stallFrom(t0.Add(1500 * time.Millisecond)); ms != 1500 || n != 0 {
		t.Errorf("no reply after the cut: %v ms, %d replies; want 1500, 0", ms, n)
	}
}

// TestBondLimits: the summed payload limits the bonding figures are
// judged against (docs/multipath.md), and the goodput after the start-up
// allowance taken from cumulative samples.
func TestBondLimits(t *testing.T) {
	want := map[string]float64{"GEO+CELL": 3_613_500, "GEO+CELL-BACKUP": 3_613_500, "LEO+GEO": 13_330_611}
	for _, c := range TwoLinkConditions {
		got := SummedLimit(c) + SummedLimit(*c.Second)
		if w, ok := want[c.Name]; !ok || math.Abs(got-w) > 1 {
			t.Errorf("%s: summed limit %.0f B/s, want %.0f", c.Name, got, w)
		}
	}
	if w := bondWarm(20 * time.Second); w != 10*time.Second {
		t.Errorf("warm of 20 s: %v", w)
	}
	if w := bondWarm(2 * time.Second); w != time.Second {
		t.Errorf("warm of 2 s: %v", w)
	}
	// Start-up: 1 MB/s for 2 s, then 3 MB/s.
	var samples []Sample
	for ms := 0; ms <= 6000; ms += 100 {
		b := int64(ms) * 1000
		if ms > 2000 {
			b = 2_000_000 + int64(ms-2000)*3000
		}
		samples = append(samples, Sample{T: time.Duration(ms) * time.Millisecond, Bytes: b})
	}
	if r := steadyRate(samples, 2*time.Second); math.Abs(r-3e6) > 1 {
		t.Errorf("rate from 2 s: %.0f, want 3000000", r)
	}
	if r := steadyRate(samples, 10*time.Second); r != 0 {
		t.Errorf("rate from beyond the end: %.0f, want 0", r)
	}
}
