package scps

// This file owns connFlow, connection-level flow control: the credit the
// peer granted us (MAX_DATA) and the new bytes we sent against it, and the
// credit we grant the peer.
//
// The credit we grant is returned as stream data arrives in order, read or
// not, and its window (auto-tuned, window.go) covers only what is in flight
// and what waits behind holes. What a stream holds in order is bounded by
// that stream's own credit, which only reading returns: a stream whose
// reader stalls keeps its own credit, never the association's, so the other
// streams flow on (RFC 9000 §4 keeps the two apart; with credit returned on
// reads only, ten stalled downloads held all of it and froze every flow of
// the site). A separate limit bounds all the association holds, read or
// not: credit beyond what the application consumed never exceeds it.

import "time"

type connFlow struct {
	peerMax       uint64 // credit the peer granted us
	sent          uint64 // new bytes we sent on all streams
	recvMax       uint64 // credit we granted
	recvd         uint64 // sum of the highest offsets received on all streams
	settled       uint64 // bytes received in order (read or not) or discarded
	consumed      uint64 // bytes read (or discarded) by the application
	window        window // on settled, auto-tuned up to Config.connWindowLimit
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

// maybeCredit grants credit up to settled plus the window, once that is a
// quarter of the window beyond what was granted, but never more than hold
// beyond what the application consumed. The window grows up to limit.
func (f *connFlow) maybeCredit(now, srtt time.Duration, limit, hold uint64) {
	if f.settled-f.window.epochOff >= f.window.size/4 {
		f.window.update(f.settled, limit, now, srtt)
	}
	m := min(f.settled+f.window.size, f.consumed+hold)
	if m >= f.recvMax+f.window.size/4 || m > f.recvMax && m == f.consumed+hold {
		f.recvMax = m
		f.maxDataQueued = true
	}
}
