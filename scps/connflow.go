package scps

// This file owns connFlow, connection-level flow control: the credit the
// peer granted us (MAX_DATA) and the new bytes we sent against it, and the
// credit we grant the peer, which grows as the application reads and is
// auto-tuned (window.go).

import "time"

type connFlow struct {
	peerMax       uint64 // credit the peer granted us
	sent          uint64 // new bytes we sent on all streams
	recvMax       uint64 // credit we granted
	recvd         uint64 // sum of the highest offsets received on all streams
	consumed      uint64 // bytes read (or discarded) by the application
	window        window // auto-tuned up to Config.connWindowLimit
	maxDataQueued bool   // a MAX_DATA with recvMax must (again) go out
}

// init starts with the protocol's initial credit both ways; with a known
// link rate, the window is the bandwidth-delay product at once.
func (f *connFlow) init(cfg Config, now time.Duration) {
	f.peerMax, f.recvMax = InitialConnCredit, InitialConnCredit
	f.window.init(InitialConnCredit, now, 0)
	if w := cfg.initialConnWindow(); w > f.window.size {
		f.window.size, f.recvMax, f.maxDataQueued = w, w, true
	}
}

// maybeCredit grants more credit once a quarter of the window was
// consumed; the window grows up to limit.
func (f *connFlow) maybeCredit(now, srtt time.Duration, limit uint64) {
	if f.recvMax-f.consumed > f.window.size*3/4 {
		return
	}
	f.window.update(f.consumed, limit, now, srtt)
	if m := f.consumed + f.window.size; m > f.recvMax {
		f.recvMax = m
		f.maxDataQueued = true
	}
}
