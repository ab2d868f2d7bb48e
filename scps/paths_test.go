package scps

import (
	"cmp"
	"container/heap"
	"testing"
	"time"

	"scpsvpn/scps/cc"
)

// pathSim is a download (side 1 sends, side 0 reads) over two simulated
// paths of 10 Mbit/s and 40 ms round trip: side 0 was told its paths
// (path 1 a backup when backup is set), side 1 learned them.
func pathSim(t *testing.T, backup bool, total uint64) (*sim, *appStream) {
	t.Helper()
	link := linkParams{Rate: 10e6, Delay: 20 * time.Millisecond, QueueBytes: 200_000, Overhead: tunnelOverhead}
	return pathSimOn(t, link, 40*time.Millisecond, backup, total)
}

// pathSimOn is pathSim over two paths of link each way; initialRTT 0
// keeps the default.
func pathSimOn(t *testing.T, link linkParams, initialRTT time.Duration, backup bool, total uint64) (*sim, *appStream) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.MaxPacketSize, cfg.WireOverhead = tunnelPacketSize, tunnelOverhead
	if initialRTT > 0 {
		cfg.InitialRTT = initialRTT
	}
	s := newSim(t, 11, cfg, cfg, link, link)
	s.pathDir = [2][]*simDir{{nil, {p: link}}, {nil, {p: link}}}
	mustSetPath(t, s.a[0], 0, PathOptions{Name: "one"})
	mustSetPath(t, s.a[0], 1, PathOptions{Name: "two", Backup: backup})
	mustSetPath(t, s.a[1], 0, PathOptions{Learned: true})
	mustSetPath(t, s.a[1], 1, PathOptions{Learned: true})
	s.attach()
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
		return &appStream{toSend: total, expect: 0, resetAfter: -1}
	}
	st := s.apps[0].open("stream-0", 0, int64(total))
	return s, st
}

// learnedPair is an association told initialRTT with two learned paths,
// neither measured yet.
func learnedPair(t *testing.T, initialRTT time.Duration) *Association {
	t.Helper()
	cfg := DefaultConfig()
	cfg.InitialRTT = initialRTT
	a, err := NewAssociation(cfg, simEpoch)
	if err != nil {
		t.Fatal(err)
	}
	mustSetPath(t, a, 0, PathOptions{Learned: true})
	mustSetPath(t, a, 1, PathOptions{Learned: true})
	return a
}

func mustSetPath(t *testing.T, a *Association, i int, o PathOptions) {
	t.Helper()
	if err := a.SetPath(i, o); err != nil {
		t.Fatal(err)
	}
}

// setPathDown cuts (or restores) path i both ways.
func (s *sim) setPathDown(i int, down bool) {
	for side := range 2 {
		if i == 0 {
			s.dir[side].p.Down = down
		} else {
			s.pathDir[side][i].p.Down = down
		}
	}
}

// watchProgress runs until until, returning the longest time the
// receiving stream went without a new byte.
func watchProgress(s *sim, st *appStream, until time.Duration) (gap time.Duration) {
	last, lastAt := st.received, s.now
	s.runUntil(until, func() bool {
		if st.received != last || st.eof {
			last, lastAt = st.received, s.now
		}
		gap = max(gap, s.now-lastAt)
		return st.eof
	})
	return gap
}

func pathOf(a *Association, i int) PathStats {
	for _, p := range a.Paths() {
		if p.Index == i {
			return p
		}
	}
	return PathStats{}
}

// TestPathFailover: when one of two paths carrying a transfer dies
// mid-transfer, the data moves to the other path within a second, the stream is not reset and every
// byte arrives once, in order; the association never enters outage mode.
func TestPathFailover(t *testing.T) {
	const total = 12 << 20
	s, st := pathSim(t, false, total)
	s.runUntil(2*time.Second, func() bool { return false })
	if st.received == 0 || st.eof {
		t.Fatalf("at 2 s: %d bytes, eof %v: want a transfer under way", st.received, st.eof)
	}
	// Two primaries: both carry the data (bond.go).
	for i := range 2 {
		if p := pathOf(s.a[1], i); p.DataBytesSent == 0 {
			t.Fatalf("sender's path %d before the cut: %+v: want it carrying data", i, p)
		}
	}
	s.setPathDown(0, true)
	gap := watchProgress(s, st, 60*time.Second)
	if !st.eof || st.resetErr != nil || st.closeErr != nil {
		t.Fatalf("transfer: %d of %d bytes, eof %v, reset %v, close %v", st.received, total, st.eof, st.resetErr, st.closeErr)
	}
	if gap > time.Second {
		t.Errorf("the stream stalled %v after the cut: want the data on the other path within 1 s", gap)
	}
	t.Logf("longest stall after the cut: %v", gap)
	for side := range 2 {
		if p := pathOf(s.a[side], 0); p.Up || p.Downs == 0 {
			t.Errorf("side %d path 0 after the cut: %+v: want it down", side, p)
		}
		if p := pathOf(s.a[side], 1); !p.Up || !p.Active {
			t.Errorf("side %d path 1 after the cut: %+v: want it up and active", side, p)
		}
		if st := s.a[side].Stats(); st.Outages != 0 {
			t.Errorf("side %d entered outage mode %d times: one working path must keep the association up", side, st.Outages)
		}
	}
	if p := pathOf(s.a[1], 1); p.DataBytesSent < total/2 {
		t.Errorf("sender's path 1 carried %d data bytes: want most of the %d", p.DataBytesSent, total)
	}
}

// TestPathBackup: a backup path carries only probes while the primary
// works, takes the data within a second when it dies, and hands it back
// when the primary returns.
func TestPathBackup(t *testing.T) {
	const total = 24 << 20
	s, st := pathSim(t, true, total)
	s.runUntil(3*time.Second, func() bool { return false })
	for side := range 2 {
		p := pathOf(s.a[side], 1)
		if p.DataBytesSent != 0 || p.ProbesSent == 0 {
			t.Errorf("side %d backup before the cut: %+v: want probes only", side, p)
		}
		// Probes and their ACKs: a few hundred bytes a second.
		if p.BytesSent > 3*2000 {
			t.Errorf("side %d backup sent %d bytes in 3 s: want probes only", side, p.BytesSent)
		}
	}
	s.setPathDown(0, true)
	gap := watchProgress(s, st, 6*time.Second)
	if gap > time.Second {
		t.Errorf("the stream stalled %v after the primary died: want the backup within 1 s", gap)
	}
	if p := pathOf(s.a[1], 1); p.DataBytesSent == 0 || !p.Active {
		t.Errorf("sender's backup after the cut: %+v: want it carrying the data", p)
	}
	s.setPathDown(0, false)
	s.runUntil(7*time.Second, func() bool { return false })
	back := [2]PathStats{pathOf(s.a[1], 0), pathOf(s.a[1], 1)}
	if !back[0].Up || !back[0].Active {
		t.Errorf("sender's primary a second after it returned: %+v: want it carrying the data again", back[0])
	}
	s.runUntil(9*time.Second, func() bool { return false })
	if st.eof {
		t.Fatalf("transfer ended at %v: make it longer, the hand-back is not measured", s.now)
	}
	if p := pathOf(s.a[1], 1); p.DataBytesSent != back[1].DataBytesSent {
		t.Errorf("backup carried %d more data bytes after the primary returned", p.DataBytesSent-back[1].DataBytesSent)
	}
	if p := pathOf(s.a[1], 0); p.DataBytesSent <= back[0].DataBytesSent {
		t.Errorf("primary carried no data after it returned")
	}
	watchProgress(s, st, 120*time.Second)
	if !st.eof || st.resetErr != nil {
		t.Fatalf("transfer: %d of %d bytes, eof %v, reset %v", st.received, total, st.eof, st.resetErr)
	}
}

// TestOnePathSendsNoProbes: an association with path 0 alone sends no
// path probes (its packets are a single-path association's).
func TestOnePathSendsNoProbes(t *testing.T) {
	cfg := DefaultConfig()
	link := linkParams{Rate: 10e6, Delay: 20 * time.Millisecond}
	s := newSim(t, 3, cfg, cfg, link, link)
	s.attach()
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
		return &appStream{toSend: 1 << 20, expect: 0, resetAfter: -1}
	}
	st := s.apps[0].open("stream-0", 0, 1<<20)
	s.runUntil(30*time.Second, func() bool { return st.eof })
	s.runUntil(s.now+5*time.Second, func() bool { return false })
	for side := range 2 {
		ps := s.a[side].Paths()
		if len(ps) != 1 || ps[0].ProbesSent != 0 {
			t.Errorf("side %d paths %+v: want path 0 alone, no probes", side, ps)
		}
	}
}

func TestSetPathBounds(t *testing.T) {
	a, err := NewAssociation(DefaultConfig(), simEpoch)
	if err != nil {
		t.Fatal(err)
	}
	if a.SetPath(MaxPaths, PathOptions{}) == nil || a.SetPath(-1, PathOptions{}) == nil {
		t.Error("SetPath took a number out of range")
	}
	// A packet on a path never set counts as path 0's.
	_ = a.ReceiveOn(simEpoch, 5, 0, []byte{0x01})
	if p := a.Paths(); len(p) != 1 || p[0].PacketsReceived != 1 {
		t.Errorf("paths %+v", p)
	}
}

// TestPathLoss: each path measures its own loss from the packets awaited
// on it: a path losing a tenth of what goes out on it says so, a clean
// one says none.
func TestPathLoss(t *testing.T) {
	s, _ := pathSim(t, false, 0)
	s.pathDir[0][1].p.Loss = 0.1
	s.runUntil(20*time.Second, func() bool { return false })
	clean, lossy := pathOf(s.a[0], 0), pathOf(s.a[0], 1)
	if clean.Checked < 100 || clean.Loss != 0 {
		t.Errorf("clean path: %+v: want some hundred packets awaited, none lost", clean)
	}
	if lossy.Checked < 100 || lossy.Loss < 0.04 || lossy.Loss > 0.2 {
		t.Errorf("path losing 10%% outbound: loss %.3f (%d of %d): want about 0.1", lossy.Loss, lossy.Lost, lossy.Checked)
	}
	t.Logf("measured loss: clean %.3f, lossy %.3f of %d", clean.Loss, lossy.Loss, lossy.Checked)
}

// TestPathCutAckSize: after one of two bonded paths is cut, the holes
// nothing will fill (packets lost on it, the probes of it) are forgotten
// once the peer knows of them and a slow path's round trip has passed, so
// the receiver's ACKs stay as small as before the cut. Paths of
// sub-millisecond RTT, as two veth links. Before the holes were forgotten,
// every ACK grew to the most ranges one holds, and the receiver sent
// several times the ACK bytes per data byte it had before the cut.
func TestPathCutAckSize(t *testing.T) {
	const total = 64 << 20
	link := linkParams{Rate: 20e6, Delay: 100 * time.Microsecond, QueueBytes: 200_000, Overhead: tunnelOverhead, Jitter: 200 * time.Microsecond}
	s, st := pathSimOn(t, link, 0, false, total)
	// ackShare is the receiver's bytes sent per byte received over the
	// next second.
	ackShare := func() float64 {
		before := s.a[0].Stats()
		s.runUntil(s.now+time.Second, func() bool { return st.eof })
		after := s.a[0].Stats()
		if st.eof {
			t.Fatalf("the transfer ended at %v: make it longer", s.now)
		}
		return float64(after.BytesSent-before.BytesSent) / float64(max(after.BytesReceived-before.BytesReceived, 1))
	}
	s.runUntil(time.Second, func() bool { return false })
	bonded := ackShare()
	s.setPathDown(1, true)
	s.runUntil(s.now+3*time.Second, func() bool { return false })
	if p := pathOf(s.a[0], 1); p.Up {
		t.Fatalf("path 1 after the cut: %+v: want it down", p)
	}
	cut := ackShare()
	t.Logf("receiver's bytes sent per byte received: %.5f bonded, %.5f three seconds after the cut", bonded, cut)
	if cut > 2*bonded {
		t.Errorf("after the cut the receiver sent %.5f bytes per byte received, %.1f times as many as before it (%.5f): want its ACKs no larger than before", cut, cut/bonded, bonded)
	}
}

// twoLinkSim is a download (side 1 sends, side 0 reads, from start on)
// over two links of issue-style sites (bond_test.go): side 0 told
// links[0] as path 0 and links[1] as path 1 (a backup when backup), side
// 1 learned both. Each side's initial RTT is its first link's, as each
// site's [peer.link] says.
func twoLinkSim(t *testing.T, links [2]bondLink, backup bool, start time.Duration) (*sim, *appStream) {
	t.Helper()
	return twoLinkSimWith(t, links, backup, start, "")
}

// twoLinkSimWith is twoLinkSim with both sites' controller named
// ("": the default).
func twoLinkSimWith(t *testing.T, links [2]bondLink, backup bool, start time.Duration, congestion string) (*sim, *appStream) {
	t.Helper()
	s := twoLinkSites(t, links, backup, nil, congestion)
	s.runUntil(start, func() bool { return false })
	return s, s.apps[0].open("stream-0", 0, -1)
}

// twoLinkSites sets up twoLinkSim's sites. With learnedAt set, side 1
// has only path 0 at first (from the handshake) and learns path 1 when
// the first packet comes over it, as the binary does; *learnedAt is then
// when.
func twoLinkSites(t *testing.T, links [2]bondLink, backup bool, learnedAt *time.Duration, congestion string) *sim {
	t.Helper()
	cfg := DefaultConfig()
	cfg.MaxPacketSize, cfg.WireOverhead = tunnelPacketSize, tunnelOverhead
	cfg.InitialRTT = links[0].fwd.Delay + links[0].rev.Delay
	if congestion != "" {
		cfg.Congestion = congestion
	}
	for i := range links {
		links[i].fwd.Overhead, links[i].rev.Overhead = tunnelOverhead, tunnelOverhead
	}
	// Side 0 (the reader) sends on dir[0] and pathDir[0]: the reverse.
	s := newSim(t, 7, cfg, cfg, links[0].rev, links[0].fwd)
	s.pathDir = [2][]*simDir{{nil, {p: links[1].rev}}, {nil, {p: links[1].fwd}}}
	mustSetPath(t, s.a[0], 0, PathOptions{Name: "first", InitialRTT: links[0].fwd.Delay + links[0].rev.Delay})
	mustSetPath(t, s.a[0], 1, PathOptions{Name: "second", Backup: backup, InitialRTT: links[1].fwd.Delay + links[1].rev.Delay})
	mustSetPath(t, s.a[1], 0, PathOptions{Learned: true})
	if learnedAt == nil {
		mustSetPath(t, s.a[1], 1, PathOptions{Learned: true})
	} else {
		s.learn = func(to, i int) {
			if to == 1 {
				mustSetPath(t, s.a[1], i, PathOptions{Learned: true})
				*learnedAt = s.now
			}
		}
	}
	s.attach()
	if testing.Verbose() {
		for side := range 2 {
			s.a[side].SetPathLogger(func(i int, name, what string) { t.Logf("%v side %d path %d: %s", s.now, side, i, what) })
		}
	}
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
		return &appStream{toSend: 1 << 40, expect: 0, resetAfter: -1}
	}
	return s
}

// cutAt cuts path i as its interface going down at side does: the link
// carries nothing more either way, and what was on its way to side over
// it is lost.
func (s *sim) cutAt(i, side int) {
	s.setPathDown(i, true)
	kept := s.q[:0]
	for _, d := range s.q {
		if d.path != i || d.to != side {
			kept = append(kept, d)
		}
	}
	s.q = kept
	heap.Init(&s.q)
}

// cutDrain: a stall that begins this soon after a cut is the cut's (the
// last bytes that crossed the cut link arrive first).
const cutDrain = 250 * time.Millisecond

// stallsAfter runs until until from a cut now, returning the longest time
// the stream went without a new byte in a stall that began within
// cutDrain of the cut (the wait for the data to move on), and the longest
// one at all (a loss repaired over the slow link left stalls the in-order
// reader for its round trip).
func stallsAfter(s *sim, st *appStream, until time.Duration) (atCut, longest time.Duration) {
	cut := s.now
	last, lastAt := st.received, s.now
	s.runUntil(until, func() bool {
		if st.received != last {
			if lastAt-cut <= cutDrain {
				atCut = max(atCut, s.now-lastAt)
			}
			last, lastAt = st.received, s.now
		}
		longest = max(longest, s.now-lastAt)
		return false
	})
	if lastAt-cut <= cutDrain {
		atCut = max(atCut, s.now-lastAt) // it never moved on
	}
	return atCut, longest
}

// TestPathFailoverLEOGEO: a LEO link (path 0) beside a GEO one, both
// primaries, the LEO carrying a download alone (the GEO's probes and
// ACKs keep it up at both ends) when it is cut at the reader: the data
// moves on over the GEO within a second, without a reset or an outage.
// Before the cut the reader's packets on the GEO (probes, ACKs) must
// reach the sender: a sender told a 40 ms RTT once forgot its holes too
// soon and dropped them as duplicates, so the reader saw its GEO path go
// down, and at the cut had no working path to acknowledge the repairs on.
func TestPathFailoverLEOGEO(t *testing.T) {
	s, st := twoLinkSim(t, [2]bondLink{bondLEO, bondGEO}, false, 3*time.Second)
	s.runUntil(3800*time.Millisecond, func() bool { return false })
	if st.received == 0 {
		t.Fatal("no data before the cut")
	}
	if p := pathOf(s.a[0], 1); p.Downs != 0 || !p.Up {
		t.Errorf("reader's GEO path before the cut: %+v: want it up throughout", p)
	}
	if d := s.a[1].Stats().DuplicatePackets; d != 0 {
		t.Errorf("sender dropped %d of the reader's packets as duplicates before the cut", d)
	}
	s.cutAt(0, 0)
	atCut, longest := stallsAfter(s, st, s.now+15*time.Second)
	t.Logf("stall at the cut %v, longest stall after it %v", atCut, longest)
	if atCut > time.Second {
		t.Errorf("the stream stalled %v at the cut: want the data on the GEO within 1 s", atCut)
	}
	if st.resetErr != nil || st.closeErr != nil {
		t.Fatalf("stream: reset %v, close %v", st.resetErr, st.closeErr)
	}
	for side := range 2 {
		if n := s.a[side].Stats().Outages; n != 0 {
			t.Errorf("side %d entered outage mode %d times", side, n)
		}
	}
	if p := pathOf(s.a[1], 1); !p.Active || p.DataBytesSent == 0 {
		t.Errorf("sender's GEO path after the cut: %+v: want it carrying the data", p)
	}
}

// TestPathFailoverLEOGEORate: after the LEO is cut at the reader, the GEO
// that takes over delivers at least 80% of its payload limit in order from
// 2 s after the cut (its repairs and slow start) for 10 s, and the
// sender's RTT of it is the GEO's loop. The GEO's early packets had come
// back acknowledged over the LEO (320 ms): its minimum RTT then read half
// of every window as queue once the ACKs came back over the GEO (600 ms),
// and each round cut the window to the delivery rate times 320 ms: 0.3-0.7
// Mbit/s of 10 for 30 s.
func TestPathFailoverLEOGEORate(t *testing.T) {
	s, st := twoLinkSim(t, [2]bondLink{bondLEO, bondGEO}, false, 3*time.Second)
	s.runUntil(3800*time.Millisecond, func() bool { return false })
	s.cutAt(0, 0)
	cut := s.now
	s.runUntil(cut+2*time.Second, func() bool { return false })
	from := st.received
	const span = 10 * time.Second
	s.runUntil(cut+2*time.Second+span, func() bool { return false })
	got := float64(st.received-from) * 8 / span.Seconds()
	limit := bondGEO.limit()
	loop := bondGEO.fwd.Delay + bondGEO.rev.Delay
	minRTT := s.a[1].sent.PathRTT(1).Min()
	t.Logf("GEO after the cut: %.2f Mbit/s in order (%.0f%% of %.2f), sender's min RTT of it %v",
		got/1e6, 100*got/limit, limit/1e6, minRTT)
	if got < 0.8*limit {
		t.Errorf("the GEO delivered %.2f Mbit/s from 2 s after the cut, want at least 80%% of %.2f", got/1e6, limit/1e6)
	}
	if minRTT < loop*9/10 {
		t.Errorf("sender's min RTT of the GEO %v, want its loop of %v", minRTT, loop)
	}
}

// TestPathBackupGEOCellular: a GEO primary with a cellular backup, the
// site of docs/multipath.md: the backup carries no data while the GEO
// works (probes only, counted at both ends), takes the data within a
// second when the GEO is cut at the reader, and hands it back when the
// GEO returns; also with both sites' controller hybla, whose slow start
// on the learned side fills the GEO's queue within a round trip (before,
// that side took the GEO down at each such fill and sent 1.7 MB on the
// backup while the GEO worked; through the binary 18 MB in a run).
func TestPathBackupGEOCellular(t *testing.T) {
	for _, congestion := range []string{"", "hybla"} {
		t.Run(cmp.Or(congestion, "default"), func(t *testing.T) { pathBackupGEOCellular(t, congestion) })
	}
}

func pathBackupGEOCellular(t *testing.T, congestion string) {
	s, st := twoLinkSimWith(t, [2]bondLink{bondGEO, bondCell}, true, 3*time.Second, congestion)
	s.runUntil(13*time.Second, func() bool { return false })
	for side := range 2 {
		if p := pathOf(s.a[side], 1); p.DataBytesSent != 0 || p.ProbesSent == 0 {
			t.Errorf("side %d backup before the cut: %+v: want probes only", side, p)
		}
	}
	before := st.received
	cut := s.now
	s.cutAt(0, 0)
	var downAt time.Duration
	s.a[1].SetPathLogger(func(i int, name, what string) {
		if i == 0 && what == "path down" && downAt == 0 {
			downAt = s.now - cut
		}
	})
	atCut, longest := stallsAfter(s, st, s.now+8*time.Second)
	t.Logf("sender took the GEO down %v after the cut; stall at the cut %v, longest after it %v", downAt, atCut, longest)
	if atCut > time.Second {
		t.Errorf("the stream stalled %v at the cut: want the backup carrying it within 1 s", atCut)
	}
	if downAt == 0 {
		t.Error("the sender never took the GEO down")
	}
	if p := pathOf(s.a[1], 1); !p.Active || p.DataBytesSent == 0 || st.received == before {
		t.Errorf("sender's backup after the cut: %+v: want it carrying the data", p)
	}
	// Eight seconds down: the sender retired the GEO (pathForget); the
	// reader's probes on it bring it back.
	s.setPathDown(0, false)
	s.runUntil(s.now+2*time.Second, func() bool { return false })
	back := [2]PathStats{pathOf(s.a[1], 0), pathOf(s.a[1], 1)}
	if !back[0].Up || !back[0].Active {
		t.Fatalf("sender's GEO 2 s after it returned: %+v: want it carrying the data again", back[0])
	}
	s.runUntil(s.now+3*time.Second, func() bool { return false })
	if p := pathOf(s.a[1], 1); p.DataBytesSent != back[1].DataBytesSent {
		t.Errorf("backup carried %d more data bytes after the GEO returned", p.DataBytesSent-back[1].DataBytesSent)
	}
	if p := pathOf(s.a[1], 0); p.DataBytesSent <= back[0].DataBytesSent {
		t.Errorf("the GEO carried no data after it returned")
	}
	if st.resetErr != nil || st.closeErr != nil {
		t.Fatalf("stream: reset %v, close %v", st.resetErr, st.closeErr)
	}
}

// TestPathResume: each path reports its own state for careful resume
// (PathStateOf), and a path set with a saved state starts its own
// controller from it (PathOptions.Resume), while a path set without
// starts afresh.
func TestPathResume(t *testing.T) {
	s, st := twoLinkSim(t, [2]bondLink{bondCell, bondGEO}, false, time.Second)
	s.runUntil(15*time.Second, func() bool { return false })
	if st.received == 0 {
		t.Fatal("no data")
	}
	p, ok := s.a[1].PathStateOf(1, simEpoch.Add(s.now))
	// The GEO's way out and the ACKs' way back, on the cellular link.
	if !ok || p.Rate <= 0 || p.MinRTT < 300*time.Millisecond || p.MinRTT > 700*time.Millisecond {
		t.Fatalf("sender's GEO path state %+v (%v): want a rate and about the GEO's RTT", p, ok)
	}
	if c, ok := s.a[1].PathStateOf(0, simEpoch); ok || c.Rate != 0 {
		t.Errorf("PathStateOf(0) %+v: want none (path 0's is PathState)", c)
	}
	t.Logf("GEO path saved: %.0f kB/s, min RTT %v, loss %.3f", p.Rate/1000, p.MinRTT, p.Loss)
	a, err := NewAssociation(DefaultConfig(), simEpoch)
	if err != nil {
		t.Fatal(err)
	}
	mustSetPath(t, a, 1, PathOptions{Name: "geo", Resume: cc.Resume{Saved: p}})
	mustSetPath(t, a, 2, PathOptions{Name: "fresh"})
	if r, ok := a.sent.PathController(1).(cc.Resumer); !ok || r.ResumePhase() == cc.ResumeOff {
		t.Errorf("path set with a saved state: controller %T not resuming", a.sent.PathController(1))
	}
	if r, ok := a.sent.PathController(2).(cc.Resumer); ok && r.ResumePhase() != cc.ResumeOff {
		t.Errorf("path set without a saved state resumes: %v", r.ResumePhase())
	}
}

// TestNoPathWorksHeardLast: when every path is down (one taken down by
// silence because the ACKs of its packets came back over the other, which
// was then cut), the data goes on over the path the peer was heard on
// last, not the one that went silent first: the peer's packets prove that
// path's way back, and its probes' answers bring it up. Before, the
// sender stayed on the dead path until the other came up again, 0.7 s
// through the binary on LEO+GEO.
func TestNoPathWorksHeardLast(t *testing.T) {
	s, _ := pathSim(t, false, 1<<30)
	s.runUntil(2*time.Second, func() bool { return false })
	a := s.a[1]
	a.paths.p[1].up = false
	a.paths.p[0].lastHeard = a.now - 500*time.Millisecond // path 0 silent
	a.choosePath()
	if a.paths.data != 0 {
		t.Fatalf("data path %d with path 0 up", a.paths.data)
	}
	a.paths.p[0].up = false
	a.paths.p[1].lastHeard = a.now // the peer's packets still come on path 1
	a.choosePath()
	if a.paths.data != 1 {
		t.Errorf("every path down: data path %d, want 1, the one heard last", a.paths.data)
	}
	// Heard alike: the data stays.
	a.paths.p[0].lastHeard = a.now + 50*time.Millisecond
	a.choosePath()
	if a.paths.data != 1 {
		t.Errorf("path 0 heard 50 ms after path 1: data path %d, want it to stay on 1", a.paths.data)
	}
	a.paths.p[0].lastHeard = a.now + 200*time.Millisecond
	a.choosePath()
	if a.paths.data != 0 {
		t.Errorf("path 0 heard 200 ms after path 1: data path %d, want 0", a.paths.data)
	}
}

// learnSim is twoLinkSim from the start, both links primaries, side 1
// learning path 1 from the first packet over it (twoLinkSites).
func learnSim(t *testing.T, links [2]bondLink) (s *sim, st *appStream, learnedAt *time.Duration) {
	t.Helper()
	learnedAt = new(time.Duration)
	s = twoLinkSites(t, links, false, learnedAt, "")
	return s, s.apps[0].open("stream-0", 0, -1), learnedAt
}

// TestLearnedPathNotDownBeforeMeasured: a GEO that the sending side
// learns beside a cellular link (its initial RTT the cellular's 60 ms,
// told by [peer.link]) is not taken down before its first check could
// come back, and carries its share from its first seconds. Taken down
// 300 ms after it was learned (max(2 x 60 ms, 300 ms)), half a GEO round
// trip, its flight was lost to the failover and it sent nothing until
// its probes' answers brought it up again.
func TestLearnedPathNotDownBeforeMeasured(t *testing.T) {
	s, st, learnedAt := learnSim(t, [2]bondLink{bondCell, bondGEO})
	s.runUntil(time.Second, func() bool { return *learnedAt > 0 })
	if *learnedAt == 0 {
		t.Fatal("the sender never learned the GEO path")
	}
	from := *learnedAt
	rx := pathOf(s.a[0], 1).BytesReceived
	const span = 2 * time.Second
	s.runUntil(from+span, func() bool { return false })
	geo := pathOf(s.a[1], 1)
	got := float64(pathOf(s.a[0], 1).BytesReceived-rx) * 8 / span.Seconds()
	t.Logf("GEO learned at %v; over its first %v: %.2f Mbit/s arrived on it, srtt %v, downs %d; stream %d bytes",
		from, span, got/1e6, geo.SRTT, geo.Downs, st.received)
	if geo.Downs != 0 {
		t.Errorf("sender took the learned GEO down %d times in its first %v: want none, its checks answered in a round trip", geo.Downs, span)
	}
	if way := bondGEO.fwd.Delay; geo.SRTT < way {
		t.Errorf("sender's GEO srtt %v: want it measured, at least the GEO's way out (%v; the ACKs come back on either link)", geo.SRTT, way)
	}
	// What the GEO brings in its first two seconds: its first packets
	// arrive a one-way delay after it is learned, so a third of its
	// payload limit is what a path judged by its first round trip, not
	// half of one, carries.
	if limit := bondGEO.limit(); got < limit/3 {
		t.Errorf("the GEO carried %.2f Mbit/s in its first %v: want at least a third of its %.2f", got/1e6, span, limit/1e6)
	}
}

// TestUnmeasuredPathDownTime: a path whose RTT is neither measured nor
// told goes down after untoldDown of silence: twice the longest SRTT
// measured on the other paths, between 1 s and 3 s; a path whose RTT was
// told, or once its first check is answered, by its RTT as before. A
// learned path that never answers still goes down, in time.
func TestUnmeasuredPathDownTime(t *testing.T) {
	a := learnedPair(t, 60*time.Millisecond)
	mustSetPath(t, a, 2, PathOptions{Name: "told", InitialRTT: 60 * time.Millisecond})
	mustSetPath(t, a, 3, PathOptions{Name: "untold", InitialRTT: 60 * time.Millisecond, UntoldRTT: true})
	// Nothing measured yet.
	for i, want := range []time.Duration{time.Second, time.Second, minPathDown, time.Second} {
		if got := a.paths.downAfter(i); got != want {
			t.Errorf("nothing measured: path %d down after %v, want %v", i, got, want)
		}
	}
	for _, c := range []struct {
		srtt, want time.Duration
	}{
		{40 * time.Millisecond, time.Second},
		{700 * time.Millisecond, 1400 * time.Millisecond},
		{2 * time.Second, 3 * time.Second},
	} {
		a.paths.p[0].rtt = cc.NewRTTStats(c.srtt)
		a.paths.p[0].rtt.Update(c.srtt, 0)
		for _, i := range []int{1, 3} {
			if got := a.paths.downAfter(i); got != c.want {
				t.Errorf("path 0 measured at %v: unmeasured path %d down after %v, want %v", c.srtt, i, got, c.want)
			}
		}
		if got := a.paths.downAfter(2); got != minPathDown {
			t.Errorf("path 0 measured at %v: told path down after %v, want %v", c.srtt, got, minPathDown)
		}
	}
	a.paths.p[1].rtt.Update(60*time.Millisecond, 0)
	if got := a.paths.downAfter(1); got != minPathDown {
		t.Errorf("path 1 measured at 60 ms: down after %v, want %v", got, minPathDown)
	}

	// Through the simulator: a learned path whose way out is dead from
	// the start goes down, no sooner than 1 s after its first check and
	// no later than 3 s after (and a probe interval).
	s, _, learnedAt := learnSim(t, [2]bondLink{bondCell, bondGEO})
	s.pathDir[1][1].p.Down = true // the sender's way out on the GEO
	var downAt time.Duration
	s.a[1].SetPathLogger(func(i int, name, what string) {
		if i == 1 && what == "path down" && downAt == 0 {
			downAt = s.now
		}
	})
	s.runUntil(*learnedAt+5*time.Second, func() bool { return downAt > 0 })
	if *learnedAt == 0 || downAt == 0 {
		t.Fatalf("learned at %v, down at %v: want the dead learned path learned and taken down", *learnedAt, downAt)
	}
	t.Logf("dead learned GEO: learned at %v, down %v later", *learnedAt, downAt-*learnedAt)
	if d := downAt - *learnedAt; d < minUntoldDown || d > maxUntoldDown+pathProbeInterval {
		t.Errorf("dead learned path down %v after it was learned: want between %v and %v", d, minUntoldDown, maxUntoldDown+pathProbeInterval)
	}
}
