package scps

// This file owns the Association's frame handler: what happens to each
// frame of a packet the sent-packet handler (internal/ackhandler) declared
// acknowledged or lost. Stream data is released from the send buffer or
// queued for repair; a lost RESET_STREAM or credit frame is queued again
// unless it became obsolete; an acknowledged ACK lets the receiver forget
// the ranges below it. Datagrams and PINGs are never sent again.

import "scpsvpn/scps/internal/ackhandler"

// assocFrames is the Association as the sent-packet handler's
// FrameHandler (the methods stay off the Association's exported API).
type assocFrames struct{ a *Association }

func (h assocFrames) FrameAcked(f *ackhandler.SentFrame) { h.a.frameAcked(f) }
func (h assocFrames) FrameLost(f *ackhandler.SentFrame)  { h.a.frameLost(f) }

// frameAcked acts on a frame of an acknowledged packet.
func (a *Association) frameAcked(f *ackhandler.SentFrame) {
	switch f.Kind {
	case ackhandler.KindStream:
		a.streamDataAcked(f)
	case ackhandler.KindReset:
		if s, ok := a.streams.byID[f.ID]; ok && s.resetSent {
			s.resetAcked = true
			a.maybeFinish(s)
		}
	case ackhandler.KindAck:
		a.ack.OnAckAcked(f.Off)
	}
}

// frameLost queues again what a frame of a lost packet carried, unless it
// was delivered meanwhile or is obsolete.
func (a *Association) frameLost(f *ackhandler.SentFrame) {
	switch f.Kind {
	case ackhandler.KindStream:
		a.streamDataLost(f)
	case ackhandler.KindReset:
		if s, ok := a.streams.byID[f.ID]; ok && s.resetSent && !s.resetAcked {
			s.resetQueued = true
			a.streams.scheduleCtrl(s)
		}
	case ackhandler.KindMaxStreamData:
		if s, ok := a.streams.byID[f.ID]; ok && !s.finKnown && !s.aborted() && f.Off == s.recvMax {
			s.maxDataQueued = true
			a.streams.scheduleCtrl(s)
		}
	case ackhandler.KindMaxData:
		if f.Off == a.flow.recvMax {
			a.flow.maxDataQueued = true
		}
	case ackhandler.KindMaxStreams:
		if f.Off == a.streams.localMax {
			a.streams.maxStreamsQueued = true
		}
	case ackhandler.KindDatagram:
		// never retransmitted
	}
}

func (a *Association) streamDataAcked(f *ackhandler.SentFrame) {
	s, ok := a.streams.byID[f.ID]
	if !ok || s.aborted() {
		return
	}
	if f.Off == 0 && s.local {
		s.openAcked, s.openPending = true, false
	}
	if f.N > 0 {
		end := f.Off + f.N
		s.retx.Remove(f.Off, end)
		if end > s.ackedPrefix {
			s.acked.Add(max(f.Off, s.ackedPrefix), end)
			if first := s.acked.First(); first.Start <= s.ackedPrefix {
				a.sendReleased(first.End - s.ackedPrefix)
				s.ackedPrefix = first.End
				s.acked.RemoveBelow(s.ackedPrefix)
				s.sendBuf.Release(s.ackedPrefix)
				a.maybeGrowSendBuffer(s)
				if s.writeWait {
					s.writeWait = false
					a.notify(s)
				}
			}
		}
	}
	if f.Fin {
		s.finAcked, s.finLost = true, false
	}
	a.maybeFinish(s)
}

func (a *Association) streamDataLost(f *ackhandler.SentFrame) {
	s, ok := a.streams.byID[f.ID]
	if !ok || s.aborted() {
		return
	}
	if f.N > 0 {
		start, end := max(f.Off, s.ackedPrefix), f.Off+f.N
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
	} else if f.Off == 0 && s.local && !s.openAcked && !f.Fin {
		s.openPending = true
	}
	if f.Fin && !s.finAcked {
		s.finLost = true
	}
	a.streams.scheduleRetx(s)
	a.streams.scheduleNew(s) // a lost empty open of a stream that has sent nothing else
}
