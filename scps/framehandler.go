package scps

// This file owns the Association's frame handler: what happens to each
// frame of a packet the sent-packet handler (internal/ackhandler) declared
// acknowledged or lost. The streams' frames are streams.Manager's
// (internal/streams/sentframes.go); an acknowledged ACK lets the receiver
// forget the ranges below it. Datagrams and PINGs are never sent again.

import "scpsvpn/scps/internal/ackhandler"

// assocFrames is the Association as the sent-packet handler's
// FrameHandler (the methods stay off the Association's exported API).
type assocFrames struct{ a *Association }

// FrameAcked acts on a frame of an acknowledged packet.
func (h assocFrames) FrameAcked(f *ackhandler.SentFrame) {
	a := h.a
	if f.Kind == ackhandler.KindAck {
		// The peer knows every hole below that ACK's largest, so they
		// may be forgotten; with several paths a packet below it may
		// still be on its way on a slower path: its hole goes a round
		// trip of the slowest path later (a retired path's too: its
		// probes bring it back).
		if a.paths.inUse() > 1 {
			a.ack.OnAckAckedAt(f.Off, a.now, a.reorderHold())
		} else {
			a.ack.OnAckAcked(f.Off)
		}
		return
	}
	a.streams.FrameAcked(f, a.now, a.sent.RTT().Smoothed())
}

// FrameLost queues again what a frame of a lost packet carried, unless it
// was delivered meanwhile or is obsolete.
func (h assocFrames) FrameLost(f *ackhandler.SentFrame) { h.a.streams.FrameLost(f) }
