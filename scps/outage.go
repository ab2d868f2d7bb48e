package scps

// This file owns link outage handling and keep-alives. The association
// enters outage mode after Config.OutageAfter of silence: nothing received
// at all, or nothing newly acknowledged while packets are outstanding (the
// link is dead in our direction only). In outage mode it
//   - stops data, retransmission and loss timers: what was in flight is
//     marked lost with cause "outage" (no window change) and queued for
//     repair, and nothing but probes is sent;
//   - sends a probe (PING plus an ACK of everything received) every
//     ProbeInterval, with no backoff, so the link's return is noticed
//     within an interval;
//   - keeps every stream, its data and the congestion window and pacer
//     rate; writers block once their send buffers fill (backpressure);
//   - closes the association (resetting its streams) only after MaxOutage.
// It leaves outage mode on the first packet from the peer after a silence,
// or on the first new acknowledgement after an acknowledgement stall, and
// resumes at once at the rate it had: the repairs go first.
//
// While idle, the association sends a keep-alive PING when it has not
// heard the peer for a quarter of OutageAfter, so an idle link does not
// look like an outage to either side (the PING's ACK refreshes the sender
// too). A lost PING is retried by the probe timeout.

import (
	"time"

	"scpsvpn/scps/internal/wire"
)

// enterOutage switches to outage mode.
func (a *Association) enterOutage(bySilence bool) {
	a.outage, a.outageBySilence = true, bySilence
	a.outageStart = a.now
	a.nextProbe = a.now // the first probe goes at once
	a.stats.Outages++
	// Whatever was in flight is lost to the outage: queue it for repair
	// now (it goes first on resume) and free the window it held.
	a.sent.loseAll(a.now)
	a.pingPending = false
	for a.dgrams.count > 0 {
		a.dgrams.pop()
		a.stats.DatagramsDropped++
	}
	a.emit(Event{Kind: EventOutage, Outage: true})
}

// leaveOutage resumes normal operation.
func (a *Association) leaveOutage() {
	a.outage = false
	a.stats.OutageTime += a.now - a.outageStart
	a.ackWaitSince = a.now
	a.flightStart = a.now
	a.lastKeepAlive = a.now
	a.sent.ptoCount = 0
	a.emit(Event{Kind: EventOutage, Outage: false})
}

// checkOutage enters outage mode when the silence has lasted long enough.
func (a *Association) checkOutage() {
	if a.outage {
		return
	}
	switch {
	case a.now-a.lastRecv >= a.cfg.OutageAfter:
		a.enterOutage(true)
	case a.sent.elicitingInFlight > 0 && a.now-a.ackWaitSince >= a.cfg.OutageAfter:
		a.enterOutage(false)
	}
}

// outageDeadline is when checkOutage may next change something.
func (a *Association) outageDeadline() time.Duration {
	d := a.lastRecv + a.cfg.OutageAfter
	if a.sent.elicitingInFlight > 0 {
		d = min(d, a.ackWaitSince+a.cfg.OutageAfter)
	}
	return d
}

// ackSilence reports whether the peer has gone quiet in the middle of a
// flight: nothing heard for silenceGapFactor times the longest recent gap
// between its packets (at least minSilenceHold), and the oldest packet in
// flight overdue by as much. New data and repairs then wait (probe
// timeouts still probe) until the peer is heard again: a link that died
// otherwise swallows what the window allows, several hundred packets at
// 10 Mbit/s and 600 ms, during the seconds before outage mode. A false
// alarm costs a pause until the late packet arrives.
func (a *Association) ackSilence() bool {
	if a.sent.elicitingInFlight == 0 || a.sent.hist.pcount == 0 || a.recvGap == 0 {
		return false
	}
	hold := max(silenceGapFactor*a.recvGap, minSilenceHold)
	// The oldest packet that should have been answered: the oldest
	// outstanding one, but none sent before the flight began (probes of
	// an outage stay outstanding, and the first answer to a resumed flight
	// takes a round trip).
	oldest := max(a.sent.hist.get(a.sent.hist.basePN).sentAt, a.flightStart)
	if a.now-a.lastRecv < hold || a.now < oldest+a.sent.rtt.Smoothed()+hold {
		return false
	}
	if !a.holding {
		a.holding = true
		a.stats.SilenceHolds++
	}
	return true
}

// noteRecvGap keeps the decaying maximum gap between packets heard from the
// peer during a flight (the previous one heard after the flight began: the
// first answer to a flight comes a round trip after it, not a gap).
func (a *Association) noteRecvGap() {
	a.holding = false
	if a.sent.elicitingInFlight == 0 || a.lastRecv <= a.flightStart {
		return
	}
	a.recvGap = max(a.now-a.lastRecv, a.recvGap-a.recvGap/16)
}

// keepAliveDue is when the next keep-alive PING is due (0: none while
// something ack-eliciting is in flight: its ACK or probe timeout does the
// job).
func (a *Association) keepAliveDue() time.Duration {
	if a.sent.elicitingInFlight > 0 || a.pingPending {
		return 0
	}
	return max(a.lastRecv, a.lastKeepAlive) + a.cfg.keepAliveInterval()
}

// sendProbe builds an outage probe: a PING, preceded by an ACK of
// everything received so that whichever side hears the other first learns
// at once what arrived before the outage. Probes are not counted in flight
// and do not wait for the pacer: a few dozen bytes per interval.
func (a *Association) sendProbe(buf []byte) int {
	limit := min(len(buf), a.cfg.MaxPacketSize)
	if limit < 64 {
		return 0
	}
	firstFrame := a.sent.hist.frameEnd()
	b := wire.AppendHeader(buf[:0:limit], a.sent.hist.nextPN())
	if a.ack.any {
		b = a.appendAck(b, limit-1)
	}
	b = append(b, wire.FramePing)
	a.sent.hist.addFrame().kind = sfPing
	if a.sent.onPacketSent(a.now, sentPacket{
		sentAt:       a.now,
		firstFrame:   firstFrame,
		nFrames:      uint16(a.sent.hist.frameEnd() - firstFrame),
		size:         int32(len(b)),
		ackEliciting: true,
	}) {
		a.ackWaitSince, a.flightStart = a.now, a.now
	}
	a.nextProbe = a.now + a.cfg.ProbeInterval
	a.stats.PacketsSent++
	a.stats.BytesSent += uint64(len(b))
	a.stats.OutageProbes++
	return len(b)
}
