package scps

import (
	"testing"
	"time"
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
