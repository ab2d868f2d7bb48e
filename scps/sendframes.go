package scps

// This file owns the Association's frame writers Send assembles packets
// from: each appends the frames of one kind that fit (ACK, datagrams) and
// records each in the sent-packet history, so that the frame's fate
// (acknowledged or lost) can be acted on later (framehandler.go). The
// streams' frames (control frames, repairs and new data) are written by
// streams.Manager (internal/streams/appendframes.go).

import (
	"slices"
	"time"

	"scpsvpn/scps/internal/ackhandler"
	"scpsvpn/scps/internal/wire"
)

func (a *Association) appendAck(b []byte, limit int) []byte {
	rs := a.ack.Ranges()
	delay := uint64((a.now - a.ack.LargestAt()) / time.Microsecond)
	rs = rs[:wire.AckRangesFit(delay, rs, limit-len(b))]
	if len(rs) == 0 {
		return b
	}
	// The points the ACK passed go first, each as the ACK the peer would
	// have had then: it takes each frame's largest as it comes.
	room := limit - wire.AckFrameLen(delay, rs)
	a.ack.Points(rs, func(at time.Duration, prs []wire.AckRange) {
		d := uint64((a.now - at) / time.Microsecond)
		if len(b)+wire.AckFrameLen(d, prs) <= room {
			b = wire.AppendAck(b, d, prs)
		}
	})
	b = wire.AppendAck(b, delay, rs)
	f := a.sent.AddFrame()
	f.Kind, f.Off = ackhandler.KindAck, rs[0].Largest
	if !a.paths.multi() || a.sent.Current() == a.fastestPath(a.dataPaths()) {
		// An ACK on a slower path than the fastest may arrive after
		// the next ones: what it reports goes in them too, or the peer
		// takes a slow path's packets it holds for lost.
		a.ack.OnAckRanges(rs)
	}
	a.ack.OnAckSent()
	return b
}

func (a *Association) appendDatagrams(b []byte, limit int) ([]byte, bool) {
	eliciting := false   // Send expired the stale ones first
	var groups [8]uint64 // the groups this packet carries (SendDatagramApart)
	ng := 0
	for a.dgrams.count > 0 {
		p, _ := a.dgrams.front()
		if len(b)+wire.DatagramLen(len(p)) > limit {
			break
		}
		if g := a.dgrams.frontGroup(); g != 0 {
			if ng == len(groups) || slices.Contains(groups[:ng], g) {
				break
			}
			groups[ng] = g
			ng++
		}
		b = wire.AppendDatagram(b, p)
		a.sent.AddFrame().Kind = ackhandler.KindDatagram
		a.dgrams.pop()
		a.stats.DatagramsSent++
		eliciting = true
	}
	return b, eliciting
}

// datagramsDueAt is when, as the association last saw it (a.now), its
// queued datagrams could go: when the pacer lets a packet go, if the
// window and the holds let one go at all (plan). ok is false when they
// wait for input (an ACK to open the window, the end of a silence or an
// outage) or none is queued: the time until then ages them.
func (a *Association) datagramsDueAt() (due time.Duration, ok bool) {
	if a.dgrams.count == 0 || a.state != stateOpen || a.outage.active || !a.sent.WindowOpen() || a.silenceHold() || a.quietHold() {
		return 0, false
	}
	return a.sent.PacedAt(a.now), true
}

// expireDatagrams drops queued datagrams that waited past their age
// (datagramMaxAge, groupMaxAge), also while nothing may be sent (full
// window, silence hold).
func (a *Association) expireDatagrams() {
	a.stats.DatagramsDropped += uint64(a.dgrams.expire(a.now))
}
