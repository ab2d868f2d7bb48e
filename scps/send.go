package scps

// This file owns packet assembly. Each call to Send builds at most one
// packet, in this order: ACK (when due, or piggybacked on anything else),
// control frames (RESET_STREAM, MAX_DATA, MAX_STREAM_DATA, MAX_STREAMS),
// datagrams, stream data waiting for repair, then new stream data — light
// streams (little queued) before bulk ones, round robin within each, one
// stream per turn. Ack-eliciting content needs congestion window and pacer
// tokens unless it is a probe; ACK-only packets need only the ACK budget.
// In outage mode only outage probes go out (sendProbe).

import (
	"time"

	"scpsvpn/scps/internal/wire"
)

// minStreamChunk: do not start a stream frame that would carry less than
// this (unless that is all there is): the rest of the packet is better
// left for the next.
const minStreamChunk = 32

// ackPacketCost estimates the bytes of an ACK-only packet on the wire.
func (a *Association) ackPacketCost() int { return 32 + a.cfg.WireOverhead }

// hasWork reports whether ack-eliciting content is waiting.
func (a *Association) hasWork() bool {
	return a.streams.hasWork() || a.flow.maxDataQueued || a.dgrams.count > 0 || a.pingPending
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
	if a.sent.probes > 0 || a.pingPending || a.ack.due(a.now) {
		return true
	}
	if !a.hasWork() || !a.sent.windowOpen() || a.silenceHold() {
		return false
	}
	a.sent.updatePacer(a.now)
	return a.sent.paced()
}

// Send writes the next packet due now into buf and returns its length; 0
// means nothing is due (see Deadline). buf should hold MaxPacketSize bytes.
func (a *Association) Send(now time.Time, buf []byte) int {
	a.setNow(now)
	switch a.state {
	case stateClosed:
		return 0
	case stateClosing:
		return a.sendClose(buf)
	}
	if a.outage.active {
		if !a.outage.probeDue(a.now) {
			return 0
		}
		return a.sendProbe(buf)
	}
	limit := min(len(buf), a.cfg.MaxPacketSize)
	if limit < 64 {
		return 0
	}
	a.sent.updatePacer(a.now)
	a.expireDatagrams()
	probe := a.sent.probes > 0 || a.pingPending
	canSend := probe || (a.sent.windowOpen() && a.sent.paced() && !a.silenceHold())
	ackDue := a.ack.due(a.now)
	a.ackBudget.refill(a.now)
	if ackDue && !a.ackBudget.ready(a.ackPacketCost()) {
		ackDue = false
		if !a.ack.deferred {
			a.ack.deferred = true
			a.stats.AcksDeferred++
		}
	}
	work := canSend && a.hasWork()
	if !ackDue && !work && !probe {
		return 0
	}

	pn := a.sent.hist.nextPN()
	b := wire.AppendHeader(buf[:0:limit], pn)
	hdrLen := len(b)
	firstFrame := a.sent.hist.frameEnd()
	eliciting := false
	ackLen := 0
	if a.ack.pending && (ackDue || work || probe) {
		n := len(b)
		b = a.appendAck(b, limit)
		ackLen = len(b) - n
	}
	// Control frames are small and keep the peer's windows open, so they
	// ride along even on a packet that exists only for its ACK.
	var el bool
	b, el = a.appendControl(b, limit)
	eliciting = eliciting || el
	carried := false // stream data or datagrams
	if canSend {
		b, el = a.appendDatagrams(b, limit)
		carried = el
		b, el = a.appendStreams(b, limit)
		carried = carried || el
		eliciting = eliciting || carried
	}
	if !eliciting && (probe || (ackLen > 0 && a.ack.ackOnlyCount+1 >= ackOnlyBeforePing)) && len(b) < limit {
		b = append(b, wire.FramePing)
		a.sent.hist.addFrame().kind = sfPing
		eliciting = true
	}
	if len(b) == hdrLen {
		a.sent.hist.dropFramesFrom(firstFrame)
		return 0
	}
	size := len(b)
	flightStart := a.sent.onPacketSent(a.now, sentPacket{
		sentAt:       a.now,
		firstFrame:   firstFrame,
		nFrames:      uint16(a.sent.hist.frameEnd() - firstFrame),
		size:         int32(size),
		ackEliciting: eliciting,
		inFlight:     eliciting,
	})
	a.stats.PacketsSent++
	a.stats.BytesSent += uint64(size)
	if eliciting {
		if flightStart {
			a.outage.onFlightStart(a.now)
		}
		a.ack.ackOnlyCount = 0
		a.pingPending = false
		switch {
		case ackLen > 0 && !carried:
			// An ACK with control frames or a PING: all of it is
			// acknowledgement traffic on the return link.
			a.ackBudget.take(size + a.cfg.WireOverhead)
		case ackLen > 0:
			a.ackBudget.take(ackLen)
		}
	} else {
		a.stats.AckOnlyPacketsSent++
		a.ack.ackOnlyCount++
		a.ackBudget.take(size + a.cfg.WireOverhead)
	}
	return size
}

func (a *Association) sendClose(buf []byte) int {
	limit := min(len(buf), a.cfg.MaxPacketSize)
	if limit < 64 {
		return 0
	}
	b := wire.AppendHeader(buf[:0:limit], a.sent.hist.nextPN())
	b = wire.AppendClose(b, a.closeCode, a.closeWhy)
	// The packet number is used up but not tracked: nothing in it is
	// retransmitted.
	a.sent.skipPacket(a.now)
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
		a.outage.onFlightStart(a.now)
	}
	a.outage.onProbeSent(a.now)
	a.stats.PacketsSent++
	a.stats.BytesSent += uint64(len(b))
	return len(b)
}

func (a *Association) appendAck(b []byte, limit int) []byte {
	rs := a.ack.ranges()
	delay := uint64((a.now - a.ack.largestAt) / time.Microsecond)
	for len(rs) > 0 && len(b)+wire.AckFrameLen(delay, rs) > limit {
		rs = rs[:len(rs)-1]
	}
	if len(rs) == 0 {
		return b
	}
	b = wire.AppendAck(b, delay, rs)
	f := a.sent.hist.addFrame()
	f.kind, f.off = sfAck, rs[0].Largest
	a.ack.onAckSent()
	return b
}

// appendControl adds queued control frames that fit.
func (a *Association) appendControl(b []byte, limit int) ([]byte, bool) {
	eliciting := false
	if a.flow.maxDataQueued && len(b)+1+wire.VarintLen(a.flow.recvMax) <= limit {
		b = wire.AppendMaxData(b, wire.FrameMaxData, a.flow.recvMax)
		f := a.sent.hist.addFrame()
		f.kind, f.off = sfMaxData, a.flow.recvMax
		a.flow.maxDataQueued, eliciting = false, true
	}
	if a.streams.maxStreamsQueued && len(b)+1+wire.VarintLen(a.streams.localMax) <= limit {
		b = wire.AppendMaxData(b, wire.FrameMaxStreams, a.streams.localMax)
		f := a.sent.hist.addFrame()
		f.kind, f.off = sfMaxStreams, a.streams.localMax
		a.streams.maxStreamsQueued, eliciting = false, true
	}
	for a.streams.ctrlQ.len() > 0 {
		s := a.streams.ctrlQ.peek()
		if s.gone {
			a.streams.ctrlQ.pop()
			s.queued &^= inCtrlQ
			continue
		}
		if s.resetQueued {
			n := wire.ResetStreamLen(s.id, s.resetCode, s.sentOff)
			if len(b)+n > limit {
				break
			}
			b = wire.AppendResetStream(b, s.id, s.resetCode, s.sentOff)
			f := a.sent.hist.addFrame()
			f.kind, f.id = sfReset, s.id
			s.resetQueued, eliciting = false, true
		}
		if s.maxDataQueued && !s.finKnown && !s.aborted() {
			n := 1 + wire.VarintLen(s.id) + wire.VarintLen(s.recvMax)
			if len(b)+n > limit {
				break
			}
			b = wire.AppendMaxStreamData(b, s.id, s.recvMax)
			f := a.sent.hist.addFrame()
			f.kind, f.id, f.off = sfMaxStreamData, s.id, s.recvMax
			eliciting = true
		}
		s.maxDataQueued = false
		a.streams.ctrlQ.pop()
		s.queued &^= inCtrlQ
	}
	return b, eliciting
}

func (a *Association) appendDatagrams(b []byte, limit int) ([]byte, bool) {
	eliciting := false // Send expired the stale ones first
	for a.dgrams.count > 0 {
		p, _ := a.dgrams.front()
		if len(b)+wire.DatagramLen(len(p)) > limit {
			break
		}
		b = wire.AppendDatagram(b, p)
		a.sent.hist.addFrame().kind = sfDatagram
		a.dgrams.pop()
		a.stats.DatagramsSent++
		eliciting = true
	}
	return b, eliciting
}

// expireDatagrams drops queued datagrams older than datagramMaxAge, also
// while nothing may be sent (full window, silence hold).
func (a *Association) expireDatagrams() {
	for a.dgrams.count > 0 {
		if _, at := a.dgrams.front(); a.now-at <= datagramMaxAge {
			return
		}
		a.dgrams.pop()
		a.stats.DatagramsDropped++
	}
}

// fitStream decides how many of want bytes a STREAM frame can carry in
// room bytes, and whether it needs an explicit length (it does not when it
// is the last frame of the packet). ok is false when the frame is not worth
// starting.
func fitStream(room int, id, off uint64, metaLen int, hasMeta bool, want uint64) (n int, withLen, ok bool) {
	hdr := wire.StreamHeaderLen(id, off, metaLen, hasMeta, false, 0)
	if room < hdr {
		return 0, false, false
	}
	avail := room - hdr
	if want >= uint64(avail) {
		if avail == 0 && want > 0 || avail < minStreamChunk && uint64(avail) < want {
			return 0, false, false
		}
		return avail, false, true
	}
	if w := int(want); hdr+wire.VarintLen(want)+w <= room {
		return w, true, true
	}
	return int(want), false, true
}

// appendStreams adds repairs, then new data.
func (a *Association) appendStreams(b []byte, limit int) ([]byte, bool) {
	eliciting := false
	for a.streams.retxQ.len() > 0 && limit-len(b) > 8 {
		s := a.streams.retxQ.peek()
		if s.gone || s.aborted() || !s.hasRetx() {
			a.streams.retxQ.pop()
			s.queued &^= inRetxQ
			continue
		}
		var done, fits bool
		b, done, fits = a.appendRetxFrame(b, limit, s)
		if fits {
			eliciting = true
		}
		if !s.hasRetx() {
			a.streams.retxQ.pop()
			s.queued &^= inRetxQ
		}
		if done || !fits {
			return b, eliciting
		}
	}
	for limit-len(b) > 8 {
		q := &a.streams.lightQ
		if q.len() == 0 {
			q = &a.streams.bulkQ
			if q.len() == 0 {
				break
			}
		}
		s := q.peek()
		if s.gone || s.aborted() || !s.canSendNew() {
			q.pop()
			s.queued &^= inNewQ
			if !s.gone && !s.aborted() && s.sentOff < s.writeOff && s.sentOff >= s.peerMax {
				s.creditWait = true
			}
			continue
		}
		needCredit := s.sentOff < s.writeOff
		if needCredit && a.flow.sent >= a.flow.peerMax && !(s.openPending && s.sentOff == 0) &&
			!(s.finQueued && !s.finSent && s.sentOff == s.writeOff) {
			break // connection credit exhausted: wait for MAX_DATA
		}
		var done, fits bool
		b, done, fits = a.appendNewFrame(b, limit, s)
		if !fits {
			break
		}
		eliciting = true
		q.pop()
		s.queued &^= inNewQ
		a.streams.scheduleNew(s) // back of the line: round robin
		if done {
			break
		}
	}
	return b, eliciting
}

// appendRetxFrame adds one repair frame for s. done: the packet is full;
// fits: a frame was added.
func (a *Association) appendRetxFrame(b []byte, limit int, s *streamState) (_ []byte, done, fits bool) {
	var off, want uint64
	switch {
	case !s.retx.Empty():
		r := s.retx.First()
		off, want = r.Start, r.Len()
	case s.openPending && s.sentOff > 0:
		off, want = 0, 0
	default: // lost FIN whose data is all delivered
		off, want = s.finOffset, 0
	}
	hasMeta := off == 0 && s.local && !s.openAcked
	n, withLen, ok := fitStream(limit-len(b), s.id, off, len(s.meta), hasMeta, want)
	if !ok {
		return b, true, false
	}
	fin := s.finQueued && off+uint64(n) == s.finOffset
	b = wire.AppendStreamHeader(b, s.id, off, s.meta, hasMeta, fin, withLen, n)
	l := len(b)
	b = b[:l+n]
	s.sendBuf.Read(off, b[l:])
	if n > 0 {
		s.retx.Remove(off, off+uint64(n))
		a.stats.RetransmitBytes += uint64(n)
	}
	a.stats.Retransmits++
	if hasMeta {
		s.openPending = false
	}
	if fin {
		s.finSent, s.finLost = true, false
	}
	a.recordStream(s.id, off, uint64(n), fin)
	return b, !withLen, true
}

// appendNewFrame adds one frame of new data (or the open or FIN) for s.
func (a *Association) appendNewFrame(b []byte, limit int, s *streamState) (_ []byte, done, fits bool) {
	off := s.sentOff
	var want uint64
	if s.peerMax > off && a.flow.peerMax > a.flow.sent {
		want = min(s.writeOff-off, s.peerMax-off, a.flow.peerMax-a.flow.sent)
	}
	hasMeta := off == 0 && s.local && !s.openAcked
	n, withLen, ok := fitStream(limit-len(b), s.id, off, len(s.meta), hasMeta, want)
	if !ok {
		return b, true, false
	}
	fin := s.finQueued && off+uint64(n) == s.finOffset
	b = wire.AppendStreamHeader(b, s.id, off, s.meta, hasMeta, fin, withLen, n)
	l := len(b)
	b = b[:l+n]
	s.sendBuf.Read(off, b[l:])
	s.sentOff += uint64(n)
	a.flow.sent += uint64(n)
	a.stats.StreamBytesSent += uint64(n)
	if hasMeta {
		s.openPending = false
	}
	if fin {
		s.finSent = true
	}
	a.recordStream(s.id, off, uint64(n), fin)
	return b, !withLen, true
}

func (a *Association) recordStream(id, off, n uint64, fin bool) {
	f := a.sent.hist.addFrame()
	f.kind, f.id, f.off, f.n, f.fin = sfStream, id, off, n, fin
}

// SendDatagram queues p (copied) for unreliable delivery. It never blocks:
// when the queue is full or would hold more than a short burst at the link
// rate, or the link is in an outage, p is dropped and ErrDatagramDropped
// returned.
func (a *Association) SendDatagram(p []byte) error {
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
	limit := 1 << 30
	if a.cfg.SendRate > 0 {
		limit = max(4*a.cfg.MaxPacketSize, int(float64(a.cfg.SendRate)/8*0.05))
	}
	if a.dgrams.bytes+len(p) > limit || !a.dgrams.push(p, a.now, a.maxDatagram) {
		a.stats.DatagramsDropped++
		return ErrDatagramDropped
	}
	return nil
}
