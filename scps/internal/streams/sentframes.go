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
		if s, ok := m.ByID[f.ID]; ok && s.ResetSent {
			s.ResetAcked = true
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
		if s, ok := m.ByID[f.ID]; ok && s.ResetSent && !s.ResetAcked {
			s.ResetQueued = true
			m.ScheduleCtrl(s)
		}
	case ackhandler.KindMaxStreamData:
		if s, ok := m.ByID[f.ID]; ok && !s.FinKnown && !s.Aborted() && f.Off == s.RecvMax {
			s.MaxDataQueued = true
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
	if f.Off == 0 && s.Local {
		s.OpenAcked, s.OpenPending = true, false
	}
	if f.N > 0 {
		end := f.Off + f.N
		s.Retx.Remove(f.Off, end)
		if end > s.AckedPrefix {
			s.Acked.Add(max(f.Off, s.AckedPrefix), end)
			if first := s.Acked.First(); first.Start <= s.AckedPrefix {
				m.SendReleased(first.End - s.AckedPrefix)
				s.AckedPrefix = first.End
				s.Acked.RemoveBelow(s.AckedPrefix)
				s.SendBuf.Release(s.AckedPrefix)
				s.MaybeGrowSendBuffer(m.Limits.SendBuffer, now, srtt)
				if s.WriteWait {
					s.WriteWait = false
					m.Events.Notify(s)
				}
			}
		}
	}
	if f.Fin {
		s.FinAcked, s.FinLost = true, false
	}
	m.MaybeFinish(s)
}

func (m *Manager) dataLost(f *ackhandler.SentFrame) {
	s, ok := m.ByID[f.ID]
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
	m.ScheduleRetx(s)
	m.ScheduleNew(s) // a lost empty open of a stream that has sent nothing else
}
