package streams

// This file owns ConnFlow, connection-level flow control: the credit the
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

// ConnFlow is the association's connection-level flow control.
type ConnFlow struct {
	PeerMax       uint64 // credit the peer granted us
	Sent          uint64 // new bytes we sent on all streams
	RecvMax       uint64 // credit we granted
	Recvd         uint64 // sum of the highest offsets received on all streams
	Settled       uint64 // bytes received in order (read or not) or discarded
	Consumed      uint64 // bytes read (or discarded) by the application
	Window        Window // on settled, auto-tuned up to Config.connWindowLimit
	MaxDataQueued bool   // a MAX_DATA with recvMax must (again) go out
}

// Init starts with the protocol's initial credit both ways (initial);
// with a known link rate, the window is the bandwidth-delay product at
// once (window, when larger).
func (f *ConnFlow) Init(initial, window uint64, now time.Duration) {
	f.PeerMax, f.RecvMax = initial, initial
	f.Window.Init(initial, now, 0)
	if w := window; w > f.Window.Size {
		f.Window.Size, f.RecvMax, f.MaxDataQueued = w, w, true
	}
}

// MaybeCredit grants credit up to settled plus the window, once that is a
// quarter of the window beyond what was granted, but never more than hold
// beyond what the application consumed. The window grows up to limit.
func (f *ConnFlow) MaybeCredit(now, srtt time.Duration, limit, hold uint64) {
	if f.Settled-f.Window.EpochOff >= f.Window.Size/4 {
		f.Window.Update(f.Settled, limit, now, srtt)
	}
	m := min(f.Settled+f.Window.Size, f.Consumed+hold)
	if m >= f.RecvMax+f.Window.Size/4 || m > f.RecvMax && m == f.Consumed+hold {
		f.RecvMax = m
		f.MaxDataQueued = true
	}
}

// Settle returns the connection credit of s's bytes below off: they
// arrived in order (or were discarded) and need only the stream's credit
// from now on.
func (f *ConnFlow) Settle(s *State, off uint64) {
	if off > s.settledOff {
		f.Settled += off - s.settledOff
		s.settledOff = off
	}
}
