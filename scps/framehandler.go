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
		if s, ok := a.streams.ByID[f.ID]; ok && s.ResetSent {
			s.ResetAcked = true
			a.streams.MaybeFinish(s)
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
		if s, ok := a.streams.ByID[f.ID]; ok && s.ResetSent && !s.ResetAcked {
			s.ResetQueued = true
			a.streams.ScheduleCtrl(s)
		}
	case ackhandler.KindMaxStreamData:
		if s, ok := a.streams.ByID[f.ID]; ok && !s.FinKnown && !s.Aborted() && f.Off == s.RecvMax {
			s.MaxDataQueued = true
			a.streams.ScheduleCtrl(s)
		}
	case ackhandler.KindMaxData:
		if f.Off == a.streams.Flow.RecvMax {
			a.streams.Flow.MaxDataQueued = true
		}
	case ackhandler.KindMaxStreams:
		if f.Off == a.streams.LocalMax {
			a.streams.MaxStreamsQueued = true
		}
	case ackhandler.KindDatagram:
		// never retransmitted
	}
}

func (a *Association) streamDataAcked(f *ackhandler.SentFrame) {
	s, ok := a.streams.ByID[f.ID]
	if !ok || s.Aborted() {
		return
	}
	if f.Off == 0 && s.Local {
		s.OpenAcked, s.OpenPending = true, false
	}
	if f.N > 0 {
		end := f.Off + f.N
		s.Retx.Remove(f.Off, end)
		if end > s.AckedPrefix {
			s.Acked.Add(max(f.Off, s.AckedPrefix), end)
			if first := s.Acked.First(); first.Start <= s.AckedPrefix {
				a.streams.SendReleased(first.End - s.AckedPrefix)
				s.AckedPrefix = first.End
				s.Acked.RemoveBelow(s.AckedPrefix)
				s.SendBuf.Release(s.AckedPrefix)
				s.MaybeGrowSendBuffer(a.cfg.sendBufferLimit(), a.now, a.sent.RTT().Smoothed())
				if s.WriteWait {
					s.WriteWait = false
					a.notify(s)
				}
			}
		}
	}
	if f.Fin {
		s.FinAcked, s.FinLost = true, false
	}
	a.streams.MaybeFinish(s)
}

func (a *Association) streamDataLost(f *ackhandler.SentFrame) {
	s, ok := a.streams.ByID[f.ID]
	if !ok || s.Aborted() {
		return
	}
	if f.N > 0 {
		start, end := max(f.Off, s.AckedPrefix), f.Off+f.N
		if start < end {
			s.Retx.Add(start, end)
			for i := 0; i < s.Acked.Len(); i++ {
				r := s.Acked.At(i)
				if r.Start >= end {
					break
				}
				if r.End > start {
					s.Retx.Remove(r.Start, r.End)
				}
			}
		}
	} else if f.Off == 0 && s.Local && !s.OpenAcked && !f.Fin {
		s.OpenPending = true
	}
	if f.Fin && !s.FinAcked {
		s.FinLost = true
	}
	a.streams.ScheduleRetx(s)
	a.streams.ScheduleNew(s) // a lost empty open of a stream that has sent nothing else
}
