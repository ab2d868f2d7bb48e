package scps

// This file tests the default controller's answer to a congestion loss
// taken while the sender is application-limited (a QUIC flow in its own
// slow start, a page's objects trickling in): the delivery rate measured
// then is the application's, not the link's, and must not become the
// window; once the offered load rises the link is full again within a few
// round trips.

import (
	"testing"
	"time"
)

// appLimitedRun sends at offered bit/s over GEO 10/2 Mbit/s, 600 ms
// (rates told or not) until rise, dropping every drop-th full-size packet
// sent from lossAt until rise (0: none; every loss is taken for
// congestion), then offers all it can. It returns the bytes the receiver
// got from rise to rise+span.
func appLimitedRun(t *testing.T, told bool, drop int, offered float64, lossAt, rise, span time.Duration) uint64 {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Loss = LossCongestion
	s := newGEOSimConfig(t, 10e6, 2e6, told, cfg)
	dropped, full := 0, 0
	s.observe = func(from int, pkt []byte) bool {
		if drop == 0 || from != 0 || s.now < lossAt || s.now >= rise || len(pkt) < tunnelPacketSize/2 {
			return false
		}
		if full++; (full-1)%drop != 0 {
			return false
		}
		dropped++
		return true
	}
	id, err := s.a[0].OpenStream([]byte("stream-0"))
	if err != nil {
		t.Fatal(err)
	}
	// The stream is written here, not by the application model, so that
	// the offered load is ours: up to upto bytes, as the send buffer
	// takes them.
	var written uint64
	buf := make([]byte, 64<<10)
	feed := func(upto uint64) { written = writeUpTo(t, s.a[0], id, buf, written, upto) }
	const tick = 5 * time.Millisecond
	var atRise uint64
	for s.now < rise+span {
		next := s.now + tick
		if !s.runUntil(next, func() bool { return false }) && s.now < next {
			s.now = next
		}
		if s.now < rise {
			feed(uint64(offered / 8 * s.now.Seconds()))
			continue
		}
		if atRise == 0 {
			atRise = s.a[1].streams.Flow.Recvd
		}
		feed(1 << 40)
	}
	if drop > 0 && dropped == 0 {
		t.Fatal("no packet was dropped")
	}
	if st := s.a[0].Stats(); drop > 0 && st.LossEventsCongestion == 0 {
		t.Fatal("the loss was not taken for congestion")
	}
	return s.a[1].streams.Flow.Recvd - atRise
}

// TestAppLimitedLossKeepsWindow: a sender at a tenth of a GEO link's rate
// takes congestion losses (one, or one in a hundred packets for six
// seconds), then offers all it can. Over the eight round trips after that
// it delivers at least 85% of what the same run without the losses
// delivers. Cut to the delivery rate of the application-limited moment
// and grown back by a tenth every other round trip, it delivered 17-23%.
func TestAppLimitedLossKeepsWindow(t *testing.T) {
	const (
		offered = 1e6
		rise    = 10 * time.Second
		span    = 8 * 600 * time.Millisecond
	)
	for _, k := range []struct {
		name   string
		told   bool
		lossAt time.Duration
		drop   int
	}{
		{"told/one loss", true, 8 * time.Second, 1 << 30},
		{"untold/one loss", false, 8 * time.Second, 1 << 30},
		{"told/1% loss", true, 4 * time.Second, 100},
		{"untold/1% loss", false, 4 * time.Second, 100},
	} {
		t.Run(k.name, func(t *testing.T) {
			clean := appLimitedRun(t, k.told, 0, offered, k.lossAt, rise, span)
			lossy := appLimitedRun(t, k.told, k.drop, offered, k.lossAt, rise, span)
			ratio := float64(lossy) / float64(clean)
			t.Logf("%s: after the rise %.2f Mbit/s with the losses, %.2f Mbit/s without: %.2f",
				k.name, float64(lossy)*8/span.Seconds()/1e6, float64(clean)*8/span.Seconds()/1e6, ratio)
			if ratio < 0.85 {
				t.Errorf("%s: losses taken while application-limited left %.0f%% of the rate after the rise, want at least 85%%", k.name, 100*ratio)
			}
		})
	}
}

// writeUpTo writes the stream's pattern from written up to upto bytes, as
// the send buffer takes them, so a test sets the offered load itself; it
// returns the bytes written so far.
func writeUpTo(t *testing.T, a *Association, id uint64, buf []byte, written, upto uint64) uint64 {
	t.Helper()
	for written < upto {
		b := buf[:min(uint64(len(buf)), upto-written)]
		fillPattern(b, id, 0, written)
		n, err := a.StreamWrite(id, b)
		if err != nil {
			t.Fatalf("write: %v", err)
		}
		written += uint64(n)
		if n < len(b) {
			break
		}
	}
	return written
}
