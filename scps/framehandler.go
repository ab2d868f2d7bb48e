package scps

// This file owns the Association's frameHandler: what happens to each frame
// of a packet the sentPacketHandler declared acknowledged or lost. Stream
// data is released from the send buffer or queued for repair; a lost
// RESET_STREAM or credit frame is queued again unless it became obsolete;
// an acknowledged ACK lets the receiver forget the ranges below it.
// Datagrams and PINGs are never sent again.

// frameAcked acts on a frame of an acknowledged packet.
func (a *Association) frameAcked(f *sentFrame) {
	switch f.kind {
	case sfStream:
		a.streamDataAcked(f)
	case sfReset:
		if s, ok := a.streams.byID[f.id]; ok && s.resetSent {
			s.resetAcked = true
			a.maybeFinish(s)
		}
	case sfAck:
		a.ack.onAckAcked(f.off)
	}
}

// frameLost queues again what a frame of a lost packet carried, unless it
// was delivered meanwhile or is obsolete.
func (a *Association) frameLost(f *sentFrame) {
	switch f.kind {
	case sfStream:
		a.streamDataLost(f)
	case sfReset:
		if s, ok := a.streams.byID[f.id]; ok && s.resetSent && !s.resetAcked {
			s.resetQueued = true
			a.streams.scheduleCtrl(s)
		}
	case sfMaxStreamData:
		if s, ok := a.streams.byID[f.id]; ok && !s.finKnown && !s.aborted() && f.off == s.recvMax {
			s.maxDataQueued = true
			a.streams.scheduleCtrl(s)
		}
	case sfMaxData:
		if f.off == a.flow.recvMax {
			a.flow.maxDataQueued = true
		}
	case sfMaxStreams:
		if f.off == a.streams.localMax {
			a.streams.maxStreamsQueued = true
		}
	case sfDatagram:
		// never retransmitted
	}
}

func (a *Association) streamDataAcked(f *sentFrame) {
	s, ok := a.streams.byID[f.id]
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
	if f.fin {
		s.finAcked, s.finLost = true, false
	}
	a.maybeFinish(s)
}

func (a *Association) streamDataLost(f *sentFrame) {
	s, ok := a.streams.byID[f.id]
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
	a.streams.scheduleRetx(s)
	a.streams.scheduleNew(s) // a lost empty open of a stream that has sent nothing else
}
