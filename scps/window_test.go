package scps

// This file checks the auto-tuned windows and send buffers (internal/streams/window.go):
// they grow to what the link measures without being told its rate, and
// stay put while nothing drains through them.

import (
	"testing"
	"time"

	"scpsvpn/scps/internal/streams"
)

// TestWindowsFindFastLinkUnconfigured: the high-rate GEO of
// draft-kuhn-quic-4-sat (250/3 Mbit/s, 650 ms) with no rate configured.
// The bandwidth-delay product is 20 MB; the receive window, the send
// buffer and the bytes in flight must reach it without being told (a fixed
// default held them near 3 MB, 14% of the link). Under the race detector
// the link runs at 100 Mbit/s (8 MB, still twice the old cap).
func TestWindowsFindFastLinkUnconfigured(t *testing.T) {
	rate := 250e6
	if raceEnabled {
		rate = 100e6
	}
	fwd := linkParams{Rate: rate, Delay: 325 * time.Millisecond, QueueBytes: int(rate / 8 * 0.65), Overhead: tunnelOverhead}
	rev := linkParams{Rate: 3e6, Delay: 325 * time.Millisecond, QueueBytes: 250_000, Overhead: tunnelOverhead}
	cfg := DefaultConfig()
	cfg.MaxPacketSize, cfg.WireOverhead = tunnelPacketSize, tunnelOverhead
	cfg.InitialRTT = 650 * time.Millisecond
	s := newSim(t, 1, cfg, cfg, fwd, rev)
	s.attach()
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream { return &appStream{expect: -1, resetAfter: -1} }
	s.apps[0].open("stream-0", 1<<40, 0)
	bdp := rate / 8 * 0.65
	dur := 10 * time.Second
	var inFlight int
	var recvWin, sendBuf uint64
	step := 50 * time.Millisecond
	for at := step; at <= dur; at += step {
		s.runUntil(at, func() bool { return false })
		inFlight = max(inFlight, s.a[0].Stats().BytesInFlight)
		if st := s.a[0].streams.ByID[0]; st != nil {
			sendBuf = max(sendBuf, st.SendWindow())
		}
		if st := s.a[1].streams.ByID[0]; st != nil {
			recvWin = max(recvWin, st.RecvWindow())
		}
	}
	b0 := s.a[1].streams.Flow.Recvd
	s.runUntil(dur+time.Second, func() bool { return false })
	gp := float64(s.a[1].streams.Flow.Recvd-b0) * 8
	t.Logf("peak in flight %d, receive window %d, send buffer %d (BDP %.0f); goodput in the second after %v: %.0f Mbit/s (%.1f%% of the payload limit)",
		inFlight, recvWin, sendBuf, bdp, dur, gp/1e6, 100*gp/payloadLimit(rate, 0))
	if float64(inFlight) < 0.9*bdp {
		t.Errorf("bytes in flight peaked at %d, want at least 90%% of the %.0f-byte BDP", inFlight, bdp)
	}
	if float64(recvWin) < bdp || float64(sendBuf) < bdp {
		t.Errorf("receive window %d, send buffer %d: want both above the %.0f-byte BDP", recvWin, sendBuf, bdp)
	}
}

// TestWindowsStayPutWhileStalled: once the reader stops, its receive
// window falls to StallWindow and grows no more, nor does the writer's
// send buffer; the receiver holds what arrived and no credit beyond the
// window, the sender no more than its buffer.
func TestWindowsStayPutWhileStalled(t *testing.T) {
	link := linkParams{Rate: 200e6, Delay: 50 * time.Millisecond, QueueBytes: 2_500_000}
	cfg := DefaultConfig()
	cfg.InitialRTT = 100 * time.Millisecond
	s := newSim(t, 3, cfg, cfg, link, link)
	s.attach()
	var reader *appStream
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
		reader = &appStream{expect: -1, resetAfter: -1}
		return reader
	}
	s.apps[0].open("stream-0", 1<<40, 0)
	s.runUntil(2*time.Second, func() bool { return false })
	snd, rcv := s.a[0].streams.ByID[0], s.a[1].streams.ByID[0]
	if reader == nil || snd == nil || rcv == nil {
		t.Fatal("stream not open after 2 s")
	}
	// 200 Mbit/s x 100 ms is 2.5 MB: both grew past their start (4 MiB
	// and 1 MiB) while the reader kept up.
	sendBefore, recvBefore := snd.SendWindow(), rcv.RecvWindow()
	if sendBefore <= cfg.initialSendBuffer() || recvBefore <= cfg.initialStreamWindow() {
		t.Fatalf("no growth while reading: send buffer %d, receive window %d", sendBefore, recvBefore)
	}
	reader.stallRead = true
	s.runUntil(3*time.Second, func() bool { return false }) // data in flight lands
	sendStalled, recvStalled := snd.SendWindow(), rcv.RecvWindow()
	s.runUntil(30*time.Second, func() bool {
		// The credit covers what arrived (what was in flight when the
		// credit was cut, streams/readerstall.go), and beyond it no more
		// than the window, which fell to StallWindow.
		if held := rcv.RecvHeld(); held > rcv.RecvCredit() || rcv.RecvCredit() > max(held, rcv.RecvWindow()) {
			t.Fatalf("receiver holds %d bytes, credit %d, window %d", held, rcv.RecvCredit(), rcv.RecvWindow())
		}
		if held := snd.SendHeld(); held > snd.SendWindow() {
			t.Fatalf("sender holds %d bytes in a %d-byte buffer", held, snd.SendWindow())
		}
		return false
	})
	t.Logf("send buffer %d -> %d while reading, %d stalled; receive window %d -> %d, %d stalled",
		cfg.initialSendBuffer(), sendBefore, snd.SendWindow(), cfg.initialStreamWindow(), recvBefore, rcv.RecvWindow())
	if snd.SendWindow() != sendStalled || rcv.RecvWindow() != recvStalled || recvStalled != streams.StallWindow {
		t.Errorf("grew while stalled: send buffer %d -> %d, receive window %d -> %d",
			sendStalled, snd.SendWindow(), recvStalled, rcv.RecvWindow())
	}
}
