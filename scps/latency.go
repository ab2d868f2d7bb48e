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
// A light stream's new data goes past its path's window, a few packets
// at most (lightPastWindow): a bulk's first flight fills the window of
// the lowest-delay path for a round trip before its first ACK, and an
// answer behind it waited that round trip.
//
// Each packet of a light stream's data goes with a copy right behind it
// on its path (sendLightCopy), so a link's random loss rarely costs the
// request a repair's round trip, and one that waited unacknowledged a
// round trip and more goes again past the window (resendLight), so one
// lost in a brief cut of its path crosses it when the cut ends, not at
// the probe timeout.
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

// lightPastWindow reports whether the packet to be built may carry a
// light stream's new data (and nothing of the bulk's) on its path though
// the path's window is full: on an association of several paths, when
// the latency scheduler put a light stream's data next on the path, and
// less than lightRoom packets beyond its window are in flight there. The
// bulk keeps the lowest-delay path's window full: after its first
// flight for a whole round trip (no ACK back yet), and in its steady
// state between two ACKs. An answer that came then waited for the
// window: in virtual time a request opened with a LEO+GEO download took
// 80.7 ms against the LEO's 40 ms (TestPathLatencyBulkStart), 20-40 ms
// of it the answer's wait for B's first flight's ACKs. A light packet
// past the window adds a packet's time to the queue at most.
func (a *Association) lightPastWindow() bool {
	if !a.paths.multi() || !a.paths.lightNext || a.streams.LightQ.Len() == 0 || a.sent.WindowOpen() {
		return false
	}
	i := a.sent.Current()
	return a.sent.PathInFlight(i) < a.sent.PathController(i).Window()+lightRoom*a.cfg.MaxPacketSize
}

// lightRoom is how many packets a light stream's data may put beyond its
// path's window: a request or an answer of a few kB.
const lightRoom = 4

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

// lightWatch follows the latest packet of a light stream's data sent on a
// path (a request, an answer), so that one lost in a silence of the path
// (a LEO's brief cut) goes again as soon as the path may carry it rather
// than at the probe timeout (resendLight).
type lightWatch struct {
	pn    uint64
	at    time.Duration // when it went, or went again
	on    bool          // pn is watched
	tries uint8         // resends since a light packet of the path was last acknowledged or found lost
	sends uint64        // resends in all
	copy  bool          // pn's copy is due (sendLightCopy)
	// copies counts the copies sent.
	copies uint64
}

// sent watches packet pn, just sent at now; owed says the packet watched
// before still awaits its acknowledgement, so the path is still silent
// (pn may be its resend) and the tries go on.
func (w *lightWatch) sent(pn uint64, now time.Duration, owed bool) {
	if !owed {
		w.tries = 0
	}
	w.pn, w.at, w.on = pn, now, true
}

// lightMaxTries: a light packet goes again at most this many times in a
// row; the probe timeout covers a longer silence.
const lightMaxTries = 4

// lightWait is how long path i's watched light packet may go
// unacknowledged before it goes again: the time its loss would be
// declared by (9/8 of the smoothed RTT) and the delay the peer may hold
// its ACK back by (a quarter of the RTT at most, MaxAckDelay); half that
// once it went again (the path is silent: a cut's end is found within
// half a round trip, at the cost of a light packet each time).
func (a *Association) lightWait(i int) time.Duration {
	srtt := a.sent.PathRTT(i).Smoothed()
	d := srtt + srtt/8 + min(srtt/4, MaxAckDelay)
	if a.paths.p[i].light.tries > 0 {
		d /= 2
	}
	return d
}

// resendLight sends again, past the window and the pacer, the light
// stream's data of a packet that waited lightWait without its ACK. A
// light packet goes on the lowest-delay path (latencyPath), and when that
// path falls silent for a moment (linkemu's LEO cut takes what is queued
// and on the way) it is lost with the bulk around it; the path's window
// then stays full of the lost packets, no ACK comes to show the loss,
// and the repair waited for the probe timeout, at least MinRTO (200 ms)
// after the path's last packet: a request caught in a LEO's 50 ms cut
// took 135-220 ms (TestPathLatencyAcrossCut). The resend goes on the
// lowest-delay path that may carry data, as a light stream's repair does,
// so it crosses the LEO as soon as the cut ends, or the other path once
// the LEO is taken down.
func (a *Association) resendLight() {
	for i := range a.paths.p {
		p := &a.paths.p[i]
		w := &p.light
		if !w.on || !p.inUse {
			continue
		}
		if !a.sent.Outstanding(w.pn) {
			// Acknowledged, or found lost and queued for repair.
			w.on, w.tries = false, 0
			continue
		}
		if a.now < w.at+a.lightWait(i) {
			continue
		}
		if w.tries >= lightMaxTries || !a.sent.Resend(w.pn) {
			w.on, w.tries = false, 0
			continue
		}
		// The resend's packet, once sent, is watched in its place.
		w.tries++
		w.sends++
		w.at = a.now
	}
}

// lightDeadline is when resendLight next has something to do; 0: never.
func (a *Association) lightDeadline() time.Duration {
	if !a.paths.multi() {
		return 0
	}
	var d time.Duration
	for i := range a.paths.p {
		if w := &a.paths.p[i].light; w.on && a.paths.p[i].inUse {
			if t := w.at + a.lightWait(i); d == 0 || t < d {
				d = t
			}
		}
	}
	return d
}

// sendLightCopy sends a copy of the stream data of the light packet just
// sent on a path, right behind it on the same path, past the window and
// the pacer, if one is due. A link's random loss (a cellular link's 1%)
// then costs a request or its answer nothing unless both copies are lost,
// where the loss of the one cost the repair's round trip and more (130-140
// ms against 66 on GEO+CELL, TestPathLatencyTold). A light stream's
// packets are few (a request, an answer, a small write), so the copies
// cost the bulk beside them nothing to speak of; the packet a copy rides
// in carries new data too where the window and the pacer let it.
func (a *Association) sendLightCopy(now time.Time, buf []byte) (n int, pn uint64, path int, ok bool) {
	if a.outage.active {
		return 0, 0, 0, false
	}
	for i := range a.paths.p {
		w := &a.paths.p[i].light
		if !w.copy {
			continue
		}
		w.copy = false
		if !a.paths.p[i].inUse {
			continue
		}
		a.copyFrames = a.sent.TakeCopyOf(w.pn, a.copyFrames[:0])
		if len(a.copyFrames) == 0 {
			continue
		}
		a.sent.Use(i)
		a.copyNow = true
		n, pn = a.Send(now, buf)
		a.copyNow = false
		if n == 0 {
			continue
		}
		w.copies++
		a.paths.onSent(a, i, pn, n, a.lastSent)
		a.paths.p[i].lastOut = a.now
		return n, pn, i, true
	}
	return 0, 0, 0, false
}
