package scps

// This file measures a web page's load over a GEO link in virtual time, as
// the bench's page workload loads it (docs/pageload.md): a request and its
// 30 kB HTML, then one request for the page's objects answered on one
// stream (HTTP/2) or on six streams (HTTP/1.1), with no rates configured
// and random loss each way.

import (
	"fmt"
	"os"
	"testing"
	"time"

	"scpsvpn/scps/internal/wire"
)

// pageLink is a link the page is loaded over: its rates each way, its
// round trip and its random loss each way, queues of a BDP, no rates
// configured (as the bench's *-NORATE conditions).
type pageLink struct {
	up, down float64 // bit/s
	rtt      time.Duration
	loss     float64
}

// pageGEOLink is the bench's GEO-10/2-LOSS-NORATE.
var pageGEOLink = pageLink{up: 2e6, down: 10e6, rtt: 650 * time.Millisecond, loss: 0.005}

// pageLEOLink is the bench's LEO-NORATE without its handovers.
var pageLEOLink = pageLink{up: 20e6, down: 100e6, rtt: 40 * time.Millisecond, loss: 0.005}

// pageGEO is GEO 10/2 Mbit/s, 650 ms with loss each way (the bench's
// GEO-10/2-LOSS-NORATE with that loss).
func pageGEO(t testing.TB, seed uint64, loss float64) *sim {
	l := pageGEOLink
	l.loss = loss
	return pageSim(t, seed, l)
}

// pageSim is a simulator over link l, side 0 the client.
func pageSim(t testing.TB, seed uint64, l pageLink) *sim {
	dir := func(rate float64) linkParams {
		return linkParams{Rate: rate, Delay: l.rtt / 2, QueueBytes: int(rate / 8 * l.rtt.Seconds()), Overhead: tunnelOverhead, Loss: l.loss}
	}
	cfg := DefaultConfig()
	cfg.MaxPacketSize, cfg.WireOverhead = tunnelPacketSize, tunnelOverhead
	cfg.InitialRTT = l.rtt
	cfg.Loss = LossAuto
	s := newSim(t, seed, cfg, cfg, dir(l.up), dir(l.down))
	s.attach()
	return s
}

// pageLoad is one load's times from the first request.
type pageLoad struct {
	html, last time.Duration
	floor      time.Duration // 2 RTT + the bytes at the payload capacity
}

func (l pageLoad) ratio() float64 { return float64(l.last) / float64(l.floor) }

// loadPage requests an HTML of html bytes on a new stream of s (side 0
// the client, over link), then, when it has arrived, the objects (their sizes) on
// conns streams at once, each answered with its share of the objects in
// turn (one stream: all of them back to back, as HTTP/2 sends them).
func loadPage(t testing.TB, s *sim, link pageLink, html int, objects []int, conns int) pageLoad {
	t.Helper()
	rtt, down := link.rtt, link.down
	reply := map[uint64]uint64{}
	s.apps[1].onAccept = func(id uint64, _ []byte) *appStream {
		return &appStream{expect: 100, replyAfterEOF: reply[id], resetAfter: -1}
	}
	next := uint64(0)
	open := func(bytes uint64) *appStream {
		id := next
		next += 2
		reply[id] = bytes
		return s.apps[0].open(fmt.Sprintf("stream-%d", id), 100, int64(bytes))
	}
	start := s.now
	h := open(uint64(html))
	// The objects are asked for as the HTML's last byte is read: the
	// app's events are taken here, not only at the next step, which
	// comes at the next event (18 ms later on LEO).
	if !s.runUntil(start+60*time.Second, func() bool { s.pump(); return h.eof }) {
		t.Fatalf("the HTML did not arrive within 60 s")
	}
	l := pageLoad{html: h.eofAt - start}
	share := make([]uint64, conns)
	total := html
	for i, n := range objects {
		share[i%conns] += uint64(n)
		total += n
	}
	var sts []*appStream
	for _, n := range share {
		sts = append(sts, open(n))
	}
	trace := os.Getenv("SCPS_PAGE_TRACE") != "" // a line per sixth of a round trip
	lastTrace, lastBytes := s.now, uint64(0)
	if !s.runUntil(start+120*time.Second, func() bool {
		if trace && s.now-lastTrace >= rtt/6 {
			st := s.a[1].Stats()
			got := s.a[0].streams.Flow.Recvd
			t.Logf("t=%5.2f recv %7d rate %5.0f kB/s cwnd %7d inflight %7d pace %5.0f kB/s srtt %v var %v lost %d retx %d pto %d qdrop %d ss %v",
				(s.now - start).Seconds(), got, float64(got-lastBytes)/1e3/(s.now-lastTrace).Seconds(), st.Cwnd, st.BytesInFlight, st.PacingRate/1e3,
				st.SRTT.Round(time.Millisecond), st.RTTVar.Round(time.Millisecond), st.PacketsLost, st.Retransmits, st.PTOs, s.dir[1].queueDrop, st.InSlowStart)
			for _, x := range sts {
				if rs, ok := s.a[0].streams.ByID[x.id]; ok {
					t.Logf("   client stream %d: win %d granted-read %d highest-read %d; conn win %d granted-settled %d", x.id, rs.RecvWindow(), rs.RecvCredit(), rs.RecvHeld(), s.a[0].streams.Flow.Window.Size, s.a[0].streams.Flow.RecvMax-s.a[0].streams.Flow.Settled)
				}
				if ss, ok := s.a[1].streams.ByID[x.id]; ok {
					t.Logf("   server stream %d: peermax-sent %d written-sent %d conn peermax-sent %d retxq %d", x.id, ss.SendCredit(), ss.Unsent(), s.a[1].streams.Flow.PeerMax-s.a[1].streams.Flow.Sent, s.a[1].streams.RetxQ.Len())
				}
			}
			lastTrace, lastBytes = s.now, got
		}
		for _, st := range sts {
			if !st.eof {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("the objects did not arrive within 120 s")
	}
	for _, st := range sts {
		l.last = max(l.last, st.eofAt-start)
	}
	l.floor = 2*rtt + time.Duration(float64(total)/(down/8*1460/1500)*float64(time.Second))
	return l
}

// TestPageLoadTailCopies loads the bench's page (a 30 kB HTML, then 50
// objects of 102 kB on average: 5.14 MB) over HTTP/2 on GEO 10/2 with
// 0.5% loss each way, no rates configured, on eight loss patterns, with
// and without tail copies: the copies take a loss at the end of the page
// (or of the HTML, or of a request) out of its load time, on average by
// more than 0.15 s of the 6.3 (docs/pageload.md), for less than a tenth
// more bytes.
func TestPageLoadTailCopies(t *testing.T) {
	objs := make([]int, 50)
	for i := range objs {
		objs[i] = 102_198 // the page's mean object
	}
	var sum [2]time.Duration
	for seed := uint64(1); seed <= 8; seed++ {
		var line string
		for i, copies := range []bool{false, true} {
			s := pageGEO(t, seed, 0.005)
			s.a[1].noTailCopies, s.a[0].noTailCopies = !copies, !copies
			l := loadPage(t, s, pageGEOLink, 30_000, objs, 1)
			st := s.a[1].Stats()
			sum[i] += l.last
			if copies && st.TailCopyBytes*10 > st.StreamBytesSent {
				t.Errorf("seed %d: %d bytes of tail copies for %d of the page", seed, st.TailCopyBytes, st.StreamBytesSent)
			}
			line += fmt.Sprintf("  copies %-5v: HTML %v, page %v (%.3fx the floor %v), %d lost, %d copies (%d bytes)",
				copies, l.html.Round(time.Millisecond), l.last.Round(time.Millisecond), l.ratio(), l.floor.Round(time.Millisecond), st.PacketsLost, st.TailCopies, st.TailCopyBytes)
		}
		t.Logf("seed %d:%s", seed, line)
	}
	without, with := sum[0]/8, sum[1]/8
	t.Logf("mean load: %v without tail copies, %v with", without.Round(time.Millisecond), with.Round(time.Millisecond))
	if without-with < 150*time.Millisecond {
		t.Errorf("tail copies saved %v on average, want more than 0.15 s", without-with)
	}
}

// tailLossResponse answers a 100-byte request with a response of size
// bytes on GEO 10/2 (rates configured, no random loss); with dropLast the
// response's last packet is lost once. It returns the response's time from
// the request, and the server's stats.
func tailLossResponse(t *testing.T, size uint64, dropLast, copies bool) (time.Duration, Stats) {
	t.Helper()
	s := newGEOSim(t, 2e6, 10e6, 0)
	s.a[1].noTailCopies = !copies
	warmResponder(t, s, size)
	dropped := false
	s.observe = func(from int, pkt []byte) bool {
		// The packet that carries the response's FIN: the tail.
		if from != 1 || dropped || !dropLast || !carriesFin(pkt, 2) {
			return false
		}
		dropped = true
		return true
	}
	start := s.now
	st := s.apps[0].open("stream-2", 100, int64(size))
	if !s.runUntil(start+30*time.Second, func() bool { return st.eof }) {
		t.Fatal("the response did not arrive")
	}
	if dropLast && !dropped {
		t.Fatal("no packet carried the response's FIN")
	}
	return st.eofAt - start, s.a[1].Stats()
}

// carriesFin reports whether packet pkt (frames only) holds a STREAM frame
// of stream id with FIN set.
func carriesFin(pkt []byte, id uint64) bool {
	var f wire.Frame
	for p := 0; p < len(pkt); {
		n, err := wire.ParseFrame(pkt[p:], &f)
		if err != nil {
			return false
		}
		if f.Type == wire.FrameStream && f.StreamID == id && f.Fin {
			return true
		}
		p += n
	}
	return false
}

// TestTailLossCopied: a response whose last packet is lost arrives within
// a quarter of a round trip of the same response without the loss, where
// without tail copies the loss is found only by the probe timeout and
// costs more than a whole round trip (600 ms on this GEO link).
func TestTailLossCopied(t *testing.T) {
	const rtt = 600 * time.Millisecond
	for _, size := range []uint64{3000, 30_000, 300_000} {
		clean, _ := tailLossResponse(t, size, false, true)
		copied, st := tailLossResponse(t, size, true, true)
		probed, _ := tailLossResponse(t, size, true, false)
		t.Logf("%d-byte response: %v without loss; its last packet lost: %v with tail copies (%d copies), %v without", size, clean, copied, st.TailCopies, probed)
		if copied-clean > rtt/4 {
			t.Errorf("%d bytes: the tail loss cost %v with tail copies, want at most a quarter RTT", size, copied-clean)
		}
		if probed-copied < rtt*3/4 {
			t.Errorf("%d bytes: tail copies saved only %v over the probe timeout, want about a round trip", size, probed-copied)
		}
	}
}

// pageObjects is the bench's page's objects at their mean size.
func pageObjects() []int {
	objs := make([]int, 50)
	for i := range objs {
		objs[i] = 102_198
	}
	return objs
}

// TestTailCopiesWhole: a tail copy carries the whole of the packet it
// copies, even when an ACK is due with it: a copy cut short by the ACK's
// bytes left the rest of a lost packet (five bytes of the HTML, on GEO) to
// the repair a round trip later. Seed 9 loses a packet of the HTML whose
// copy went out with an ACK.
func TestTailCopiesWhole(t *testing.T) {
	for _, seed := range []uint64{9, 13} {
		s := pageGEO(t, seed, 0.005)
		s.a[1].cfg.TailParity = false // the copies alone (parity.go sends none after its parities)
		type key struct{ id, off uint64 }
		original := map[key]int{} // the length each frame went out with last, not as a copy
		copies, short := 0, 0
		var f wire.Frame
		s.observe = func(from int, pkt []byte) bool {
			if from != 1 {
				return false
			}
			isCopy := s.a[1].Stats().TailCopies > uint64(copies)
			if isCopy {
				copies++
			}
			for p := 0; p < len(pkt); {
				n, err := wire.ParseFrame(pkt[p:], &f)
				if err != nil {
					t.Fatalf("seed %d: a packet the server sent does not parse: %v", seed, err)
				}
				p += n
				if f.Type != wire.FrameStream || len(f.Data) == 0 {
					continue
				}
				k := key{f.StreamID, f.Offset}
				if !isCopy {
					original[k] = len(f.Data)
				} else if l := original[k]; len(f.Data) < l {
					short++
					t.Logf("seed %d: stream %d at %d copied with %d of its %d bytes", seed, f.StreamID, f.Offset, len(f.Data), l)
				}
			}
			return false
		}
		loadPage(t, s, pageGEOLink, 30_000, pageObjects(), 1)
		if copies == 0 {
			t.Fatalf("seed %d: no tail copies", seed)
		}
		if short > 0 {
			t.Errorf("seed %d: %d of %d tail copies cut short", seed, short, copies)
		}
	}
}

// TestPageLoadGEOLossPatterns loads the page over HTTP/2 on GEO 10/2 with
// 0.5% loss each way, untold, on sixteen loss patterns: on average within
// 1.055x of its floor and none above 1.15x. With tail copies alone it was
// 1.091x: the last loss older than the copies reach cost (RTT + d)/2 at
// best; the tail parity (parity.go) rebuilds it: 1.057x (1.170x at
// worst). Then the parity waited srtt/8 of idle, as the copies do, and
// two losses in a block of 32 rebuilt neither; it waits srtt/16 now,
// over blocks of 8 for the packets younger than 3/4 of the minimum RTT:
// 1.049x (1.111x). Earlier
// (1.112x): a loss in the HTML costs a round
// trip (0.65 s, an eighth of the page) unless a tail copy repairs it; on
// a new association the copies had only the credit the HTML itself earned
// (a quarter of its bytes: the newest five of its 21 packets), and two
// patterns of the sixteen lost an older one (1.22x).
func TestPageLoadGEOLossPatterns(t *testing.T) {
	const patterns = 16
	var sum float64
	worst := 0.0
	for seed := uint64(1); seed <= patterns; seed++ {
		s := pageGEO(t, seed, 0.005)
		l := loadPage(t, s, pageGEOLink, 30_000, pageObjects(), 1)
		sum += l.ratio()
		worst = max(worst, l.ratio())
		if l.ratio() > 1.15 {
			t.Logf("seed %d: HTML %v, page %v (%.3fx the floor)", seed, l.html.Round(time.Millisecond), l.last.Round(time.Millisecond), l.ratio())
		}
	}
	t.Logf("%d loss patterns: %.3fx the floor on average, %.3fx at worst", patterns, sum/patterns, worst)
	if sum/patterns > 1.055 || worst > 1.15 {
		t.Errorf("the page at %.3fx its floor on average, %.3fx at worst; want at most 1.055x and 1.15x", sum/patterns, worst)
	}
}

// TestPageLoadLEO loads the bench's page over LEO (100/20 Mbit/s, 40 ms,
// 0.5% loss each way, no rates configured) on one stream (HTTP/2) and on
// six, on four loss patterns: the HTML within its first round trip, the
// page within 1.12x of the floor (0.50 s) on each and 1.03x on average.
// Three things held it above: the server's first flight (ten packets in
// 1.2 ms) came back as one ACK, which timed nothing, so slow start
// doubled from ten packets per round trip (1.53x); once it was timed,
// the window still doubled from the first flight's while the pacer ran
// at the timed rate; and the 30 kB HTML (21 packets) did not fit the
// ten-packet initial window and took a second round trip (1.135x on
// average, 1.161x at worst; the HTML at 82 ms). Then the tail copies
// waited 20 ms of idle, half the round trip: 1.067x on average; they wait
// 10 ms now (minCopyIdle): 1.044x; with the tail parity (parity.go) ahead
// of them, 1.032x; with the parity after srtt/16 of idle (2.5 ms) where it
// waited minCopyIdle, 1.027x.
func TestPageLoadLEO(t *testing.T) {
	var sum float64
	n := 0
	for seed := uint64(1); seed <= 4; seed++ {
		for _, conns := range []int{1, 6} {
			s := pageSim(t, seed, pageLEOLink)
			marks := 0
			s.observe = func(from int, pkt []byte) bool {
				if from == 1 && timingMarked(pkt) {
					marks++
				}
				return false
			}
			l := loadPage(t, s, pageLEOLink, 30_000, pageObjects(), conns)
			st := s.a[1].Stats()
			t.Logf("seed %d, %d streams: HTML %v, page %v (%.3fx the floor %v), %d lost, %d tail copies",
				seed, conns, l.html.Round(time.Millisecond), l.last.Round(time.Millisecond), l.ratio(), l.floor.Round(time.Millisecond), st.PacketsLost, st.TailCopies)
			if marks != 1 {
				t.Errorf("seed %d, %d streams: the server marked %d packets for an ACK at once, want its first flight's first", seed, conns, marks)
			}
			if l.ratio() > 1.12 {
				t.Errorf("seed %d, %d streams: the page took %v, %.3fx its floor %v, want at most 1.12x", seed, conns, l.last, l.ratio(), l.floor)
			}
			// A round trip, the request's and the HTML's serialization,
			// and a few milliseconds of ACK and host delay.
			if l.html > pageLEOLink.rtt*5/4 {
				t.Errorf("seed %d, %d streams: the HTML took %v, want its first round trip (%v)", seed, conns, l.html, pageLEOLink.rtt)
			}
			sum += l.ratio()
			n++
		}
	}
	t.Logf("mean: %.3fx the floor", sum/float64(n))
	if sum/float64(n) > 1.03 {
		t.Errorf("the page at %.3fx its floor on average, want at most 1.03x", sum/float64(n))
	}
}

// timingMarked reports whether packet pkt (frames only) carries a timing
// mark: a PING beside stream data.
func timingMarked(pkt []byte) bool {
	var f wire.Frame
	ping, data := false, false
	for p := 0; p < len(pkt); {
		n, err := wire.ParseFrame(pkt[p:], &f)
		if err != nil {
			return false
		}
		ping = ping || f.Type == wire.FramePing
		data = data || f.Type == wire.FrameStream
		p += n
	}
	return ping && data
}

// TestTimingMarkOnlyUntold: a sender told the link's rate, or resuming
// from a saved path, times nothing and marks no packet.
func TestTimingMarkOnlyUntold(t *testing.T) {
	s := newGEOSim(t, 2e6, 10e6, 0)
	marks := 0
	s.observe = func(from int, pkt []byte) bool {
		if timingMarked(pkt) {
			marks++
		}
		return false
	}
	loadPage(t, s, pageGEOLink, 30_000, pageObjects()[:5], 1)
	if marks != 0 {
		t.Errorf("told the rate, %d packets marked for an ACK at once", marks)
	}
}

// TestPageObjectsLeaveAtTimedRate loads the page over a faster LEO (150
// Mbit/s down, 40 ms, 0.5% loss each way, untold) on four loss patterns:
// the objects' first packet leaves with a window of at least the link's
// bandwidth-delay product, and the page within 1.11x of its floor. There
// the HTML's first ten packets span less than the 1 ms a train needs,
// the first flight's estimate came with its last ACKs, when less than
// half the window was in flight, and slow start opened the window to
// the timed rate only on the objects' first ACKs: their first round trip
// left with the HTML's 64 kB window while the pacer ran at 18 MB/s
// (1.13-1.14x the floor on each pattern).
func TestPageObjectsLeaveAtTimedRate(t *testing.T) {
	link := pageLEOLink
	link.down = 150e6
	bdp := int(link.down / 8 * link.rtt.Seconds())
	for seed := uint64(1); seed <= 4; seed++ {
		s := pageSim(t, seed, link)
		objectsCwnd := 0
		s.observe = func(from int, _ []byte) bool {
			if st := s.a[1].Stats(); from == 1 && objectsCwnd == 0 && st.StreamBytesSent > 31_000 {
				objectsCwnd = st.Cwnd
			}
			return false
		}
		l := loadPage(t, s, link, 30_000, pageObjects(), 1)
		t.Logf("seed %d: the objects' first packet with a window of %d bytes (BDP %d), HTML %v, page %v (%.3fx the floor %v)",
			seed, objectsCwnd, bdp, l.html.Round(time.Millisecond), l.last.Round(time.Millisecond), l.ratio(), l.floor.Round(time.Millisecond))
		if objectsCwnd < bdp {
			t.Errorf("seed %d: the objects' first packet left with a window of %d bytes, want at least the BDP (%d)", seed, objectsCwnd, bdp)
		}
		if l.ratio() > 1.11 {
			t.Errorf("seed %d: the page took %v, %.3fx its floor %v, want at most 1.11x", seed, l.last, l.ratio(), l.floor)
		}
	}
}

// TestPageFlightReleasedInBatches loads the LEO page (100 Mbit/s down,
// 40 ms, 0.5% loss each way, untold) over a link whose far end lets
// packets out every 2 or 3 ms only (ReleaseEvery: a userspace emulator
// whose writer wakes late, as the bench's does on a busy host), on four
// loss patterns each: the server's first flight (the HTML, 2.6 ms on
// the link) arrives in two or three batches, and its timing must still
// read the link's rate, not half of it. The client's ACK at once for the
// flight's marked first packet left after the rest of the first batch
// was taken in, so it answered the batch's last packet at the batch's
// arrival; the train was timed from there, the first batch's bytes out
// of it, and the objects were paced at 42 Mbit/s (3 ms) and 63 (2 ms):
// 1.22x and 1.12x the floor on average. Now the marked packet is a point
// of its own (ReceivedPacketHandler.AckAtOnce) and the train spans the
// whole flight: 78 and 116 Mbit/s, 1.11x and 1.06x.
func TestPageFlightReleasedInBatches(t *testing.T) {
	var sum float64
	n := 0
	for _, every := range []time.Duration{2 * time.Millisecond, 3 * time.Millisecond} {
		for seed := uint64(1); seed <= 4; seed++ {
			s := pageSim(t, seed, pageLEOLink)
			s.dir[1].p.ReleaseEvery = every
			pace := 0.0 // bit/s when the objects' first packet left
			s.observe = func(from int, _ []byte) bool {
				if st := s.a[1].Stats(); from == 1 && pace == 0 && st.StreamBytesSent > 31_000 {
					pace = st.PacingRate * 8
				}
				return false
			}
			l := loadPage(t, s, pageLEOLink, 30_000, pageObjects(), 1)
			t.Logf("released every %v, seed %d: the objects paced at %.0f Mbit/s, page %v (%.3fx the floor %v)",
				every, seed, pace/1e6, l.last.Round(time.Millisecond), l.ratio(), l.floor.Round(time.Millisecond))
			// A batch's stamp is up to a release late at either end of
			// the flight, and the pacer runs at up to 1.25 times the
			// timed rate.
			if pace < 0.7*pageLEOLink.down || pace > 1.5*pageLEOLink.down {
				t.Errorf("released every %v, seed %d: the objects paced at %.0f Mbit/s, want 70-150 (the link's 100)", every, seed, pace/1e6)
			}
			sum += l.ratio()
			n++
		}
	}
	t.Logf("mean: %.3fx the floor", sum/float64(n))
	if sum/float64(n) > 1.1 {
		t.Errorf("the page at %.3fx its floor on average, want at most 1.1x", sum/float64(n))
	}
}

// TestPageFlightInOneBatch loads the LEO page (100 Mbit/s down, 40 ms,
// 0.5% loss each way, untold, one stream) over a link whose far end lets
// packets out every 4, 5 or 8 ms only, on four loss patterns each. The
// HTML's 20 packets (2.4 ms on the link) then arrive in one batch, too
// fast to time, and the flight is timed again with the objects (retime);
// the page within 1.21x of its floor on average (the unbatched page:
// 1.063x). Before, 1.361x (4 ms: 1.248x, 5 ms: 1.326x, 8 ms: 1.509x):
// four tail copies of the HTML 20 ms after it completed its flight, so
// the flight was timed again only on their ACK, half a round trip after
// its own (endFlight), with the objects paced meanwhile at twice the
// initial window per round trip; and a flight timed again at twice the
// first still fit one batch at 5 and 8 ms, so the objects' third round
// trip was the first at the link's rate (retimeFirstGrowth).
func TestPageFlightInOneBatch(t *testing.T) {
	var sum float64
	n := 0
	for _, every := range []time.Duration{4 * time.Millisecond, 5 * time.Millisecond, 8 * time.Millisecond} {
		for seed := uint64(1); seed <= 4; seed++ {
			s := pageSim(t, seed, pageLEOLink)
			s.dir[1].p.ReleaseEvery = every
			l := loadPage(t, s, pageLEOLink, 30_000, pageObjects(), 1)
			st := s.a[1].Stats()
			t.Logf("released every %v, seed %d: page %v (%.3fx the floor %v), %d lost, queue drops %d",
				every, seed, l.last.Round(time.Millisecond), l.ratio(), l.floor.Round(time.Millisecond), st.PacketsLost, s.dir[1].queueDrop)
			sum += l.ratio()
			n++
		}
	}
	t.Logf("mean: %.3fx the floor", sum/float64(n))
	if sum/float64(n) > 1.21 {
		t.Errorf("the page at %.3fx its floor on average, want at most 1.21x", sum/float64(n))
	}
}

// warmResponder makes side 1 answer each 100-byte request with size
// bytes, then runs one exchange to its end and two idle seconds, so the
// association has measured its RTT as one that carried a request before.
func warmResponder(t *testing.T, s *sim, size uint64) {
	t.Helper()
	s.apps[1].onAccept = func(id uint64, _ []byte) *appStream {
		return &appStream{expect: 100, replyAfterEOF: size, resetAfter: -1}
	}
	warm := s.apps[0].open("stream-0", 100, int64(size))
	if !s.runUntil(30*time.Second, func() bool { return warm.eof }) {
		t.Fatal("the first response did not arrive")
	}
	s.runUntil(s.now+2*time.Second, func() bool { return false })
}

// TestPageLoadLEOHostStalls loads the LEO page (one stream, untold) on 24
// loss patterns through hosts that delay each packet by up to 1 ms and
// stall for 10 ms every 70 ms (the server's, taking ACKs in) and every
// 100 ms (the client's, taking data in), stamping what they take in at
// the stall's end (StallUntimed): a model of the binary's LEO page on
// this 2-core machine, where the page is at 1.11-1.2x its floor while
// the simulator's without host delays is at 1.03x. Here 1.116x on
// average, 1.234x at worst (docs/pageload.md, 3 December): the cuts'
// rate, the ACKs of the last quarter round trip (10 ms), spans a stall,
// and a cut left half the link's pipe with more than the pipe in flight.
// Kept from growing: within 1.125x on average and 1.25x at worst.
func TestPageLoadLEOHostStalls(t *testing.T) {
	const patterns = 24
	var sum float64
	worst := 0.0
	for seed := uint64(1); seed <= patterns; seed++ {
		s := pageSim(t, seed, pageLEOLink)
		for i, every := range []time.Duration{70 * time.Millisecond, 100 * time.Millisecond} {
			d := &s.dir[i].p
			d.Jitter = time.Millisecond
			d.StallEvery, d.StallFor, d.StallUntimed = every, 10*time.Millisecond, true
		}
		l := loadPage(t, s, pageLEOLink, 30_000, pageObjects(), 1)
		sum += l.ratio()
		worst = max(worst, l.ratio())
	}
	t.Logf("%d loss patterns: %.3fx the floor on average, %.3fx at worst", patterns, sum/patterns, worst)
	if sum/patterns > 1.125 || worst > 1.25 {
		t.Errorf("the page at %.3fx its floor on average, %.3fx at worst; want at most 1.125x and 1.25x", sum/patterns, worst)
	}
}
