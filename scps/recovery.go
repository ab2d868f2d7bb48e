package scps

// This file owns loss recovery on the sending side (RFC 9002 in spirit):
// processing ACK frames against the sent-packet history, RTT samples, loss
// detection by packet threshold (3) and time threshold (9/8 RTT), the probe
// timeout with a MinRTO floor and its backoff capped at the probe interval,
// persistent congestion, reporting losses with their cause, and what
// happens to the frames of acknowledged and lost packets. Retransmissions
// always go in new packets, so a repair can only be declared lost again
// once its own packet is: one loss costs one repair (the SNACK embargo of
// SCPS-TP).

import (
	"time"

	"scpsvpn/scps/cc"
	"scpsvpn/scps/internal/wire"
)

const (
	packetThreshold = 3
	// maxPTOBackoff bounds the exponential backoff of the probe timeout.
	maxPTOBackoff = 6
	// persistentFactor: losses spanning this many PTOs with nothing
	// acknowledged between them are persistent congestion.
	persistentFactor = 3
)

func (a *Association) onAck(f *wire.Ack) {
	priorInFlight := a.bytesInFlight
	var (
		ackedBytes      int
		newly           bool
		newlyEliciting  bool
		largestNewly    uint64
		largestNewlyAt  time.Duration
		largestWasNewly bool
	)
	base := a.hist.basePN
	it := f.Iter()
	for {
		r, ok := it.Next()
		if !ok || r.Largest < base {
			break
		}
		lo := max(r.Smallest, base)
		for pn := r.Largest; ; pn-- {
			p := a.hist.get(pn)
			if p.state != pktAcked {
				wasOutstanding := p.state == pktOutstanding
				p.state = pktAcked
				if wasOutstanding {
					if p.inFlight {
						a.bytesInFlight -= int(p.size)
						ackedBytes += int(p.size)
					}
					if p.ackEliciting {
						a.elicitingInFlight--
						newlyEliciting = true
					}
					if !newly || pn > largestNewly {
						largestNewly, largestNewlyAt = pn, p.sentAt
					}
					newly = true
					if pn == f.Largest {
						largestWasNewly = true
					}
				}
				a.framesAcked(p)
			}
			if pn == lo {
				break
			}
		}
	}
	if !a.anyAcked || f.Largest > a.largestAcked {
		a.largestAcked, a.anyAcked = f.Largest, true
	}
	var sample time.Duration
	if largestWasNewly && newlyEliciting {
		// The peer's reported delay is trusted up to a quarter RTT beyond
		// MaxAckDelay: the ACK budget of a narrow return link can hold an
		// ACK back that long, and counting it as path delay would look like
		// a queue.
		delay := min(time.Duration(f.Delay)*time.Microsecond, max(MaxAckDelay, a.rtt.Smoothed()/4))
		a.rtt.Update(a.now-largestNewlyAt, delay)
		sample = a.rtt.Adjusted()
	}
	a.loss.onAck(a.now, ackedBytes, sample, a.rtt.Min(), a.rtt.Smoothed())
	if ackedBytes > 0 {
		a.cc.OnAck(a.abs(a.now), cc.AckEvent{
			AckedBytes:    ackedBytes,
			PriorInFlight: priorInFlight,
			LargestSentAt: a.abs(largestNewlyAt),
			RTTUpdated:    sample > 0,
			RTT:           sample,
		})
	}
	if newly {
		a.ptoCount = 0
		a.ackWaitSince = a.now
		a.ackProgress = true
	}
	a.detectLoss()
}

// detectLoss declares outstanding packets below the largest acknowledged
// lost by packet or time threshold, arms the loss timer for the others,
// and reports the losses to congestion control.
func (a *Association) detectLoss() {
	a.lossTime = 0
	if !a.anyAcked {
		return
	}
	lossDelay := a.rtt.LossDelay()
	lostBefore := a.now - lossDelay
	var (
		lostBytes     int
		largestLostAt time.Duration
		runStart      time.Duration = -1 // first lost ack-eliciting packet of the current run
		runEnd        time.Duration
		persistent    bool
	)
	persistentSpan := a.rtt.PTO(MaxAckDelay, a.cfg.MinRTO) * persistentFactor
	end := min(a.largestAcked, a.hist.nextPN())
	for pn := a.hist.basePN; pn < end; pn++ {
		p := a.hist.get(pn)
		switch p.state {
		case pktAcked:
			runStart = -1
			continue
		case pktLost:
			continue
		}
		if a.largestAcked-pn >= packetThreshold || p.sentAt <= lostBefore {
			a.markLost(p)
			if p.inFlight {
				lostBytes += int(p.size)
				largestLostAt = p.sentAt
			}
			if p.ackEliciting {
				if runStart < 0 {
					runStart = p.sentAt
				}
				runEnd = p.sentAt
				if a.rtt.Samples() > 0 && runEnd-runStart > persistentSpan {
					persistent = true
				}
			}
			continue
		}
		if t := p.sentAt + lossDelay; a.lossTime == 0 || t < a.lossTime {
			a.lossTime = t
		}
	}
	a.hist.popResolved()
	if lostBytes > 0 {
		fallback := a.pacer.rate
		if fallback == 0 && a.rtt.Smoothed() > 0 {
			fallback = float64(a.cc.Window()) / a.rtt.Smoothed().Seconds()
		}
		cause := a.loss.cause(a.now, a.rtt.Smoothed(), a.rtt.Min(), a.cfg.MaxPacketSize+a.cfg.WireOverhead, fallback)
		a.reportLoss(lostBytes, largestLostAt, persistent, cause)
	}
}

// reportLoss tells congestion control about lostBytes lost together and
// counts the event by cause.
func (a *Association) reportLoss(lostBytes int, largestLostAt time.Duration, persistent bool, cause cc.Cause) {
	a.stats.CongestionEvents++
	switch cause {
	case cc.CauseCongestion:
		a.stats.LossEventsCongestion++
	case cc.CauseCorruption:
		a.stats.LossEventsCorruption++
	case cc.CauseOutage:
		a.stats.LossEventsOutage++
	}
	a.cc.OnCongestionEvent(a.abs(a.now), cc.LossEvent{
		LostBytes:     lostBytes,
		PriorInFlight: a.bytesInFlight + lostBytes,
		LargestSentAt: a.abs(largestLostAt),
		Cause:         cause,
		Persistent:    persistent,
	})
}

func (a *Association) markLost(p *sentPacket) {
	p.state = pktLost
	if p.inFlight {
		a.bytesInFlight -= int(p.size)
		a.stats.PacketsLost++
		a.stats.BytesLost += uint64(p.size)
	}
	if p.ackEliciting {
		a.elicitingInFlight--
	}
	a.framesLost(p)
}

// ptoDeadline is when the probe timeout fires; 0 when nothing
// ack-eliciting is in flight. The backoff doubles the timeout but stops at
// the probe interval: a link that went quiet for a moment is probed at a
// fixed pace, so its return is noticed within the interval, not after a
// backed-off timeout (an outage proper then takes over).
func (a *Association) ptoDeadline() time.Duration {
	if a.elicitingInFlight == 0 {
		return 0
	}
	base := a.rtt.PTO(MaxAckDelay, a.cfg.MinRTO)
	pto := min(base<<min(a.ptoCount, maxPTOBackoff), max(base, a.cfg.ProbeInterval))
	return a.lastElicitingSent + pto
}

// onPTO sends two probes. They carry data waiting for repair or new data;
// failing that, the oldest outstanding packet's data is queued again (not
// declared lost), and failing that a PING.
func (a *Association) onPTO() {
	a.ptoCount++
	a.stats.PTOs++
	a.probes = 2
	if a.retxQ.len() > 0 || a.lightQ.len() > 0 || a.bulkQ.len() > 0 {
		return
	}
	for pn := a.hist.basePN; pn < a.hist.nextPN(); pn++ {
		p := a.hist.get(pn)
		if p.state == pktOutstanding && p.ackEliciting {
			a.framesLost(p)
			return
		}
	}
}

// framesAcked acts on the frames of an acknowledged packet.
func (a *Association) framesAcked(p *sentPacket) {
	for i := uint64(0); i < uint64(p.nFrames); i++ {
		f := a.hist.frame(p.firstFrame + i)
		switch f.kind {
		case sfStream:
			a.streamDataAcked(f)
		case sfReset:
			if s, ok := a.streams[f.id]; ok && s.resetSent {
				s.resetAcked = true
				a.maybeFinish(s)
			}
		case sfAck:
			a.ack.onAckAcked(f.off)
		}
	}
}

// framesLost queues again what the frames of a lost packet carried, unless
// it was delivered meanwhile or is obsolete.
func (a *Association) framesLost(p *sentPacket) {
	for i := uint64(0); i < uint64(p.nFrames); i++ {
		f := a.hist.frame(p.firstFrame + i)
		switch f.kind {
		case sfStream:
			a.streamDataLost(f)
		case sfReset:
			if s, ok := a.streams[f.id]; ok && s.resetSent && !s.resetAcked {
				s.resetQueued = true
				a.scheduleCtrl(s)
			}
		case sfMaxStreamData:
			if s, ok := a.streams[f.id]; ok && !s.finKnown && !s.aborted() && f.off == s.recvMax {
				s.maxDataQueued = true
				a.scheduleCtrl(s)
			}
		case sfMaxData:
			if f.off == a.connRecvMax {
				a.maxDataQueued = true
			}
		case sfMaxStreams:
			if f.off == a.localMaxStreams {
				a.maxStreamsQueued = true
			}
		case sfDatagram:
			// never retransmitted
		}
	}
}

func (a *Association) streamDataAcked(f *sentFrame) {
	s, ok := a.streams[f.id]
	if !ok || s.aborted() {
		return
	}
	if f.off == 0 && s.local {
		s.openAcked, s.openPending = true, false
	}
	if f.n > 0 {
		end := f.off + f.n
		s.retx.Remove(f.off, end)
		if end > s.ackedPrefix {
			s.acked.Add(max(f.off, s.ackedPrefix), end)
			if first := s.acked.First(); first.Start <= s.ackedPrefix {
				s.ackedPrefix = first.End
				s.acked.RemoveBelow(s.ackedPrefix)
				s.sendBuf.Release(s.ackedPrefix)
				if s.writeWait {
					s.writeWait = false
					a.notify(s)
				}
			}
		}
	}
	if f.fin {
		s.finAcked, s.finLost = true, false
	}
	a.maybeFinish(s)
}

func (a *Association) streamDataLost(f *sentFrame) {
	s, ok := a.streams[f.id]
	if !ok || s.aborted() {
		return
	}
	if f.n > 0 {
		start, end := max(f.off, s.ackedPrefix), f.off+f.n
		if start < end {
			s.retx.Add(start, end)
			for i := 0; i < s.acked.Len(); i++ {
				r := s.acked.At(i)
				if r.Start >= end {
					break
				}
				if r.End > start {
					s.retx.Remove(r.Start, r.End)
				}
			}
		}
	} else if f.off == 0 && s.local && !s.openAcked && !f.fin {
		s.openPending = true
	}
	if f.fin && !s.finAcked {
		s.finLost = true
	}
	a.scheduleRetx(s)
	a.scheduleNew(s) // a lost empty open of a stream that has sent nothing else
}
