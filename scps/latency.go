package scps

// This file owns the latency scheduler of a multipath association: when
// the next stream data to go is a light stream's (a new stream's first
// bytes, a request, a reply, a small write: streams' LightWaiting), the
// packet goes on the lowest-delay path that may carry data, not wherever
// bonding would put it, and waits for that path's window and pacer (a
// packet's time on a fast link, while bulk fills it): a short exchange
// then crosses the fast link instead of queueing behind bulk on a slow
// one.
//
// A path probe that came on another path than the data path is answered
// at once on its own path, by an ACK: while the far side still sends its
// data on a link that just died, the probes of the link left are then
// answered, and that link does not count as down for want of it.

import "scpsvpn/scps/internal/wire"

// latencyPath is the path for a light stream's data among set (the paths
// that may carry data; bond.go): the lowest-delay one, when a light
// stream's data is next.
func (a *Association) latencyPath(set uint16) (int, bool) {
	if !a.streams.LightWaiting() {
		return 0, false
	}
	return a.fastestPath(set), true
}

// owedAnswer returns a path owed the answer to a probe, if any, and
// clears it.
func (ps *pathSet) owedAnswer() (int, bool) {
	for i := range MaxPaths {
		if ps.answerOwed&(1<<i) != 0 {
			ps.answerOwed &^= 1 << i
			if p := &ps.p[i]; p.inUse && !p.retired {
				return i, true
			}
		}
	}
	return 0, false
}

// sendProbeAnswer builds the answer to a probe: the ACK due and one
// PADDING frame, which tells the peer it is no traffic of ours
// (isProbeAnswer).
func (a *Association) sendProbeAnswer(buf []byte) int {
	if !a.ack.Pending() {
		return 0
	}
	limit := a.limit(buf, a.sent.NextPN())
	if limit < 64 {
		return 0
	}
	firstFrame := a.sent.FrameEnd()
	b := a.appendAck(buf[:0:limit-1], limit-1)
	if len(b) == 0 {
		a.sent.DropFramesFrom(firstFrame)
		return 0
	}
	b = append(b, wire.FramePadding)
	a.onSent(builtPacket{firstFrame: firstFrame, size: len(b), ackLen: len(b) - 1})
	return len(b)
}
