package scps

// This file owns the frame writers Send assembles packets from: each
// appends the frames of one kind that fit (ACK, control frames, datagrams,
// stream repairs and new stream data) and records each in the sent-packet
// history, so that the frame's fate (acknowledged or lost) can be acted on
// later (framehandler.go). Streams are drawn from streamMap's queues:
// repairs first, then new data, light streams before bulk ones, round
// robin within each, one stream per turn.

import (
	"time"

	"scpsvpn/scps/internal/ackhandler"
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
	if a.flow.maxDataQueued && len(b)+1+varint.Len(a.flow.recvMax) <= limit {
		b = wire.AppendMaxData(b, wire.FrameMaxData, a.flow.recvMax)
		f := a.sent.AddFrame()
		f.Kind, f.Off = ackhandler.KindMaxData, a.flow.recvMax
		a.flow.maxDataQueued, eliciting = false, true
	}
	if a.streams.maxStreamsQueued && len(b)+1+varint.Len(a.streams.localMax) <= limit {
		b = wire.AppendMaxData(b, wire.FrameMaxStreams, a.streams.localMax)
		f := a.sent.AddFrame()
		f.Kind, f.Off = ackhandler.KindMaxStreams, a.streams.localMax
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
			f := a.sent.AddFrame()
			f.Kind, f.ID = ackhandler.KindReset, s.id
			s.resetQueued, eliciting = false, true
		}
		if s.maxDataQueued && !s.finKnown && !s.aborted() {
			n := 1 + varint.Len(s.id) + varint.Len(s.recvMax)
			if len(b)+n > limit {
				break
			}
			b = wire.AppendMaxStreamData(b, s.id, s.recvMax)
			f := a.sent.AddFrame()
			f.Kind, f.ID, f.Off = ackhandler.KindMaxStreamData, s.id, s.recvMax
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
	b, n, fin, done, fits := a.appendStreamFrame(b, limit, s, off, want)
	if !fits {
		return b, done, false
	}
	if n > 0 {
		s.retx.Remove(off, off+uint64(n))
		a.stats.RetransmitBytes += uint64(n)
	}
	a.stats.Retransmits++
	if fin {
		s.finSent, s.finLost = true, false
	}
	return b, done, true
}

// appendNewFrame adds one frame of new data (or the open or FIN) for s.
func (a *Association) appendNewFrame(b []byte, limit int, s *streamState) (_ []byte, done, fits bool) {
	off := s.sentOff
	var want uint64
	if s.peerMax > off && a.flow.peerMax > a.flow.sent {
		want = min(s.writeOff-off, s.peerMax-off, a.flow.peerMax-a.flow.sent)
	}
	b, n, fin, done, fits := a.appendStreamFrame(b, limit, s, off, want)
	if !fits {
		return b, done, false
	}
	s.sentOff += uint64(n)
	a.flow.sent += uint64(n)
	a.stats.StreamBytesSent += uint64(n)
	if fin {
		s.finSent = true
	}
	return b, done, true
}

// appendStreamFrame adds one STREAM frame of s from off with up to want
// bytes, the open metadata while it is not known to be delivered, and the
// FIN if the frame reaches it, and records the frame. n is the data it
// carries; done: the packet is full; fits: a frame was added.
func (a *Association) appendStreamFrame(b []byte, limit int, s *streamState, off, want uint64) (_ []byte, n int, fin, done, fits bool) {
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
	f := a.sent.AddFrame()
	f.Kind, f.ID, f.Off, f.N, f.Fin = ackhandler.KindStream, s.id, off, uint64(n), fin
	return b, n, fin, !withLen, true
}
