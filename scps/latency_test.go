package scps

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestPathLatency: a GEO link (10 Mbit/s, 600 ms) and a cellular one
// (20 Mbit/s, 60 ms), both primaries, a bulk download filling both
// (bonding); a 1 KB request on a new stream, answered by 1 KB, is
// answered within 1.2 times the cellular path's RTT (as the bulk leaves
// it, its queue included) at the 95th percentile: the request and its
// reply go on the fast path, not behind the bulk on the GEO one. The
// links lose nothing: a lost request costs a repair's round trip
// whatever the path, which is not what is measured here.
func TestPathLatency(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxPacketSize, cfg.WireOverhead = tunnelPacketSize, tunnelOverhead
	cfg.InitialRTT = 600 * time.Millisecond
	geo := linkParams{Rate: 10e6, Delay: 300 * time.Millisecond, QueueBytes: 750_000, Overhead: tunnelOverhead}
	cell := linkParams{Rate: 20e6, Delay: 30 * time.Millisecond, QueueBytes: 150_000, Overhead: tunnelOverhead}
	s := newSim(t, 5, cfg, cfg, geo, geo)
	s.pathDir = [2][]*simDir{{nil, {p: cell}}, {nil, {p: cell}}}
	mustSetPath(t, s.a[0], 0, PathOptions{Name: "geo"})
	mustSetPath(t, s.a[0], 1, PathOptions{Name: "cell", InitialRTT: 60 * time.Millisecond})
	mustSetPath(t, s.a[1], 0, PathOptions{Learned: true})
	mustSetPath(t, s.a[1], 1, PathOptions{Learned: true, InitialRTT: 60 * time.Millisecond})
	s.attach()
	const bulk = 1 << 30
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
		if string(meta) == "stream-0" {
			return &appStream{toSend: bulk, expect: 0, resetAfter: -1}
		}
		return &appStream{expect: 1000, replyAfterEOF: 1000, resetAfter: -1}
	}
	dl := s.apps[0].open("stream-0", 0, bulk)
	s.runUntil(10*time.Second, func() bool { return false })
	if dl.received < 4<<20 {
		t.Fatalf("bulk at 10 s: %d bytes: want it under way on both paths", dl.received)
	}
	cellRTT := pathOf(s.a[0], 1).SRTT
	var waits []time.Duration
	for k := range 20 {
		start := s.now
		req := s.apps[0].open(fmt.Sprintf("stream-%d", 2*(k+1)), 1000, 1000)
		if !s.runUntil(start+5*time.Second, func() bool { return req.eof }) {
			t.Fatalf("request %d unanswered after 5 s", k)
		}
		waits = append(waits, req.eofAt-start)
		s.runUntil(start+500*time.Millisecond, func() bool { return false })
	}
	slices.Sort(waits)
	p95 := waits[len(waits)*95/100-1]
	t.Logf("request answered: median %v, p95 %v, max %v (cellular RTT %v under the bulk, %v bare); bulk %d bytes", waits[len(waits)/2], p95, waits[len(waits)-1], cellRTT, 2*cell.Delay, dl.received)
	if cellRTT < 2*cell.Delay || p95 > cellRTT*12/10 {
		t.Errorf("p95 %v: want the answer within 1.2 x the cellular RTT %v", p95, cellRTT)
	}
	// Not one crossed the GEO link (its RTT alone is 600 ms).
	if slowest := waits[len(waits)-1]; slowest > 2*cellRTT {
		t.Errorf("slowest answer %v: a request or its answer went the GEO way", slowest)
	}
	if geo, cell := pathOf(s.a[1], 0), pathOf(s.a[1], 1); geo.DataBytesSent < 1<<20 || cell.DataBytesSent < 1<<20 {
		t.Errorf("server's paths: geo %+v, cellular %+v: want the bulk on both", geo, cell)
	}
}

// TestProbeAnswered: when the primary dies under a download, the far
// side still sends on it for a while; the probes of the backup are
// answered on the backup meanwhile, so the link left never counts as
// down at either end.
func TestProbeAnswered(t *testing.T) {
	s, st := pathSim(t, true, 24<<20)
	s.runUntil(2*time.Second, func() bool { return false })
	s.setPathDown(0, true)
	watchProgress(s, st, 4*time.Second)
	for side := range 2 {
		if p := pathOf(s.a[side], 1); p.Downs != 0 || !p.Up {
			t.Errorf("side %d: the backup after the primary died: %+v: want it never down", side, p)
		}
	}
}
