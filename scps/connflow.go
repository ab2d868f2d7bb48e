package scps

// This file owns connFlow, connection-level flow control: the credit the
// peer granted us (MAX_DATA) and the new bytes we sent against it, and the
// credit we grant the peer, which grows as the application reads and is
// auto-tuned (autotune, shared with the streams' windows).

import "time"

type connFlow struct {
	peerMax       uint64 // credit the peer granted us
	sent          uint64 // new bytes we sent on all streams
	recvMax       uint64 // credit we granted
	recvd         uint64 // sum of the highest offsets received on all streams
	consumed      uint64 // bytes read (or discarded) by the application
	window        uint64 // current window (auto-tuned up to Config.ConnWindow)
	epochStart    time.Duration
	epochOff      uint64
	maxDataQueued bool // a MAX_DATA with recvMax must (again) go out
}

// init starts with the protocol's initial credit both ways; with a known
// link rate, the window is the bandwidth-delay product at once.
func (f *connFlow) init(cfg Config, now time.Duration) {
	f.peerMax, f.recvMax, f.window = InitialConnCredit, InitialConnCredit, InitialConnCredit
	f.epochStart = now
	if w := cfg.initialConnWindow(); w > f.window {
		f.window, f.recvMax, f.maxDataQueued = w, w, true
	}
}

// maybeCredit grants more credit once a quarter of the window was
// consumed; the window grows up to limit.
func (f *connFlow) maybeCredit(now, srtt time.Duration, limit uint64) {
	if f.recvMax-f.consumed > f.window*3/4 {
		return
	}
	autotune(&f.window, &f.epochStart, &f.epochOff, f.consumed, limit, now, srtt)
	if m := f.consumed + f.window; m > f.recvMax {
		f.recvMax = m
		f.maxDataQueued = true
	}
}

// autotune grows a receive window when the application consumed data at a
// rate the window would limit: more than half of window per smoothed RTT
// since the last update.
func autotune(window *uint64, epochStart *time.Duration, epochOff *uint64, readOff, limit uint64, now, srtt time.Duration) {
	elapsed := now - *epochStart
	read := readOff - *epochOff
	if *window < limit && read > 0 && float64(read)*2*srtt.Seconds() >= float64(*window)*elapsed.Seconds() {
		*window = min(2**window, limit)
	}
	*epochStart, *epochOff = now, readOff
}
