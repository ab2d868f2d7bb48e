package scps

// This file owns Send, which builds at most one packet per call in three
// steps: plan decides what the packet may carry (congestion window, pacer
// and silence hold for ack-eliciting content unless it is a probe; the ACK
// policy and the ACK budget for an ACK), assemble writes the frames
// (sendframes.go) in this order: ACK (when due, or piggybacked on anything
// else), control frames (RESET_STREAM, MAX_DATA, MAX_STREAM_DATA,
// MAX_STREAMS), then datagrams and stream data (repairs, then new data) in
// the order their shares of the link call for (datagramshare.go); and onSent books the packet (sent-packet history, bytes in flight,
// pacer, ACK budget, counters). In outage mode only outage probes go out
// (sendProbe); a closing association sends only its CLOSE (sendClose).

import (
	"time"

	"scpsvpn/scps/internal/ackhandler"
	"scpsvpn/scps/internal/wire"
)

// ackPacketCost estimates the bytes of an ACK-only packet on the wire.
func (a *Association) ackPacketCost() int { return 32 + a.cfg.WireOverhead }

// hasWork reports whether ack-eliciting content is waiting.
func (a *Association) hasWork() bool {
	return a.streams.HasWork() || a.streams.Flow.MaxDataQueued || a.dgrams.count > 0 || a.pingPending
}

// sendReady reports whether Send would probably produce a packet now. It
// may be wrong in the optimistic direction (stale queue entries), never in
// the other: a driver uses it to decide whether to wake up.
func (a *Association) sendReady() bool {
	switch a.state {
	case stateClosing:
		return true
	case stateClosed:
		return false
	}
	if a.outage.active {
		return a.outage.probeDue(a.now)
	}
	if a.sent.Probes() > 0 || a.pingPending || a.ack.Due(a.now) {
		return true
	}
	if _, due := a.trainDue(); due {
		return true
	}
	if a.paths.multi() {
		if _, due := a.paths.probeDue(a.now); due || a.paths.answerOwed != 0 {
			return true
		}
		a.sendPath(false)
	}
	if !a.sent.WindowOpen() && !a.lightPastWindow() || a.silenceHold() || a.quietHold() || !a.hasWork() && !a.copyReady() {
		return false
	}
	if _, held := a.flightHold(); held {
		return false
	}
	a.sent.UpdatePacer(a.now)
	return a.sent.Paced()
}

// Send writes the next packet due now into buf and returns its length
// and its packet number, which the caller carries beside it (the packet
// holds frames only); a length of 0 means nothing is due (see Deadline).
// buf should hold MaxPacketSize bytes.
func (a *Association) Send(now time.Time, buf []byte) (n int, pn uint64) {
	a.setNow(now)
	pn = a.sent.NextPN()
	switch a.state {
	case stateClosed:
		return 0, 0
	case stateClosing:
		return a.sendClose(buf), pn
	}
	if a.outage.active {
		if !a.outage.probeDue(a.now) {
			return 0, 0
		}
		return a.sendProbe(buf), pn
	}
	a.trainWindows()
	if n, ok := a.sendTrain(buf, pn); ok {
		return n, pn
	}
	limit := a.limit(buf, pn)
	if limit < 64 {
		return 0, 0
	}
	plan, ok := a.plan()
	if !ok {
		return 0, 0
	}
	p, ok := a.assemble(buf[:0:limit], plan)
	if !ok {
		return 0, 0
	}
	a.onSent(p)
	if a.parityOn() {
		a.parityOut.onSent(pn, buf[:p.size], p.carried && !p.copy, a.now)
	}
	return p.size, pn
}

// limit is how much of buf packet pn may fill.
func (a *Association) limit(buf []byte, pn uint64) int {
	return min(len(buf), a.packetRoom(pn))
}

// sendPlan is what the next packet may carry.
type sendPlan struct {
	probe   bool // it must be ack-eliciting (probe timeout, keep-alive), window and pacer or not
	canSend bool // it may carry stream data and datagrams
	ackDue  bool // an ACK is due and within the ACK budget
	work    bool // canSend, and ack-eliciting content waits
	copy    bool // canSend, nothing waits: a tail copy's frames are in a.copyFrames
	// lightOnly: canSend past the path's window, for a light stream's
	// new data alone (lightPastWindow)
	lightOnly bool
	parity    bool // canSend, nothing waits: queued parity (parity.go) goes, no copy
}

// plan decides what the next packet may carry; ok is false when nothing
// is due.
func (a *Association) plan() (p sendPlan, ok bool) {
	a.sent.UpdatePacer(a.now)
	a.expireDatagrams()
	p.probe = a.sent.Probes() > 0 || a.pingPending
	_, held := a.flightHold()
	p.canSend = p.probe || (a.sent.WindowOpen() && a.sent.Paced() && !a.silenceHold() && !held && !a.quietHold())
	if !p.canSend && a.lightPastWindow() && a.sent.Paced() && !a.silenceHold() {
		p.canSend, p.lightOnly = true, true
	}
	p.ackDue = a.ack.Due(a.now)
	a.ackBudget.Refill(a.now)
	if p.ackDue && !a.ackBudget.Ready(a.ackPacketCost()) {
		p.ackDue = false
		if a.ack.Defer() {
			a.stats.AcksDeferred++
		}
	}
	p.work = p.canSend && a.hasWork()
	switch {
	case a.hasWork():
		a.idleSince = 0
	case a.idleSince == 0:
		a.idleSince = a.now
	}
	switch {
	case a.copyNow:
		// A light packet's copy (latency.go, SendOn): its frames are in
		// a.copyFrames already.
		p.copy = true
	case p.canSend && !p.work && !p.probe && a.copyReady():
		if a.parityArm() {
			p.parity = true
			break
		}
		if c := a.nextCopy(); c != nil {
			p.copy = true
			a.copyFrames = a.sent.TakeCopy(c, a.copyFrames[:0])
		}
	}
	return p, p.ackDue || p.work || p.probe || p.copy || p.parity
}

// flightHoldMax bounds how long a timed first flight waits for its data
// (flightHold); a sixty-fourth of the RTT when that is shorter.
const flightHoldMax = 20 * time.Millisecond

// flightHold reports whether new data waits, and until when, so that a
// timed first flight (cc.FlightTimer) leaves as one burst: at least a
// full packet of stream data is queued but less than the flight, for at
// most flightHoldMax (an RTT/64 when shorter) from when the first of it was
// held. Through the tunnel the data of a download comes from a TCP
// connection on the LAN leg that is itself in slow start: ten packets,
// then more a LAN round trip later, which through a loaded host's
// netstack is milliseconds. Sent as it came, a 250 Mbit/s link's first
// flight left in sub-bursts of 0.5 ms each, too short to time, and slow
// start doubled up from the initial window for ten round trips. Less
// than a packet (a request) is not held, nor anything once the flight
// has begun.
func (a *Association) flightHold() (until time.Duration, held bool) {
	flight, ok := a.sent.FirstFlight(a.now)
	if !ok || a.streams.Unsent < uint64(a.cfg.MaxPacketSize) || a.streams.Unsent >= uint64(flight) {
		return 0, false
	}
	if !a.holding {
		a.holdSince, a.holding = a.now, true
	}
	until = a.holdSince + min(flightHoldMax, a.sent.RTT().Smoothed()/64)
	return until, a.now < until
}

// copyReady reports whether a tail copy may go out now, once the pacer
// allows (copyAt).
func (a *Association) copyReady() bool {
	at, ok := a.copyAt()
	return ok && at <= a.now
}

// copyAt is when a tail copy may go out: tail copies are on, nothing else
// waits (not even data held back by flow control: that is no burst's
// end), a packet qualifies (internal/ackhandler/tailcopy.go), and nothing
// was sent for srtt/8 (at least minCopyIdle): a sender fed in chunks (a
// TCP connection read as its segments come) runs dry for moments
// mid-transfer, and copies there would take the link from the data that
// follows. Parity (parity.go) at the end of a burst that held at least
// half the window in flight waits srtt/16 only: each block's goes once,
// so one sent at such a moment costs a packet per block of what was
// sent, not a packet per packet, and at a burst's real end every
// millisecond of the wait is a millisecond of the last loss's repair (the
// GEO page with loss, 64 patterns in the simulator, with parity's finer
// blocks: 1.058x its floor on average after srtt/8, 1.046x after
// srtt/16). Not srtt/32 (1.044x): a sender fed in chunks at 250/3
// Mbit/s with 1% loss then sent parities into its start-up's gaps and
// reached 90% of the link a round trip later (TestUntoldStartupFedInChunks).
// A sender with less in flight is application-limited (or in a start-up
// whose window runs ahead of its data): its gaps are no burst's end, and
// at srtt/16 one at a tenth of a GEO link's rate with 1% loss sent a
// parity into nearly every gap and took 77% of the rate after it rose
// (TestAppLimitedLossKeepsWindow). Such a parity waits srtt/16 on a
// short path too (at least minParityIdle), not minCopyIdle, once the
// controller has timed its link (cc.LinkRater): on LEO (40 ms) the 10 ms
// of minCopyIdle were a quarter of the round trip, and a loss in the last
// round trip cost that much more than the 2.5 ms of srtt/16
// (TestTailParityShortPath). Not before the link is timed: a parity
// right after a page's HTML joined its timed first flight, which a link
// that hands packets over in batches then timed wrong
// (TestPageFlightInOneBatch: 1.16x -> 1.46x).
func (a *Association) copyAt() (time.Duration, bool) {
	if a.noTailCopies || a.idleSince == 0 || a.streams.Unsent != 0 {
		return 0, false
	}
	wait, least := a.sent.RTT().Smoothed()/8, minCopyIdle
	if a.parityDue() {
		if 2*a.sent.BytesInFlight() >= a.sent.Controller().Window() {
			wait = a.sent.RTT().Smoothed() / 16
			if a.sent.LinkRate() > 0 {
				least = minParityIdle
			}
		}
	} else if a.nextCopy() == nil {
		return 0, false
	}
	return a.idleSince + max(wait, least), true
}

// minParityIdle is the least idle time before the parities at the end of
// a full window go out once the link is timed (copyAt): below it a
// sender's gaps are its host's scheduling, not a burst's end.
const minParityIdle = 2 * time.Millisecond

// minCopyIdle is the least idle time before tail copies go out. On a
// short path it is the tail's cost: copies newest first from d after the
// sender fell idle leave the last loss max(d + s, RTT - s) late, where s
// is how far back they reach, (RTT + d)/2 at best. At 20 ms (half of
// LEO's 40 ms round trip) the LEO page was at 1.067x its floor in the
// simulator (TestPageLoadLEO), at 10 ms 1.044x. Through the binary a bulk
// LEO download sent no copies mid-transfer with either; the HTTP/1.1
// page, whose six connections all wait a round trip between objects,
// sent more of them (within the copy credit, a quarter of the bytes).
const minCopyIdle = 10 * time.Millisecond

// builtPacket is what assemble put in a packet.
type builtPacket struct {
	firstFrame uint64 // its first frame record in the history
	size       int
	ackLen     int  // bytes of its ACK frame (0: none)
	eliciting  bool // it is ack-eliciting
	carried    bool // it carries stream data or datagrams
	copy       bool // it is a tail copy or parity: redundant, never copied or repaired
	parity     bool // it carries parity
}

// assemble writes the packet plan allows into b (empty; its capacity is
// the room), recording its frames in the sent-packet history. ok is false
// when nothing fitted; the frame records are then dropped.
func (a *Association) assemble(b []byte, plan sendPlan) (p builtPacket, ok bool) {
	limit := cap(b)
	p.firstFrame = a.sent.FrameEnd()
	if plan.copy {
		// The copies first, whole: a copy cut short by an ACK or a
		// control frame ahead of it (the packet it copies had the room)
		// would leave the rest of a lost packet's bytes to the repair a
		// round trip later, which is what the copy is for.
		for _, f := range a.copyFrames {
			var added bool
			if b, added = a.streams.AppendCopy(b, limit, f); added {
				p.copy, p.carried, p.eliciting = true, true, true
			}
		}
	}
	if plan.parity {
		if b = a.appendParity(b, limit); len(b) > 0 {
			a.sent.AddFrame().Kind = ackhandler.KindPing // nothing to act on: never sent again
			p.copy, p.parity, p.carried, p.eliciting = true, true, true, true
		}
	}
	if a.ack.Pending() && (plan.ackDue || plan.work || plan.probe || plan.copy || plan.parity) {
		n := len(b)
		b = a.appendAck(b, limit)
		p.ackLen = len(b) - n
	}
	// Control frames are small and keep the peer's windows open, so they
	// ride along even on a packet that exists only for its ACK.
	var el bool
	b, el = a.streams.AppendControl(b, limit)
	p.eliciting = p.eliciting || el
	if plan.canSend {
		// The first full packet of stream data in a first flight that
		// times the bottleneck carries a PING ahead of it (the last
		// frame of a packet runs to its end): the peer acknowledges it
		// at once (validate).
		mark := !plan.lightOnly && len(b) < limit && a.streams.Unsent >= uint64(limit) && a.sent.TimingMark(a.now)
		if mark {
			b = append(b, wire.FramePing)
			a.sent.AddFrame().Kind = ackhandler.KindPing
		}
		// Datagrams and streams share the link (datagramshare.go).
		var dBytes, sBytes int
		appendD := func() {
			n := len(b)
			b, el = a.appendDatagrams(b, limit)
			p.carried = p.carried || el
			dBytes = len(b) - n
		}
		appendS := func() {
			n := len(b)
			if plan.lightOnly {
				b, el = a.streams.AppendLight(b, limit)
			} else {
				b, el = a.streams.AppendStreams(b, limit)
			}
			p.carried = p.carried || el
			sBytes = len(b) - n
		}
		if plan.lightOnly {
			appendS()
		} else if a.share.datagramsFirst(a.streams.HasWork()) {
			appendD()
			appendS()
		} else {
			appendS()
			appendD()
		}
		if dBytes > 0 && (sBytes > 0 || a.streams.HasWork()) || sBytes > 0 && a.dgrams.count > 0 {
			a.share.charge(dBytes, sBytes)
		}
		p.eliciting = p.eliciting || p.carried
		p.eliciting = p.eliciting || mark
	}
	if !p.eliciting && (plan.probe || (p.ackLen > 0 && a.ack.PingWanted())) && len(b) < limit {
		b = append(b, wire.FramePing)
		a.sent.AddFrame().Kind = ackhandler.KindPing
		p.eliciting = true
	}
	if len(b) == 0 {
		a.sent.DropFramesFrom(p.firstFrame)
		return builtPacket{}, false
	}
	p.size = len(b)
	return p, true
}

// onSent books the packet assemble built: the sent-packet history (bytes
// in flight, pacer), the outage detector's flight, the ACK policy and the
// ACK budget, which charges acknowledgement traffic on the return link.
func (a *Association) onSent(p builtPacket) {
	flightStart := a.sent.OnPacketSent(a.now, ackhandler.SentPacket{
		SentAt:       a.now,
		FirstFrame:   p.firstFrame,
		NFrames:      uint16(a.sent.FrameEnd() - p.firstFrame),
		Size:         int32(p.size),
		AckEliciting: p.eliciting,
		InFlight:     p.eliciting,
		Copy:         p.copy,
	})
	a.stats.PacketsSent++
	switch {
	case p.parity:
		a.stats.ParityPackets++
	case p.copy && !a.copyNow:
		a.stats.TailCopies++
	}
	a.stats.BytesSent += uint64(p.size)
	a.lastSent = sentKind{eliciting: p.eliciting, carried: p.carried}
	if !p.eliciting {
		a.stats.AckOnlyPacketsSent++
		a.ack.OnPacketSent(false)
		a.ackBudget.Take(p.size + a.cfg.WireOverhead)
		return
	}
	if flightStart {
		a.outage.onFlightStart(a.now)
	}
	a.ack.OnPacketSent(true)
	a.pingPending = false
	switch {
	case p.ackLen > 0 && !p.carried:
		// An ACK with control frames or a PING: all of it is
		// acknowledgement traffic on the return link.
		a.ackBudget.Take(p.size + a.cfg.WireOverhead)
	case p.ackLen > 0:
		a.ackBudget.Take(p.ackLen)
	}
}

func (a *Association) sendClose(buf []byte) int {
	limit := a.limit(buf, a.sent.NextPN())
	if limit < 64 {
		return 0
	}
	b := wire.AppendClose(buf[:0:limit], a.closeCode, a.closeWhy)
	// The packet number is used up but not tracked: nothing in it is
	// retransmitted.
	a.sent.SkipPacket(a.now)
	a.lastSent = sentKind{}
	a.stats.PacketsSent++
	a.stats.BytesSent += uint64(len(b))
	a.closeLeft--
	if a.closeLeft <= 0 {
		a.state = stateClosed
	}
	return len(b)
}

// sendProbe builds an outage probe: a PING, preceded by an ACK of
// everything received so that whichever side hears the other first learns
// at once what arrived before the outage. Probes are not counted in flight
// and do not wait for the pacer: a few dozen bytes per interval.
func (a *Association) sendProbe(buf []byte) int {
	limit := a.limit(buf, a.sent.NextPN())
	if limit < 64 {
		return 0
	}
	firstFrame := a.sent.FrameEnd()
	b := buf[:0:limit]
	if a.ack.Any() {
		b = a.appendAck(b, limit-1)
	}
	b = append(b, wire.FramePing)
	a.sent.AddFrame().Kind = ackhandler.KindPing
	if a.sent.OnPacketSent(a.now, ackhandler.SentPacket{
		SentAt:       a.now,
		FirstFrame:   firstFrame,
		NFrames:      uint16(a.sent.FrameEnd() - firstFrame),
		Size:         int32(len(b)),
		AckEliciting: true,
	}) {
		a.outage.onFlightStart(a.now)
	}
	a.outage.onProbeSent(a.now)
	a.lastSent = sentKind{eliciting: true}
	a.stats.PacketsSent++
	a.stats.BytesSent += uint64(len(b))
	return len(b)
}

// SendDatagram queues p (copied) for unreliable delivery. It never blocks:
// when the queue is full or would hold more than a short burst at the link
// rate, or the link is in an outage, p is dropped and ErrDatagramDropped
// returned.
func (a *Association) SendDatagram(p []byte) error { return a.SendDatagramApart(p, 0) }

// SendDatagramApart is SendDatagram for a datagram of a group (nonzero)
// no packet carries two of: one lost packet then loses at most one
// datagram of the group, as an erasure code over the group (a repaired
// QUIC flow's block) needs. Group 0 is no group. A datagram of a group
// waits up to a round trip to be sent (groupMaxAge), others
// datagramMaxAge.
func (a *Association) SendDatagramApart(p []byte, group uint64) error {
	if a.state != stateOpen {
		return a.err
	}
	if len(p) > a.maxDatagram {
		return ErrDatagramTooLarge
	}
	if a.outage.active {
		a.stats.DatagramsDropped++
		return ErrDatagramDropped
	}
	until := a.now + datagramMaxAge
	if group != 0 {
		until = a.now + groupMaxAge(a.sent.RTT().Smoothed())
	}
	if a.dgrams.bytes+len(p) > a.datagramLimit() || !a.dgrams.push(p, group, until, a.maxDatagram) {
		a.stats.DatagramsDropped++
		return ErrDatagramDropped
	}
	return nil
}

// datagramLimit bounds the bytes of queued datagrams: 50 ms at the send
// rate, so that a datagram waits no longer than that for its turn.
func (a *Association) datagramLimit() int {
	if a.cfg.SendRate > 0 {
		return max(4*a.cfg.MaxPacketSize, int(float64(a.cfg.SendRate)/8*0.05))
	}
	return 1 << 30
}

// DatagramRoom reports whether a datagram of n bytes fits in the first
// quarter of the datagram queue (its entries and bytes). A sender with a
// queue of its own waits for that room instead of having its datagrams
// dropped: few of them then wait here, where a stall of the association
// would drop them all at once (datagramMaxAge, groupMaxAge), and the rest of the queue
// is left to datagrams that cannot wait. While the congestion window is
// full the room is datagramRoomClosed: a cut of the window below the
// bytes in flight stops the association for about as long as
// datagramMaxAge, and a repaired QUIC flow lost the quarter queue it had
// handed over (a resend and a round trip's hold each), where its own
// queue would have kept them.
func (a *Association) DatagramRoom(n int) bool {
	room := datagramQueueLen / 4
	if !a.sent.WindowOpen() {
		room = datagramRoomClosed
	}
	return a.state == stateOpen && a.dgrams.count < room && a.dgrams.bytes+n <= a.datagramLimit()/4
}

// datagramRoomClosed is DatagramRoom's room while the window is full:
// enough that the datagrams go as soon as an ACK opens it.
const datagramRoomClosed = 2
