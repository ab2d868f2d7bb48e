package scps

// This file owns the frame writers Send assembles packets from: each
// appends the frames of one kind that fit (ACK, control frames, datagrams,
// stream repairs and new stream data) and records each in the sent-packet
// history, so that the frame's fate (acknowledged or lost) can be acted on
// later (framehandler.go). Streams are drawn from streams.Map's queues:
// repairs first, then new data, light streams before bulk ones, round
// robin within each, one stream per turn.

import (
	"time"

	"scpsvpn/scps/internal/ackhandler"
	"scpsvpn/scps/internal/streams"
	"scpsvpn/scps/internal/wire"
	"scpsvpn/scps/varint"
)

// minStreamChunk: do not start a stream frame that would carry less than
// this (unless that is all there is): the rest of the packet is better
// left for the next.
const minStreamChunk = 32

func (a *Association) appendAck(b []byte, limit int) []byte {
	rs := a.ack.Ranges()
	delay := uint64((a.now - a.ack.LargestAt()) / time.Microsecond)
	for len(rs) > 0 && len(b)+wire.AckFrameLen(delay, rs) > limit {
		rs = rs[:len(rs)-1]
	}
	if len(rs) == 0 {
		return b
	}
	b = wire.AppendAck(b, delay, rs)
	f := a.sent.AddFrame()
	f.Kind, f.Off = ackhandler.KindAck, rs[0].Largest
	a.ack.OnAckSent()
	return b
}

// appendControl adds queued control frames that fit.
func (a *Association) appendControl(b []byte, limit int) ([]byte, bool) {
	eliciting := false
	if a.streams.Flow.MaxDataQueued && len(b)+1+varint.Len(a.streams.Flow.RecvMax) <= limit {
		b = wire.AppendMaxData(b, wire.FrameMaxData, a.streams.Flow.RecvMax)
		f := a.sent.AddFrame()
		f.Kind, f.Off = ackhandler.KindMaxData, a.streams.Flow.RecvMax
		a.streams.Flow.MaxDataQueued, eliciting = false, true
	}
	if a.streams.MaxStreamsQueued && len(b)+1+varint.Len(a.streams.LocalMax) <= limit {
		b = wire.AppendMaxData(b, wire.FrameMaxStreams, a.streams.LocalMax)
		f := a.sent.AddFrame()
		f.Kind, f.Off = ackhandler.KindMaxStreams, a.streams.LocalMax
		a.streams.MaxStreamsQueued, eliciting = false, true
	}
	for a.streams.CtrlQ.Len() > 0 {
		s := a.streams.CtrlQ.Peek()
		if s.Gone {
			a.streams.PopCtrl()
			continue
		}
		if s.ResetQueued {
			n := wire.ResetStreamLen(s.ID, s.ResetCode, s.SentOff)
			if len(b)+n > limit {
				break
			}
			b = wire.AppendResetStream(b, s.ID, s.ResetCode, s.SentOff)
			f := a.sent.AddFrame()
			f.Kind, f.ID = ackhandler.KindReset, s.ID
			s.ResetQueued, eliciting = false, true
		}
		if s.MaxDataQueued && !s.FinKnown && !s.Aborted() {
			n := 1 + varint.Len(s.ID) + varint.Len(s.RecvMax)
			if len(b)+n > limit {
				break
			}
			b = wire.AppendMaxStreamData(b, s.ID, s.RecvMax)
			f := a.sent.AddFrame()
			f.Kind, f.ID, f.Off = ackhandler.KindMaxStreamData, s.ID, s.RecvMax
			eliciting = true
		}
		s.MaxDataQueued = false
		a.streams.PopCtrl()
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
		a.sent.AddFrame().Kind = ackhandler.KindDatagram
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
	if w := int(want); hdr+varint.Len(want)+w <= room {
		return w, true, true
	}
	return int(want), false, true
}

// appendStreams adds repairs, then new data.
func (a *Association) appendStreams(b []byte, limit int) ([]byte, bool) {
	eliciting := false
	for a.streams.RetxQ.Len() > 0 && limit-len(b) > 8 {
		s := a.streams.RetxQ.Peek()
		if s.Gone || s.Aborted() || !s.HasRetx() {
			a.streams.PopRetx()
			continue
		}
		var done, fits bool
		b, done, fits = a.appendRetxFrame(b, limit, s)
		if fits {
			eliciting = true
		}
		if !s.HasRetx() {
			a.streams.PopRetx()
		}
		if done || !fits {
			return b, eliciting
		}
	}
	for limit-len(b) > 8 {
		q := &a.streams.LightQ
		if q.Len() == 0 {
			q = &a.streams.BulkQ
			if q.Len() == 0 {
				break
			}
		}
		s := q.Peek()
		if s.Gone || s.Aborted() || !s.CanSendNew() {
			a.streams.PopNew(q)
			if !s.Gone && !s.Aborted() && s.SentOff < s.WriteOff && s.SentOff >= s.PeerMax {
				s.CreditWait = true
			}
			continue
		}
		needCredit := s.SentOff < s.WriteOff
		if needCredit && a.streams.Flow.Sent >= a.streams.Flow.PeerMax && !(s.OpenPending && s.SentOff == 0) &&
			!(s.FinQueued && !s.FinSent && s.SentOff == s.WriteOff) {
			break // connection credit exhausted: wait for MAX_DATA
		}
		var done, fits bool
		b, done, fits = a.appendNewFrame(b, limit, s)
		if !fits {
			break
		}
		eliciting = true
		a.streams.PopNew(q)
		a.streams.ScheduleNew(s) // back of the line: round robin
		if done {
			break
		}
	}
	return b, eliciting
}

// appendRetxFrame adds one repair frame for s. done: the packet is full;
// fits: a frame was added.
func (a *Association) appendRetxFrame(b []byte, limit int, s *streams.State) (_ []byte, done, fits bool) {
	var off, want uint64
	switch {
	case !s.Retx.Empty():
		r := s.Retx.First()
		off, want = r.Start, r.Len()
	case s.OpenPending && s.SentOff > 0:
		off, want = 0, 0
	default: // lost FIN whose data is all delivered
		off, want = s.FinOffset, 0
	}
	b, n, fin, done, fits := a.appendStreamFrame(b, limit, s, off, want)
	if !fits {
		return b, done, false
	}
	if n > 0 {
		s.Retx.Remove(off, off+uint64(n))
		a.stats.RetransmitBytes += uint64(n)
	}
	a.stats.Retransmits++
	if fin {
		s.FinSent, s.FinLost = true, false
	}
	return b, done, true
}

// appendNewFrame adds one frame of new data (or the open or FIN) for s.
func (a *Association) appendNewFrame(b []byte, limit int, s *streams.State) (_ []byte, done, fits bool) {
	off := s.SentOff
	var want uint64
	if s.PeerMax > off && a.streams.Flow.PeerMax > a.streams.Flow.Sent {
		want = min(s.WriteOff-off, s.PeerMax-off, a.streams.Flow.PeerMax-a.streams.Flow.Sent)
	}
	b, n, fin, done, fits := a.appendStreamFrame(b, limit, s, off, want)
	if !fits {
		return b, done, false
	}
	s.SentOff += uint64(n)
	a.streams.Flow.Sent += uint64(n)
	a.stats.StreamBytesSent += uint64(n)
	if fin {
		s.FinSent = true
	}
	return b, done, true
}

// appendStreamFrame adds one STREAM frame of s from off with up to want
// bytes, the open metadata while it is not known to be delivered, and the
// FIN if the frame reaches it, and records the frame. n is the data it
// carries; done: the packet is full; fits: a frame was added.
func (a *Association) appendStreamFrame(b []byte, limit int, s *streams.State, off, want uint64) (_ []byte, n int, fin, done, fits bool) {
	hasMeta := off == 0 && s.Local && !s.OpenAcked
	n, withLen, ok := fitStream(limit-len(b), s.ID, off, len(s.Meta), hasMeta, want)
	if !ok {
		return b, 0, false, true, false
	}
	fin = s.FinQueued && off+uint64(n) == s.FinOffset
	b = wire.AppendStreamHeader(b, s.ID, off, s.Meta, hasMeta, fin, withLen, n)
	l := len(b)
	b = b[:l+n]
	s.SendBuf.Read(off, b[l:])
	if hasMeta {
		s.OpenPending = false
	}
	f := a.sent.AddFrame()
	f.Kind, f.ID, f.Off, f.N, f.Fin = ackhandler.KindStream, s.ID, off, uint64(n), fin
	return b, n, fin, !withLen, true
}
