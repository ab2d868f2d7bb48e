package scps

import (
	"fmt"
	"slices"
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
			s0, d0 = s.a[1].streams.Flow.Recvd, dgBytes
		}
		s.runUntil(s.now+time.Millisecond, func() bool { return false })
	}
	secs := (dur - warm).Seconds()
	return float64(s.a[1].streams.Flow.Recvd-s0) * 8 / secs, float64(dgBytes-d0) * 8 / secs
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

// requestBesideBulk runs, on GEO 10/2, bulk downloads toward side 0 on
// streams opened at once and, with flood, datagrams toward side 0 at the
// link's rate; then every 500 ms side 0 opens a stream with a 1,000-byte
// request that side 1 answers with 1,000 bytes. It returns each of the
// requests' time from its open to the answer's end.
func requestBesideBulk(t *testing.T, bulk, requests int, flood bool) []time.Duration {
	lat, _ := requestBesideBulkUnsent(t, bulk, requests, flood)
	return lat
}

// requestBesideBulkUnsent is requestBesideBulk that also reports the most
// the answering side's streams held written and not yet sent while the
// requests ran: what its bulk writers (the servers behind a far
// endpoint) could put in beyond what the link takes.
func requestBesideBulkUnsent(t *testing.T, bulk, requests int, flood bool) (_ []time.Duration, maxUnsent uint64) {
	t.Helper()
	s := newGEOSim(t, 2e6, 10e6, 0)
	probes := map[uint64]bool{}
	s.apps[1].onAccept = func(id uint64, _ []byte) *appStream {
		if probes[id] {
			return &appStream{expect: 1000, replyAfterEOF: 1000, resetAfter: -1}
		}
		return &appStream{toSend: 1 << 40, expect: -1, resetAfter: -1}
	}
	s.a[0].SetDatagramHandler(func([]byte) {})
	for i := range bulk {
		s.apps[0].open(fmt.Sprintf("stream-%d", 2*i), 10, -1)
	}
	payload := make([]byte, 1200)
	var owed float64
	step := func(until time.Duration) {
		for s.now < until {
			if flood {
				owed += 10e6 / 8 / 1000 // a millisecond's worth
				for ; owed >= float64(len(payload)); owed -= float64(len(payload)) {
					s.a[1].SendDatagram(payload)
				}
			}
			s.runUntil(s.now+time.Millisecond, func() bool { return false })
			maxUnsent = max(maxUnsent, s.a[1].streams.Unsent)
		}
	}
	step(5 * time.Second) // the bulk streams fill the link
	maxUnsent = 0
	type probe struct {
		st   *appStream
		sent time.Duration
	}
	var ps []probe
	for k := range requests {
		id := uint64(2 * (bulk + k))
		probes[id] = true
		ps = append(ps, probe{s.apps[0].open(fmt.Sprintf("stream-%d", id), 1000, 1000), s.now})
		step(s.now + 500*time.Millisecond)
	}
	step(s.now + 5*time.Second)
	var lat []time.Duration
	for _, p := range ps {
		if !p.st.eof {
			t.Fatalf("a request opened at %v was not answered within 5 s", p.sent)
		}
		lat = append(lat, p.st.eofAt-p.sent)
	}
	slices.Sort(lat)
	t.Logf("%d bulk streams, datagram flood %v: %d requests answered after p50 %v, max %v (RTT 600 ms); at most %d bytes unsent", bulk, flood, len(lat), lat[len(lat)/2], lat[len(lat)-1], maxUnsent)
	return lat, maxUnsent
}

// TestRequestBesideBulkAndFlood: a request on a new stream
// is answered within 1.2 round trips while bulk streams and a datagram
// flood at the link's rate fill a GEO link: new streams and their answers
// go ahead of the bulk queue and the datagrams' share.
//
// The bulk writers' unsent data stays within a few bandwidth-delay
// products, not what their send buffers or a large memory budget would
// take: through the endpoints, the far endpoint's servers otherwise fill
// hundreds of MB of send buffers at the local network's rate, and for as
// long as that lasts its TUN queue holds a new connection's handshake
// and answer back (docs/manyflows.md).
func TestRequestBesideBulkAndFlood(t *testing.T) {
	lat, unsent := requestBesideBulkUnsent(t, 100, 6, true)
	if worst := lat[len(lat)-1]; worst > 720*time.Millisecond {
		t.Errorf("a request took %v, more than 1.2 RTT", worst)
	}
	// GEO 10/2's bandwidth-delay product is 750 kB; a new stream's send
	// buffer (4 MiB) is the floor of what the streams may hold unsent.
	if limit := uint64(8 << 20); unsent > limit {
		t.Errorf("the bulk streams held %d bytes unsent, more than %d: their writers fill buffers the link does not need", unsent, limit)
	}
}

// TestMeasureRequestBesideBulk: the same with the target's 1,000 bulk
// streams of docs/manyflows.md (about a minute).
func TestMeasureRequestBesideBulk(t *testing.T) {
	if !matrixEnabled() {
		t.Skip("set SCPS_MATRIX=1 to measure requests beside 1,000 bulk streams")
	}
	for _, flood := range []bool{false, true} {
		lat := requestBesideBulk(t, 1000, 20, flood)
		if worst := lat[len(lat)-1]; worst > 720*time.Millisecond {
			t.Errorf("a request took %v, more than 1.2 RTT", worst)
		}
	}
}

// TestManySmallDownloads: 1,000 streams opened at once each
// download 30 kB on GEO 10/2. Together, over the time from the first byte
// to the last, they fill at least 95% of the payload limit, and Jain's
// index of the streams' rates (each its bytes over the time from its
// open) is at least 0.97: the round robin of the bulk queue shares the
// link, and the transport leaves no gaps while a thousand streams start.
// A stream's tail that jumped to the light queue once it had 16 KiB left
// finished the streams one after another instead (the first at 7.3 s,
// the median at 19.1, the last at 25.5 s: Jain 0.908).
func TestManySmallDownloads(t *testing.T) {
	r := manySmallDownloads(t, 0, nil)
	if r.together < 0.95 || r.jain < 0.97 {
		t.Errorf("together %.1f%% of the limit (want 95%%), Jain %.3f (want 0.97)", 100*r.together, r.jain)
	}
}

// TestManySmallDownloadsDialed: the same when each answer starts only
// once the far endpoint's dial to its server completes, the dials spread
// over 3 s (as the real endpoint's thousand dials through its netstack
// took on a loaded machine): the link fills as soon as answers wait, and
// stays full, and the streams still running when the last answer starts
// share the link from then (Jain's index of their rates from the open at
// least 0.9; it was 0.77 while a bulk stream's tail went as light). The
// index over all the streams is no measure here: the first answers have
// an idle link to themselves and finish within a second or two, while
// the last are not yet answered (work-conserving, not unfair); one
// stream done in 1.7 s of 25 takes the index of all from 0.9 to 0.8.
func TestManySmallDownloadsDialed(t *testing.T) {
	r := manySmallDownloads(t, 3*time.Second, nil)
	if r.together < 0.95 || r.jainShared < 0.9 {
		t.Errorf("together %.1f%% of the limit (want 95%%), Jain %.3f of the streams running when the last answer started (want 0.9)", 100*r.together, r.jainShared)
	}
}

// smallDownloads is what manySmallDownloads measured.
type smallDownloads struct {
	// together: the bytes over the time from the first byte to the last
	// (took) as a share of the payload limit.
	together float64
	took     time.Duration
	// jain: Jain's index of the streams' rates, each its bytes over the
	// time from the open to its last byte; jainShared: the same over the
	// streams not done when the last answer started.
	jain, jainShared float64
}

// manySmallDownloads opens 1,000 streams at once, each answered with
// 30 kB, the i-th answer starting dialSpread*i/n after its stream
// arrives, on GEO 10/2 with its directions changed by link (nil: none).
func manySmallDownloads(t *testing.T, dialSpread time.Duration, link func(ab, ba *linkParams)) (r smallDownloads) {
	const n, size = 1000, 30_000
	s := newGEOSim(t, 2e6, 10e6, 0)
	if link != nil {
		link(&s.dir[0].p, &s.dir[1].p)
	}
	answered := 0
	var lastAnswer time.Duration // when the last answer was let go
	s.apps[1].onAccept = func(id uint64, _ []byte) *appStream {
		st := &appStream{toSend: size, expect: -1, resetAfter: -1}
		delay := dialSpread * time.Duration(answered) / n
		answered++
		if delay == 0 {
			return st
		}
		st.held = true
		s.after(delay, func() {
			lastAnswer = max(lastAnswer, s.now)
			st.held = false
			s.apps[1].service(st)
		})
		return st
	}
	var sts []*appStream
	for i := range n {
		sts = append(sts, s.apps[0].open(fmt.Sprintf("stream-%d", 2*i), 10, size))
	}
	first := time.Duration(-1)
	s.runUntil(120*time.Second, func() bool {
		if first < 0 && s.a[0].streams.Flow.Recvd > 0 {
			first = s.now
		}
		for _, st := range sts {
			if !st.eof {
				return false
			}
		}
		return true
	})
	var last time.Duration
	var rates, shared []float64
	var ends []time.Duration
	for _, st := range sts {
		if !st.eof {
			t.Fatalf("stream %d: %d of %d bytes", st.id, st.received, size)
		}
		last = max(last, st.eofAt)
		rates = append(rates, size/st.eofAt.Seconds())
		ends = append(ends, st.eofAt)
		if st.eofAt >= lastAnswer {
			shared = append(shared, size/st.eofAt.Seconds())
		}
	}
	r.took = last - first
	r.together = float64(n*size) * 8 / r.took.Seconds() / payloadLimit(10e6, 0)
	r.jain, r.jainShared = jain(rates), jain(shared)
	st := s.a[1].Stats()
	slices.Sort(ends)
	t.Logf("first byte %v, last %v: together %.1f%% of the payload limit, Jain %.3f (%.3f of the %d running when the last answer started); sender in slow start %v, %d silence holds",
		first, last, 100*r.together, r.jain, r.jainShared, len(shared), st.InSlowStart, st.SilenceHolds)
	t.Logf("streams done at min %v, p5 %v, p10 %v, p50 %v, max %v; %d before the last answer started (%v)", ends[0], ends[n/20], ends[n/10], ends[n/2], ends[n-1], n-len(shared), lastAnswer)
	return r
}

// TestManySmallDownloadsThroughStalls: the same, dials spread over 3 s,
// with the ACKs held up on their way for 250 ms every 3 s (a loaded
// emulator or host, as the real runs' RTT samples showed: half a second
// above the minimum with under 80 kB in flight). Each stall costs the
// link at most its own length (the silence hold's pause), not slow
// start: taken for a queue, the stalls' samples ended it and cut the
// window to what a tenth of the pipe delivered (2.7 s lost to 8 stalls,
// 89.4% of the limit, against 1.7 s and 92.9% once they are not).
func TestManySmallDownloadsThroughStalls(t *testing.T) {
	manySmallDownloadsThroughStalls(t, 3*time.Second, 250*time.Millisecond)
}

// TestManySmallDownloadsThroughHostJitter: the downloads with their
// answers spread over 1 s, every packet of both directions delayed by a
// host's 0-30 ms (in order), told the link's rate: together at least 95%
// of the limit. The delay signal read the noise as a queue and held the
// window below the pipe: 78.6% (one 30 MB download alike: 77.6%); judged
// with twice the RTT's jitter that no trend explains, 98.2% (93.6%).
func TestManySmallDownloadsThroughHostJitter(t *testing.T) {
	r := manySmallDownloads(t, time.Second, func(ab, ba *linkParams) {
		ab.Jitter, ba.Jitter = 30*time.Millisecond, 30*time.Millisecond
	})
	if r.together < 0.95 || r.jainShared < 0.9 {
		t.Errorf("together %.1f%% of the limit (want 95%%), Jain %.3f of the streams running when the last answer started (want 0.9)", 100*r.together, r.jainShared)
	}
}

// TestMeasureManySmallDownloadsHostNoise measures what a host's noise on
// both directions costs the 1,000 downloads (docs/manyflows.md): a uniform
// delay of up to 10, 30 and 60 ms on each packet (in order), and ACK stalls
// of 75 ms (shorter than an eighth of the round trip, the least gap
// ackStall tells a stall by) every 0.9, 1.3 and 5 s. It fails only where
// the link must stay full: 10 ms of noise, below what the delay signal
// ignores as the host's. The rest is logged: what the controller loses
// to larger noise is not yet resolved. One 30 MB download through the
// same jitter, last, shows the cost is not the many streams'.
func TestMeasureManySmallDownloadsHostNoise(t *testing.T) {
	if !matrixEnabled() {
		t.Skip("set SCPS_MATRIX=1 to measure the downloads through host noise")
	}
	for _, spread := range []time.Duration{time.Second, 3 * time.Second} {
		for _, j := range []time.Duration{10 * time.Millisecond, 30 * time.Millisecond, 60 * time.Millisecond} {
			r := manySmallDownloads(t, spread, func(ab, ba *linkParams) { ab.Jitter, ba.Jitter = j, j })
			t.Logf("answers over %v, jitter up to %v each way: together %.1f%%, Jain %.3f (%.3f of those running at the last answer)", spread, j, 100*r.together, r.jain, r.jainShared)
			if j <= 10*time.Millisecond && r.together < 0.95 {
				t.Errorf("answers over %v, jitter up to %v: together %.1f%% of the limit, want 95%%", spread, j, 100*r.together)
			}
		}
		for _, every := range []time.Duration{900 * time.Millisecond, 1300 * time.Millisecond, 5 * time.Second} {
			r := manySmallDownloads(t, spread, func(ab, ba *linkParams) {
				ab.StallEvery, ab.StallFor, ab.StallUntimed = every, 75*time.Millisecond, true
			})
			t.Logf("answers over %v, ACK stalls of 75ms every %v: together %.1f%%, Jain %.3f (%.3f of those running at the last answer)", spread, every, 100*r.together, r.jain, r.jainShared)
		}
	}
	// One 30 MB download through the same jitter: the noise costs a
	// single flow as much, so it is the controller's, not the streams'.
	for _, j := range []time.Duration{10 * time.Millisecond, 30 * time.Millisecond} {
		const size = 30_000_000
		s := newGEOSim(t, 2e6, 10e6, 0)
		s.dir[0].p.Jitter, s.dir[1].p.Jitter = j, j
		s.apps[1].onAccept = func(uint64, []byte) *appStream {
			return &appStream{toSend: size, expect: -1, resetAfter: -1}
		}
		st := s.apps[0].open("stream-0", 10, size)
		first := time.Duration(-1)
		s.runUntil(200*time.Second, func() bool {
			if first < 0 && s.a[0].streams.Flow.Recvd > 0 {
				first = s.now
			}
			return st.eof
		})
		if !st.eof {
			t.Fatalf("jitter up to %v: one download of %d bytes did not finish", j, size)
		}
		t.Logf("one download of %d bytes, jitter up to %v each way: %.1f%% of the limit", size, j, 100*float64(size)*8/(st.eofAt-first).Seconds()/payloadLimit(10e6, 0))
	}
}

// manySmallDownloadsThroughStalls runs manySmallDownloads with the
// answers spread over 3 s, with and without the ACKs held for stall every
// every, and fails if the stalls cost more than their own length.
func manySmallDownloadsThroughStalls(t *testing.T, every, stall time.Duration) {
	base := manySmallDownloads(t, 3*time.Second, nil).took
	r := manySmallDownloads(t, 3*time.Second, func(ab, ba *linkParams) {
		ab.StallEvery, ab.StallFor, ab.StallUntimed = every, stall, true
	})
	together, took := r.together, r.took
	stalls := took / every
	lost := took - base
	t.Logf("%v lost to %d stalls of %v: together %.1f%%", lost, stalls, stall, 100*together)
	if lost > time.Duration(stalls)*stall {
		t.Errorf("%v lost to %d stalls of %v: more than the stalls themselves", lost, stalls, stall)
	}
}
