package scps

// This file owns outageDetector, which watches for link outages and idle
// links, and the Association's outage mode. The association enters outage
// mode after Config.OutageAfter of silence: nothing received at all, or
// nothing newly acknowledged while packets are outstanding (the link is
// dead in our direction only). In outage mode it
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
//
// Before an outage is declared, the silence hold (silence) stops new data
// when the peer goes quiet in the middle of a flight.

import "time"

type outageDetector struct {
	after         time.Duration // Config.OutageAfter
	maxOutage     time.Duration // Config.MaxOutage
	probeInterval time.Duration // Config.ProbeInterval
	keepAlive     time.Duration // Config.keepAliveInterval

	lastRecv      time.Duration // when the peer was last heard
	ackWaitSince  time.Duration // since when ack-eliciting packets wait with nothing newly acknowledged
	ackProgress   bool          // the packet being received acknowledged something new
	flightStart   time.Duration // when ack-eliciting packets last went from none to some in flight
	recvGap       time.Duration // decaying maximum gap between packets heard while a flight is out
	holding       bool          // new data held back by silence
	lastKeepAlive time.Duration

	active    bool // in outage mode
	bySilence bool // entered because nothing was heard (else: nothing acknowledged)
	start     time.Duration
	nextProbe time.Duration

	stats *Stats
}

func (o *outageDetector) init(cfg Config, now time.Duration, stats *Stats) {
	o.after, o.maxOutage, o.probeInterval = cfg.OutageAfter, cfg.MaxOutage, cfg.ProbeInterval
	o.keepAlive = cfg.keepAliveInterval()
	o.lastRecv, o.ackWaitSince, o.lastKeepAlive = now, now, now
	o.stats = stats
}

// onPacketReceived notes a packet from the peer at now; flight is the
// number of our ack-eliciting packets in flight.
func (o *outageDetector) onPacketReceived(now time.Duration, flight int) {
	o.noteRecvGap(now, flight)
	o.lastRecv = now
	o.ackProgress = false
}

// noteRecvGap keeps the decaying maximum gap between packets heard from the
// peer during a flight (the previous one heard after the flight began: the
// first answer to a flight comes a round trip after it, not a gap).
func (o *outageDetector) noteRecvGap(now time.Duration, flight int) {
	o.holding = false
	if flight == 0 || o.lastRecv <= o.flightStart {
		return
	}
	o.recvGap = max(now-o.lastRecv, o.recvGap-o.recvGap/16)
}

// onNewlyAcked notes that the peer acknowledged something new.
func (o *outageDetector) onNewlyAcked(now time.Duration) {
	o.ackWaitSince = now
	o.ackProgress = true
}

// onFlightStart notes that ack-eliciting packets went from none to some in
// flight.
func (o *outageDetector) onFlightStart(now time.Duration) {
	o.ackWaitSince, o.flightStart = now, now
}

// due reports whether the silence has lasted long enough for outage mode,
// and whether it is a silence of the peer (else an acknowledgement stall).
func (o *outageDetector) due(now time.Duration, flight int) (enter, bySilence bool) {
	switch {
	case o.active:
		return false, false
	case now-o.lastRecv >= o.after:
		return true, true
	case flight > 0 && now-o.ackWaitSince >= o.after:
		return true, false
	}
	return false, false
}

// deadline is when due may next change its answer.
func (o *outageDetector) deadline(flight int) time.Duration {
	d := o.lastRecv + o.after
	if flight > 0 {
		d = min(d, o.ackWaitSince+o.after)
	}
	return d
}

// enter switches to outage mode at now; the first probe goes at once.
func (o *outageDetector) enter(now time.Duration, bySilence bool) {
	o.active, o.bySilence = true, bySilence
	o.start = now
	o.nextProbe = now
	o.stats.Outages++
}

// resumes reports whether the packet just received ends the outage: any
// packet ends an outage of silence; an acknowledgement stall ends with a
// new acknowledgement.
func (o *outageDetector) resumes() bool { return o.active && (o.bySilence || o.ackProgress) }

// leave ends outage mode at now.
func (o *outageDetector) leave(now time.Duration) {
	o.active = false
	o.stats.OutageTime += now - o.start
	o.ackWaitSince = now
	o.flightStart = now
	o.lastKeepAlive = now
}

// onFailover notes that the data moved to another path at now: the
// flight starts afresh there, and the gaps heard on the dead path say
// nothing of the new one, so the silence hold waits for new ones.
func (o *outageDetector) onFailover(now time.Duration) {
	o.holding = false
	o.recvGap = 0
	o.flightStart, o.ackWaitSince = now, now
}

// expired reports whether the outage has outlasted MaxOutage.
func (o *outageDetector) expired(now time.Duration) bool {
	return o.active && now-o.start >= o.maxOutage
}

// probeDue reports whether an outage probe is due at now.
func (o *outageDetector) probeDue(now time.Duration) bool { return now >= o.nextProbe }

// onProbeSent schedules the next outage probe.
func (o *outageDetector) onProbeSent(now time.Duration) {
	o.nextProbe = now + o.probeInterval
	o.stats.OutageProbes++
}

// silence reports whether the peer has gone quiet in the middle of a
// flight: nothing heard for silenceGapFactor times the longest recent gap
// between its packets (at least minSilenceHold), and the oldest packet in
// flight (sent at oldest) overdue by as much. New data and repairs then
// wait (probe timeouts still probe) until the peer is heard again: a link
// that died otherwise swallows what the window allows, several hundred
// packets at 10 Mbit/s and 600 ms, during the seconds before outage mode.
// A false alarm costs a pause until the late packet arrives.
func (o *outageDetector) silence(now time.Duration, flight int, oldest, srtt time.Duration) bool {
	if flight == 0 || o.recvGap == 0 {
		return false
	}
	hold := max(silenceGapFactor*o.recvGap, minSilenceHold)
	// The oldest packet that should have been answered: the oldest
	// outstanding one, but none sent before the flight began (probes of
	// an outage stay outstanding, and the first answer to a resumed flight
	// takes a round trip).
	oldest = max(oldest, o.flightStart)
	if now-o.lastRecv < hold || now < oldest+srtt+hold {
		return false
	}
	if !o.holding {
		o.holding = true
		o.stats.SilenceHolds++
	}
	return true
}

// keepAliveDue is when the next keep-alive PING is due (0: none while
// something ack-eliciting is in flight, or a PING is already pending: its
// ACK or probe timeout does the job).
func (o *outageDetector) keepAliveDue(flight int, pingPending bool) time.Duration {
	if flight > 0 || pingPending {
		return 0
	}
	return max(o.lastRecv, o.lastKeepAlive) + o.keepAlive
}

// keepAliveTimer reports whether a keep-alive PING is due at now.
func (o *outageDetector) keepAliveTimer(now time.Duration, flight int, pingPending bool) bool {
	if due := o.keepAliveDue(flight, pingPending); due == 0 || now < due {
		return false
	}
	o.lastKeepAlive = now
	o.stats.KeepAlives++
	return true
}

// checkOutage enters outage mode when the silence has lasted long enough.
func (a *Association) checkOutage() {
	if enter, bySilence := a.outage.due(a.now, a.sent.ElicitingInFlight()); enter {
		a.enterOutage(bySilence)
	}
}

// enterOutage switches to outage mode.
func (a *Association) enterOutage(bySilence bool) {
	a.outage.enter(a.now, bySilence)
	// Whatever was in flight is lost to the outage: queue it for repair
	// now (it goes first on resume) and free the window it held.
	a.sent.LoseAll(a.now)
	a.pingPending = false
	for a.dgrams.count > 0 {
		a.dgrams.pop()
		a.stats.DatagramsDropped++
	}
	a.emit(Event{Kind: EventOutage, Outage: true})
}

// maybeResume leaves outage mode after a packet from the peer (see
// outageDetector.resumes).
func (a *Association) maybeResume() {
	if a.state == stateOpen && a.outage.resumes() {
		a.outage.leave(a.now)
		a.sent.OnResume()
		a.emit(Event{Kind: EventOutage, Outage: false})
	}
}

// silenceHold reports whether new data waits because the peer went quiet
// mid-flight (outageDetector.silence).
func (a *Association) silenceHold() bool {
	oldest, ok := a.sent.OldestSentAt()
	return ok && a.outage.silence(a.now, a.sent.ElicitingInFlight(), oldest, a.sent.RTT().Smoothed())
}
