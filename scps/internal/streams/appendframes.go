package streams

// This file owns the streams' frame writers the association assembles
// packets from: the streams' control frames (MAX_DATA, MAX_STREAMS,
// RESET_STREAM, MAX_STREAM_DATA) and STREAM frames of repairs and new
// data, each recorded with the sent-packet history (Frames) so that its
// fate can be acted on later (sentframes.go). Streams are drawn from
// Map's queues: repairs first, then new data, light streams before bulk
// ones, round robin within each, one stream per turn.

import (
	"scpsvpn/scps/internal/ackhandler"
	"scpsvpn/scps/internal/wire"
	"scpsvpn/scps/varint"
)

// Frames records a frame of the packet being assembled
// (ackhandler.SentPacketHandler.AddFrame).
type Frames interface {
	AddFrame() *ackhandler.SentFrame
}

// SendCounts counts what the streams' frame writers sent.
type SendCounts struct {
	Retransmits     uint64 // stream frames sent again after loss or probe
	RetransmitBytes uint64 // stream bytes sent again
	BytesSent       uint64 // new stream bytes sent (first transmissions)
	CopyBytes       uint64 // stream bytes sent again as tail copies (AppendCopy)
}

// minStreamChunk: do not start a stream frame that would carry less than
// this (unless that is all there is): the rest of the packet is better
// left for the next.
const minStreamChunk = 32

// AppendControl adds the streams' queued control frames that fit
// (MAX_DATA, MAX_STREAMS, RESET_STREAM, MAX_STREAM_DATA) and records each;
// it reports whether it added any.
func (m *Manager) AppendControl(b []byte, limit int) ([]byte, bool) {
	eliciting := false
	if m.Flow.MaxDataQueued && len(b)+1+varint.Len(m.Flow.RecvMax) <= limit {
		b = wire.AppendMaxData(b, wire.FrameMaxData, m.Flow.RecvMax)
		f := m.Frames.AddFrame()
		f.Kind, f.Off = ackhandler.KindMaxData, m.Flow.RecvMax
		m.Flow.MaxDataQueued, eliciting = false, true
	}
	if m.MaxStreamsQueued && len(b)+1+varint.Len(m.LocalMax) <= limit {
		b = wire.AppendMaxData(b, wire.FrameMaxStreams, m.LocalMax)
		f := m.Frames.AddFrame()
		f.Kind, f.Off = ackhandler.KindMaxStreams, m.LocalMax
		m.MaxStreamsQueued, eliciting = false, true
	}
	for m.CtrlQ.Len() > 0 {
		s := m.CtrlQ.Peek()
		if s.gone {
			m.PopCtrl()
			continue
		}
		if s.resetQueued {
			n := wire.ResetStreamLen(s.id, s.resetCode, s.sentOff)
			if len(b)+n > limit {
				break
			}
			b = wire.AppendResetStream(b, s.id, s.resetCode, s.sentOff)
			f := m.Frames.AddFrame()
			f.Kind, f.ID = ackhandler.KindReset, s.id
			s.resetQueued, eliciting = false, true
		}
		if s.maxDataQueued && !s.finKnown && !s.Aborted() {
			n := 1 + varint.Len(s.id) + varint.Len(s.recvMax)
			if len(b)+n > limit {
				break
			}
			b = wire.AppendMaxStreamData(b, s.id, s.recvMax)
			f := m.Frames.AddFrame()
			f.Kind, f.ID, f.Off = ackhandler.KindMaxStreamData, s.id, s.recvMax
			eliciting = true
		}
		s.maxDataQueued = false
		m.PopCtrl()
	}
	return b, eliciting
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
	if w := int(want); hdr+varint.Len(want)+w <= room {
		return w, true, true
	}
	return int(want), false, true
}

// AppendLight adds the new data of light streams only (LightQ), and
// records each frame: a packet a light stream's data may send past its
// path's window carries nothing of the bulk's.
func (m *Manager) AppendLight(b []byte, limit int) ([]byte, bool) {
	return m.appendNew(b, limit, true, false)
}

// AppendStreams adds repairs, then new data, and records each frame; it
// reports whether it added any.
func (m *Manager) AppendStreams(b []byte, limit int) ([]byte, bool) {
	eliciting := false
	for m.RetxQ.Len() > 0 && limit-len(b) > 8 {
		s := m.RetxQ.Peek()
		if s.gone || s.Aborted() || !s.HasRetx() {
			m.PopRetx()
			continue
		}
		var done, fits bool
		b, done, fits = m.appendRetxFrame(b, limit, s)
		if fits {
			eliciting = true
		}
		if !s.HasRetx() {
			m.PopRetx()
		}
		if done || !fits {
			return b, eliciting
		}
	}
	return m.appendNew(b, limit, false, eliciting)
}

// appendNew adds new data, the light streams' first, the bulk's after
// unless lightOnly.
func (m *Manager) appendNew(b []byte, limit int, lightOnly, eliciting bool) ([]byte, bool) {
	for limit-len(b) > 8 {
		q := &m.LightQ
		if q.Len() == 0 {
			if lightOnly {
				break
			}
			q = &m.BulkQ
			if q.Len() == 0 {
				break
			}
		}
		s := q.Peek()
		if s.gone || s.Aborted() || !s.CanSendNew() {
			m.PopNew(q)
			if !s.gone && !s.Aborted() && s.sentOff < s.writeOff && s.sentOff >= s.peerMax {
				s.creditWait = true
			}
			continue
		}
		needCredit := s.sentOff < s.writeOff
		if needCredit && m.Flow.Sent >= m.Flow.PeerMax && !(s.openPending && s.sentOff == 0) &&
			!(s.finQueued && !s.finSent && s.sentOff == s.writeOff) {
			break // connection credit exhausted: wait for MAX_DATA
		}
		var done, fits bool
		b, done, fits = m.appendNewFrame(b, limit, s)
		if !fits {
			break
		}
		eliciting = true
		m.PopNew(q)
		m.ScheduleNew(s) // back of the line: round robin
		if done {
			break
		}
	}
	return b, eliciting
}

// appendRetxFrame adds one repair frame for s. done: the packet is full;
// fits: a frame was added.
func (m *Manager) appendRetxFrame(b []byte, limit int, s *State) (_ []byte, done, fits bool) {
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
	b, n, fin, done, fits := m.appendStreamFrame(b, limit, s, off, want)
	if !fits {
		return b, done, false
	}
	if n > 0 {
		s.retx.Remove(off, off+uint64(n))
		m.Sent.RetransmitBytes += uint64(n)
	}
	m.Sent.Retransmits++
	if fin {
		s.finSent, s.finLost = true, false
	}
	return b, done, true
}

// appendNewFrame adds one frame of new data (or the open or FIN) for s.
func (m *Manager) appendNewFrame(b []byte, limit int, s *State) (_ []byte, done, fits bool) {
	off := s.sentOff
	var want uint64
	if s.peerMax > off && m.Flow.PeerMax > m.Flow.Sent {
		want = min(s.writeOff-off, s.peerMax-off, m.Flow.PeerMax-m.Flow.Sent)
	}
	b, n, fin, done, fits := m.appendStreamFrame(b, limit, s, off, want)
	if !fits {
		return b, done, false
	}
	s.sentOff += uint64(n)
	m.Unsent -= uint64(n)
	m.Flow.Sent += uint64(n)
	m.Sent.BytesSent += uint64(n)
	if fin {
		s.finSent = true
	}
	m.unsentSent(s)
	return b, done, true
}

// appendStreamFrame adds one STREAM frame of s from off with up to want
// bytes, the open metadata while it is not known to be delivered, and the
// FIN if the frame reaches it, and records the frame. n is the data it
// carries; done: the packet is full; fits: a frame was added.
func (m *Manager) appendStreamFrame(b []byte, limit int, s *State, off, want uint64) (_ []byte, n int, fin, done, fits bool) {
	hasMeta := off == 0 && s.local && !s.openAcked
	n, withLen, ok := fitStream(limit-len(b), s.id, off, len(s.meta), hasMeta, want)
	if !ok {
		return b, 0, false, true, false
	}
	fin = s.finQueued && off+uint64(n) == s.finOffset
	b = wire.AppendStreamHeader(b, s.id, off, s.meta, hasMeta, fin, withLen, n)
	l := len(b)
	b = b[:l+n]
	s.sendBuf.Read(off, b[l:])
	if hasMeta {
		s.openPending = false
	}
	f := m.Frames.AddFrame()
	f.Kind, f.ID, f.Off, f.N, f.Fin = ackhandler.KindStream, s.id, off, uint64(n), fin
	return b, n, fin, !withLen, true
}

// AppendCopy adds a STREAM frame that sends again what f (a frame of a
// packet still in flight) carried, less what was acknowledged since, as a
// tail copy (ackhandler's tailcopy.go); it reports whether it added one.
// Nothing is queued or counted as a repair: if the original is lost, its
// own loss queues the repair.
func (m *Manager) AppendCopy(b []byte, limit int, f ackhandler.SentFrame) ([]byte, bool) {
	s, ok := m.ByID[f.ID]
	if !ok || s.gone || s.Aborted() {
		return b, false
	}
	off, end := max(f.Off, s.ackedPrefix), f.Off+f.N
	if f.N > 0 && (off >= end || s.acked.Covers(off, end)) {
		return b, false
	}
	if f.N == 0 && (!f.Fin || s.finAcked) {
		return b, false
	}
	if off > s.sentOff || end > s.sentOff {
		return b, false // not sent as new data (cannot happen): nothing to copy
	}
	b, n, _, _, fits := m.appendStreamFrame(b, limit, s, off, end-off)
	if fits {
		m.Sent.CopyBytes += uint64(n)
	}
	return b, fits
}
