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
// A peer's new stream (a request on a new connection) quiets the
// lowest-delay path's bulk until its answer goes, for the queue there at
// most (quietForAnswer): the answer then waits behind less of it.
//
// A path probe that came on another path than the data path is answered
// at once on its own path, by an ACK: while the far side still sends its
// data on a link that just died, the probes of the link left are then
// answered, and that link does not count as down for want of it.

import (
	"time"

	"scpsvpn/scps/internal/wire"
)

// latencyPath is the path for a light stream's data among set (the paths
// that may carry data; bond.go): the lowest-delay one, when a light
// stream's data is next.
func (a *Association) latencyPath(set uint16) (int, bool) {
	if !a.streams.LightWaiting() {
		return 0, false
	}
	i := a.fastestPath(set)
	if i == a.quietPath() {
		// The answer goes: the quiet has served.
		a.paths.quietUntil = a.now
	}
	return i, true
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

// quietForAnswer begins a quiet on the lowest-delay path when the peer
// opened a new stream on an association that bonds several paths: the
// answer (a reply, once the application has it: the far endpoint dials
// its server first) goes on that path (latencyPath) and waits behind the
// queue the bulk keeps at its bottleneck. Until the answer goes, for the
// queue's estimate there at most (its smoothed or latest RTT above the
// least, and twice its variation; at most quietMax), the path takes no
// new bulk data (repairs still go), so the queue drains while the far
// side prepares the answer; the bulk goes on the other paths meanwhile.
// One quiet in quietEvery of its length at most: a site opening
// connections by the thousand costs the path no more than a tenth of its
// time. In virtual time (TestPathLatencyAnswered, the answer 3 ms after
// the request) the request's p95 beside bulk went from 1.19-1.28x to
// 1.15-1.21x the cellular RTT on GEO+CELL, from 1.19-1.26x to 1.14-1.17x
// the LEO's on LEO+GEO, with the hosts' delays varying by 0-5 ms.
func (a *Association) quietForAnswer() {
	if !a.paths.multi() || a.now < a.paths.quietNext {
		return
	}
	set := a.dataPaths()
	if set&(set-1) == 0 {
		return
	}
	fast := a.fastestPath(set)
	rtt := a.sent.PathRTT(fast)
	if rtt.Samples() < quietSamples {
		// No queue measured yet: an association's first stream.
		return
	}
	q := min(max(rtt.Smoothed(), rtt.Latest())-rtt.Min()+2*rtt.Var(), quietMax)
	if q <= 0 {
		return
	}
	a.paths.quiet, a.paths.quietUntil, a.paths.quietNext = fast, a.now+q, a.now+quietEvery*q
}

const (
	// quietMax bounds a quiet: the queue a low-delay path keeps for its
	// hosts' noise (cc LowDelayer) is a few milliseconds.
	quietMax = 10 * time.Millisecond
	// quietSamples: the path's RTT samples a queue estimate needs.
	quietSamples = 16
	// quietEvery: a quiet of d begins no sooner than quietEvery*d after
	// the last one began.
	quietEvery = 10
)

// quietPath is the path in a quiet now (-1: none).
func (a *Association) quietPath() int {
	if a.now >= a.paths.quietUntil {
		return -1
	}
	return a.paths.quiet
}

// quietHold reports whether the packet to be built may carry no stream
// data: it would go on the path in a quiet, and no light stream's data
// or repair waits.
func (a *Association) quietHold() bool {
	return a.sent.Current() == a.quietPath() && a.streams.RetxQ.Len() == 0 && !a.streams.LightWaiting()
}
