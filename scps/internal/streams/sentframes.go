package streams

// This file owns what happens to the streams' frames of a packet the
// sent-packet handler (internal/ackhandler) declared acknowledged or lost:
// stream data is released from the send buffer or queued for repair; a
// lost RESET_STREAM or credit frame is queued again unless it became
// obsolete.

import (
	"time"

	"scpsvpn/scps/internal/ackhandler"
)

// FrameAcked acts on a frame of an acknowledged packet; frames that are
// not the streams' (ACK, datagram, PING) are left alone. srtt is the
// smoothed round-trip time.
func (m *Manager) FrameAcked(f *ackhandler.SentFrame, now, srtt time.Duration) {
	switch f.Kind {
	case ackhandler.KindStream:
		m.dataAcked(f, now, srtt)
	case ackhandler.KindReset:
		if s, ok := m.ByID[f.ID]; ok && s.resetSent {
			s.resetAcked = true
			m.MaybeFinish(s)
		}
	}
}

// FrameLost queues again what a frame of a lost packet carried, unless it
// was delivered meanwhile or is obsolete; frames that are not the
// streams' are left alone.
func (m *Manager) FrameLost(f *ackhandler.SentFrame) {
	switch f.Kind {
	case ackhandler.KindStream:
		m.dataLost(f)
	case ackhandler.KindReset:
		if s, ok := m.ByID[f.ID]; ok && s.resetSent && !s.resetAcked {
			s.resetQueued = true
			m.ScheduleCtrl(s)
		}
	case ackhandler.KindMaxStreamData:
		if s, ok := m.ByID[f.ID]; ok && !s.finKnown && !s.Aborted() && f.Off == s.recvMax {
			s.maxDataQueued = true
			m.ScheduleCtrl(s)
		}
	case ackhandler.KindMaxData:
		if f.Off == m.Flow.RecvMax {
			m.Flow.MaxDataQueued = true
		}
	case ackhandler.KindMaxStreams:
		if f.Off == m.LocalMax {
			m.MaxStreamsQueued = true
		}
	}
}

func (m *Manager) dataAcked(f *ackhandler.SentFrame, now, srtt time.Duration) {
	s, ok := m.ByID[f.ID]
	if !ok || s.Aborted() {
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
				m.SendReleased(first.End - s.ackedPrefix)
				s.ackedPrefix = first.End
				if s.ackedPrefix == s.writeOff {
					s.runStart = s.writeOff // idle: the next write begins a run
				}
				s.acked.RemoveBelow(s.ackedPrefix)
				s.sendBuf.Release(s.ackedPrefix)
				s.MaybeGrowSendBuffer(m.Limits.SendBuffer, now, srtt)
				if s.writeWait {
					s.writeWait = false
					m.notify(s)
				}
			}
		}
	}
	if f.Fin {
		s.finAcked, s.finLost = true, false
	}
	m.MaybeFinish(s)
}

func (m *Manager) dataLost(f *ackhandler.SentFrame) {
	s, ok := m.ByID[f.ID]
	if !ok || s.Aborted() {
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
	m.ScheduleRetx(s)
	m.ScheduleNew(s) // a lost empty open of a stream that has sent nothing else
}
