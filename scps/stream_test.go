package scps

// This file tests stream semantics over the simulated link: half-close,
// resets, close with unread data, flow control, scheduling and head-of-line
// independence, and the stream limit.

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"scpsvpn/scps/internal/wire"
)

func runDone(t *testing.T, s *sim, limit time.Duration) {
	t.Helper()
	if !s.runUntil(limit, func() bool { return s.apps[0].done() && s.apps[1].done() }) {
		for side := 0; side < 2; side++ {
			for id, st := range s.apps[side].streams {
				if !st.closed {
					t.Logf("side %d stream %d: %+v", side, id, *st)
				}
			}
		}
		t.Fatalf("not done by %v", s.now)
	}
}

func TestHalfCloseRequestResponse(t *testing.T) {
	for _, loss := range []float64{0, 0.1} {
		t.Run(fmt.Sprint(loss), func(t *testing.T) {
			link := linkParams{Rate: 5e6, Delay: 50 * time.Millisecond, Loss: loss}
			s := newSim(t, 7, DefaultConfig(), DefaultConfig(), link, link)
			s.attach()
			s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
				return &appStream{expect: 100_000, replyAfterEOF: 70_000, resetAfter: -1}
			}
			c := s.apps[0].open("stream-0", 100_000, 70_000)
			runDone(t, s, 120*time.Second)
			srv := s.apps[1].streams[0]
			if !srv.eof || !c.eof || c.received != 70_000 || srv.received != 100_000 {
				t.Fatalf("client %+v server %+v", *c, *srv)
			}
			if c.eofAt <= srv.eofAt {
				t.Errorf("client saw EOF at %v, before the server read the request at %v", c.eofAt, srv.eofAt)
			}
			for i := 0; i < 2; i++ {
				if n := s.a[i].Stats().StreamsOpen; n != 0 {
					t.Errorf("side %d: %d streams left", i, n)
				}
			}
		})
	}
}

func TestResetBothWays(t *testing.T) {
	cases := []struct {
		name                 string
		resetClient, resetSv int64
	}{
		{"client", 50_000, -1},
		{"server", -1, 30_000},
		{"both", 40_000, 40_000},
		{"before-data", 0, -1},
	}
	for _, c := range cases {
		for _, loss := range []float64{0, 0.1} {
			t.Run(fmt.Sprintf("%s/%v", c.name, loss), func(t *testing.T) {
				link := linkParams{Rate: 5e6, Delay: 30 * time.Millisecond, Loss: loss}
				s := newSim(t, 3, DefaultConfig(), DefaultConfig(), link, link)
				s.attach()
				s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
					if id == 0 {
						return &appStream{toSend: 500_000, expect: -1, resetAfter: c.resetSv}
					}
					return &appStream{toSend: 20_000, expect: 20_000, resetAfter: -1}
				}
				cl := s.apps[0].openWith("stream-0", &appStream{toSend: 500_000, expect: -1, resetAfter: c.resetClient})
				// A second stream must be unaffected.
				other := s.apps[0].open("stream-2", 20_000, 20_000)
				runDone(t, s, 120*time.Second)
				if !other.eof || other.closeErr != nil {
					t.Errorf("unaffected stream: %+v", *other)
				}
				sv := s.apps[1].streams[0]
				var re *ResetError
				switch {
				case c.resetClient >= 0 && c.resetSv < 0:
					if sv != nil && !errors.As(sv.closeErr, &re) {
						t.Errorf("server stream closed with %v, want ResetError", sv.closeErr)
					}
					if !errors.Is(cl.closeErr, ErrStreamClosed) {
						t.Errorf("client stream closed with %v", cl.closeErr)
					}
				case c.resetSv >= 0 && c.resetClient < 0:
					if !errors.As(cl.closeErr, &re) || re.Code != 42 {
						t.Errorf("client stream closed with %v, want ResetError{42}", cl.closeErr)
					}
					if !errors.As(cl.resetErr, &re) || re.Code != 42 {
						t.Errorf("client read/write failed with %v, want ResetError{42}", cl.resetErr)
					}
				}
				if sv != nil && c.resetClient > 0 && c.resetSv < 0 {
					if !errors.As(sv.resetErr, &re) || re.Code != 42 {
						t.Errorf("server read/write failed with %v, want ResetError{42}", sv.resetErr)
					}
				}
				for i := 0; i < 2; i++ {
					if n := s.a[i].Stats().StreamsOpen; n != 0 {
						t.Errorf("side %d: %d streams left", i, n)
					}
				}
			})
		}
	}
}

func TestCloseWithUnreadDataResets(t *testing.T) {
	link := linkParams{Rate: 5e6, Delay: 10 * time.Millisecond}
	s := newSim(t, 1, DefaultConfig(), DefaultConfig(), link, link)
	s.attach()
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
		return &appStream{expect: -1, stallRead: true, resetAfter: -1}
	}
	cl := s.apps[0].open("stream-0", 100_000, 0)
	s.runUntil(2*time.Second, func() bool { return s.a[1].StreamReadable(0) > 0 })
	if err := s.a[1].StreamClose(0); err != nil {
		t.Fatal(err)
	}
	runDone(t, s, 30*time.Second)
	var re *ResetError
	if !errors.As(cl.closeErr, &re) || re.Code != CodeStreamClosed {
		t.Fatalf("client stream closed with %v, want ResetError{%d}", cl.closeErr, CodeStreamClosed)
	}
}

func TestFlowControlBoundsMemory(t *testing.T) {
	cfg := DefaultConfig()
	cfg.StreamWindow = 256 << 10
	cfg.ConnWindow = 1 << 20
	link := linkParams{Rate: 50e6, Delay: 10 * time.Millisecond}
	s := newSim(t, 1, cfg, cfg, link, link)
	s.attach()
	const total = 5 << 20
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
		return &appStream{expect: total, stallRead: true, resetAfter: -1}
	}
	var cls []*appStream
	for i := 0; i < 6; i++ {
		cls = append(cls, s.apps[0].open(fmt.Sprintf("stream-%d", 2*i), total, 0))
	}
	check := func() {
		b := s.a[1]
		var held int
		for _, st := range b.streams.ByID {
			_, recv := st.Buffered()
			held += recv
			// A stalled reader's window is cut below what it holds
			// (streams/readerstall.go); what it holds stays within the
			// most it was granted, never beyond StreamWindow.
			if st.RecvHeld() > cfg.StreamWindow || st.RecvWindow() > cfg.StreamWindow {
				t.Fatalf("stream %d buffers %d bytes, window %d", st.ID(), st.RecvHeld(), st.RecvWindow())
			}
		}
		if b.streams.Flow.Recvd-b.streams.Flow.Consumed > cfg.ConnWindow {
			t.Fatalf("association buffers %d bytes > ConnWindow %d", b.streams.Flow.Recvd-b.streams.Flow.Consumed, cfg.ConnWindow)
		}
		if held > int(cfg.ConnWindow)+6*8<<10 {
			t.Fatalf("receiver holds %d bytes of buffers", held)
		}
		for _, st := range s.a[0].streams.ByID {
			if st.SendHeld() > s.a[0].Config().initialSendBuffer() {
				t.Fatalf("sender buffers %d bytes", st.SendHeld())
			}
		}
	}
	s.runUntil(20*time.Second, func() bool { check(); return false })
	var written uint64
	for _, c := range cls {
		written += c.written
	}
	if max := 6*s.a[0].Config().initialSendBuffer() + cfg.ConnWindow; written > max {
		t.Fatalf("writers got %d bytes in while the reader stalled (bound %d)", written, max)
	}
	t.Logf("stalled: %d bytes written, receiver holds %d", written, s.a[1].streams.Flow.Recvd-s.a[1].streams.Flow.Consumed)
	// Resume reading: everything completes.
	for _, st := range s.apps[1].streams {
		st.stallRead = false
		s.apps[1].service(st)
	}
	runDone(t, s, 300*time.Second)
	for _, st := range s.apps[1].streams {
		if st.received != total {
			t.Errorf("stream %d: received %d", st.id, st.received)
		}
	}
}

func TestSmallStreamNotBehindBulk(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SendRate = 10e6
	link := linkParams{Rate: 10e6, Delay: 50 * time.Millisecond, QueueBytes: 300_000}
	s := newSim(t, 1, cfg, cfg, link, link)
	s.attach()
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
		if id == 0 {
			return &appStream{expect: -1, resetAfter: -1}
		}
		return &appStream{expect: 500, replyAfterEOF: 2000, resetAfter: -1}
	}
	s.apps[0].open("stream-0", 50<<20, 0)
	s.runUntil(3*time.Second, func() bool { return false })
	start := s.now
	small := s.apps[0].open("stream-2", 500, 2000)
	s.runUntil(start+10*time.Second, func() bool { return small.eof })
	took := s.now - start
	t.Logf("request/response during bulk transfer took %v (RTT 100ms)", took)
	if !small.eof || took > 350*time.Millisecond {
		t.Fatalf("small stream took %v (eof %v)", took, small.eof)
	}
}

// streamFrames lists the (stream, offset, len) of the STREAM frames in pkt.
func streamFrames(pkt []byte) (out [][3]uint64) {
	var f wire.Frame
	for p := 0; p < len(pkt); {
		n, err := wire.ParseFrame(pkt[p:], &f)
		if err != nil {
			return nil
		}
		p += n
		if f.Type == wire.FrameStream {
			out = append(out, [3]uint64{f.StreamID, f.Offset, uint64(len(f.Data))})
		}
	}
	return out
}

func TestLossDelaysOnlyItsStream(t *testing.T) {
	link := linkParams{Rate: 20e6, Delay: 40 * time.Millisecond}
	cfg := DefaultConfig()
	cfg.SendRate = 20e6
	s := newSim(t, 1, cfg, cfg, link, link)
	s.attach()
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
		return &appStream{expect: 2 << 20, resetAfter: -1}
	}
	a := s.apps[0].open("stream-0", 2<<20, 0)
	_ = s.apps[0].open("stream-2", 2<<20, 0)
	var dropAt time.Duration
	var holeOff uint64
	retxAt := time.Duration(0)
	s.observe = func(from int, pkt []byte) bool {
		if from != 0 {
			return false
		}
		for _, f := range streamFrames(pkt) {
			if f[0] == 0 && f[2] > 0 {
				if dropAt == 0 && f[1] >= 500_000 {
					dropAt, holeOff = s.now, f[1]
					return true
				}
				if dropAt != 0 && retxAt == 0 && f[1] == holeOff {
					retxAt = s.now
				}
			}
		}
		return false
	}
	s.runUntil(30*time.Second, func() bool { return dropAt != 0 })
	// Let the packets sent right after the lost one arrive.
	s.runUntil(dropAt+45*time.Millisecond, func() bool { return false })
	bStart := s.apps[1].streams[2].received
	s.runUntil(30*time.Second, func() bool { return s.apps[1].streams[0].received > holeOff })
	bEnd := s.apps[1].streams[2].received
	if bEnd-bStart < 20_000 {
		t.Errorf("stream 2 advanced only %d bytes while stream 0 waited for its repair", bEnd-bStart)
	}
	rtt := 80 * time.Millisecond
	if retxAt == 0 || retxAt-dropAt > 2*rtt {
		t.Errorf("repair sent %v after the loss (RTT %v)", retxAt-dropAt, rtt)
	}
	if n := s.a[0].Stats().PTOs; n != 0 {
		t.Errorf("%d probe timeouts for a single loss", n)
	}
	t.Logf("repair after %v; other stream advanced %d bytes meanwhile", retxAt-dropAt, bEnd-bStart)
	_ = a
	runDone(t, s, 60*time.Second)
}

func TestStreamLimit(t *testing.T) {
	cfgB := DefaultConfig()
	cfgB.MaxStreams = InitialMaxStreams
	link := linkParams{Rate: 10e6, Delay: 20 * time.Millisecond, Loss: 0.02}
	s := newSim(t, 5, DefaultConfig(), cfgB, link, link)
	const n = 400
	sp := sizesSpec(n, 9, 3000, 3000)
	startTransfer(s, sp)
	maxOpen := 0
	ok := s.runUntil(300*time.Second, func() bool {
		peerStreams := 0
		for id := range s.a[1].streams.ByID {
			if id&1 == 0 {
				peerStreams++
			}
		}
		maxOpen = max(maxOpen, peerStreams)
		return s.apps[0].done() && s.apps[1].done()
	})
	if !ok {
		t.Fatalf("not done by %v", s.now)
	}
	checkTransfer(t, s, sp)
	if maxOpen > cfgB.MaxStreams {
		t.Errorf("peer had %d streams open at once, limit %d", maxOpen, cfgB.MaxStreams)
	}
	t.Logf("max concurrent %d of limit %d", maxOpen, cfgB.MaxStreams)
}

func TestBulkStreamsShareFairly(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SendRate = 20e6
	link := linkParams{Rate: 20e6, Delay: 20 * time.Millisecond}
	s := newSim(t, 1, cfg, cfg, link, link)
	s.attach()
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
		return &appStream{expect: -1, resetAfter: -1}
	}
	for i := 0; i < 3; i++ {
		s.apps[0].open(fmt.Sprintf("stream-%d", 2*i), 100<<20, 0)
	}
	s.runUntil(5*time.Second, func() bool { return false })
	var got []uint64
	var lo, hi uint64 = 1 << 62, 0
	for i := 0; i < 3; i++ {
		r := s.apps[1].streams[uint64(2*i)].received
		got = append(got, r)
		lo, hi = min(lo, r), max(hi, r)
	}
	t.Logf("bytes per stream after 5 s: %v", got)
	if lo == 0 || float64(hi)/float64(lo) > 1.2 {
		t.Errorf("unfair share: %v", got)
	}
}

// TestResetAfterPeerFinished: the peer has finished and forgotten the
// stream (both FINs delivered, its data acknowledged) when we reset it; it
// will not answer, and our side must still forget the stream.
func TestResetAfterPeerFinished(t *testing.T) {
	link := linkParams{Rate: 10e6, Delay: 10 * time.Millisecond}
	s := newSim(t, 1, DefaultConfig(), DefaultConfig(), link, link)
	s.attach()
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
		return &appStream{expect: 1000, replyAfterEOF: 5000, resetAfter: -1}
	}
	cl := s.apps[0].openWith("stream-0", &appStream{toSend: 1000, expect: -1, stallRead: true, resetAfter: -1})
	if !s.runUntil(10*time.Second, func() bool { return s.apps[1].done() && s.apps[1].accepted == 1 }) {
		t.Fatal("server side did not finish")
	}
	if n := s.a[1].Stats().StreamsOpen; n != 0 {
		t.Fatalf("server still has %d streams", n)
	}
	if err := s.a[0].StreamReset(cl.id, 9); err != nil {
		t.Fatal(err)
	}
	if !s.runUntil(s.now+5*time.Second, func() bool { return s.a[0].Stats().StreamsOpen == 0 }) {
		t.Fatalf("client kept the reset stream: %+v", *s.a[0].streams.ByID[cl.id])
	}
}
