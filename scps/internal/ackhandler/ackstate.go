package ackhandler

// This file owns ReceivedPacketHandler, the receiver's side of
// acknowledgement: which packet numbers arrived (duplicate detection and
// ACK ranges) and the ACK policy. An ACK goes out after AckEvery
// ack-eliciting packets, after an ack delay of min(MaxAckDelay, srtt/4),
// and at once when a packet arrives out of order or while a new hole is
// fresh (so the sender can apply its 3-packet threshold without waiting),
// and at once for a packet the sender marked (AckAtOnce). Every ACK reports the holes (up to
// maxAckRanges): SACK and SNACK in one frame.

import (
	"slices"
	"time"

	"scpsvpn/scps/internal/ranges"
	"scpsvpn/scps/internal/wire"
)

const (
	// maxAckRanges bounds the ranges one ACK frame reports.
	maxAckRanges = 32
	// maxTrackedRanges bounds the received-packet set; older ranges are
	// forgotten (packets below them are then treated as duplicates).
	maxTrackedRanges = 256
	// ackOnlyBeforePing: after this many ACK-only packets in a row we add
	// a PING so the peer acknowledges one of them, letting us prune the
	// received set, and so we get an RTT sample.
	ackOnlyBeforePing = 20
	// freshHole: while the top range is shorter than this and a hole lies
	// below it, every packet is acknowledged at once.
	freshHole = 4
	// With several paths (SetMultipath) every packet in flight on a slow
	// path is a hole among the fast path's packets, and the newest ranges
	// are those holes, not what arrived: the received set keeps more
	// ranges, and each ACK reports the ranges holding the latest packets
	// that arrived (on any path), then the newest ranges.
	maxTrackedRangesMulti = 4096
	lateFills             = 64
)

// ReceivedPacketHandler is the receiver's side of acknowledgement of one
// association. It is not safe for concurrent use.
type ReceivedPacketHandler struct {
	received  ranges.Set // packet numbers received (half-open)
	floor     uint64     // packets below are forgotten
	largest   uint64
	largestAt time.Duration
	any       bool
	pending   bool // something received since the last ACK sent
	eliciting int  // ack-eliciting packets since the last ACK sent
	immediate bool
	// extra: the pending ACK was asked for at once (AckAtOnce), one more
	// than the policy's; carried is how many ack-eliciting packets such
	// ACKs covered that still count toward the next ACK by AckEvery.
	extra        bool
	carried      int
	deadline     time.Duration // ack delay timer; 0 = not armed
	ackOnlyCount int
	deferred     bool // the ACK budget held back the pending ACK (counted once)
	scratch      []wire.AckRange

	multi bool              // several paths (SetMultipath)
	late  [lateFills]uint64 // the latest packets received, a ring
	nlate int               // how many were, in all
	idx   [maxAckRanges]int // Ranges' scratch
	// Floor raises held back (OnAckAckedAt), a ring, oldest at fhead.
	forgets     [heldForgets]heldForget
	fhead, fnum int
}

// heldForgets bounds the floor raises held at once; they are at least
// an eighth of the hold apart, so a hole goes at most that much later
// than its hold.
const heldForgets = 8

// heldForget: the holes below pn go at at.
type heldForget struct {
	pn uint64
	at time.Duration
}

// SetMultipath says whether the packets come over several paths, so far
// out of order (see maxTrackedRangesMulti).
func (s *ReceivedPacketHandler) SetMultipath(on bool) { s.multi = on }

// Duplicate reports whether pn was already received (or is too old).
func (s *ReceivedPacketHandler) Duplicate(pn uint64) bool {
	return pn < s.floor || s.received.Contains(pn)
}

// OnReceived records pn, received at now; every is how many ack-eliciting
// packets an ACK waits for at most, ackDelay the current ack delay.
func (s *ReceivedPacketHandler) OnReceived(pn uint64, now time.Duration, eliciting bool, every int, ackDelay time.Duration) {
	outOfOrder := s.any && pn != s.largest+1
	limit := maxTrackedRanges
	if s.multi {
		// Out of order is the rule: no ACK at once for it.
		limit, outOfOrder = maxTrackedRangesMulti, false
		s.late[s.nlate%lateFills] = pn
		s.nlate++
	}
	for s.fnum > 0 && now >= s.forgets[s.fhead].at {
		s.OnAckAcked(s.forgets[s.fhead].pn)
		s.fhead, s.fnum = (s.fhead+1)%heldForgets, s.fnum-1
	}
	s.received.Add(pn, pn+1)
	for s.received.Len() > limit {
		s.floor = s.received.First().End
		s.received.DropLowest()
	}
	if !s.any || pn > s.largest {
		s.largest, s.largestAt, s.any = pn, now, true
	}
	s.pending = true
	if !eliciting {
		return
	}
	s.eliciting++
	top := s.received.Last()
	if outOfOrder || s.eliciting+s.carried >= every || (!s.multi && s.received.Len() > 1 && top.Len() < freshHole) {
		s.immediate = true
	}
	if s.deadline == 0 {
		s.deadline = now + ackDelay
	}
}

// AckAtOnce asks for an ACK at once of the ack-eliciting packet just
// recorded, beside the policy: the sender marked it as the start of a
// flight it times (a PING with data). The packets it covers still count
// toward the next ACK by AckEvery, so the flight's other ACKs go where
// they would without it.
func (s *ReceivedPacketHandler) AckAtOnce() {
	if s.pending && s.eliciting > 0 {
		s.immediate, s.extra = true, true
	}
}

// Due reports whether an ACK must go out now.
func (s *ReceivedPacketHandler) Due(now time.Duration) bool {
	return s.pending && s.eliciting > 0 && (s.immediate || (s.deadline != 0 && now >= s.deadline))
}

// Deadline is when an ACK is due (now if at once); ok is false when none
// will be without more ack-eliciting packets.
func (s *ReceivedPacketHandler) Deadline(now time.Duration) (t time.Duration, ok bool) {
	if !s.pending || s.eliciting == 0 {
		return 0, false
	}
	if s.immediate {
		return now, true
	}
	return s.deadline, true
}

// Pending reports whether anything was received since the last ACK sent.
func (s *ReceivedPacketHandler) Pending() bool { return s.pending }

// Any reports whether any packet was received.
func (s *ReceivedPacketHandler) Any() bool { return s.any }

// LargestAt is when the largest packet number received arrived.
func (s *ReceivedPacketHandler) LargestAt() time.Duration { return s.largestAt }

// ReceivedTotal is how many packet numbers the received set holds.
func (s *ReceivedPacketHandler) ReceivedTotal() uint64 { return s.received.Total() }

// Defer notes that the ACK budget holds the pending ACK back; first
// reports that it is the first time for this ACK (so it is counted once).
func (s *ReceivedPacketHandler) Defer() (first bool) {
	first = !s.deferred
	s.deferred = true
	return first
}

// PingWanted reports whether an ACK-only packet sent now should carry a
// PING instead: ackOnlyBeforePing of them in a row.
func (s *ReceivedPacketHandler) PingWanted() bool { return s.ackOnlyCount+1 >= ackOnlyBeforePing }

// OnPacketSent counts ACK-only packets in a row: eliciting ends the run.
func (s *ReceivedPacketHandler) OnPacketSent(eliciting bool) {
	if eliciting {
		s.ackOnlyCount = 0
	} else {
		s.ackOnlyCount++
	}
}

// Ranges returns up to maxAckRanges received ranges, highest first, for
// an ACK frame; the slice is reused by the next call.
func (s *ReceivedPacketHandler) Ranges() []wire.AckRange {
	s.scratch = s.scratch[:0]
	if s.multi && s.nlate > 0 {
		return s.multiRanges()
	}
	for i := s.received.Len() - 1; i >= 0 && len(s.scratch) < maxAckRanges; i-- {
		r := s.received.At(i)
		s.scratch = append(s.scratch, wire.AckRange{Smallest: r.Start, Largest: r.End - 1})
	}
	return s.scratch
}

// OnAckSent resets the policy after an ACK went out.
func (s *ReceivedPacketHandler) OnAckSent() {
	if s.extra {
		s.carried += s.eliciting
	} else {
		s.carried = 0
	}
	s.extra = false
	s.pending, s.eliciting, s.immediate, s.deadline, s.deferred = false, 0, false, 0, false
}

// OnAckAcked: the peer has our ACK whose largest was largest; it knows
// every hole below, so we may forget them.
func (s *ReceivedPacketHandler) OnAckAcked(largest uint64) {
	if largest+1 > s.floor {
		s.floor = largest + 1
		s.received.RemoveBelow(s.floor)
	}
}

// OnAckAckedAt is OnAckAcked for packets that come over several paths,
// told at now: the peer knows every hole below largest, but a packet below
// it may still be on its way on a slower path, and forgetting its hole
// would drop it as a duplicate. So the holes go hold later, when whatever
// was sent before largest has arrived or is lost. Without that, holes
// nothing fills (packets lost on a path that went down, the probes of a
// dead path, ten a second) pile up and every ACK grows to maxAckRanges
// ranges. Raises closer than hold/heldForgets to the last one held are
// left to a later ACK's.
func (s *ReceivedPacketHandler) OnAckAckedAt(largest uint64, now, hold time.Duration) {
	at := now + hold
	if s.fnum > 0 {
		last := s.forgets[(s.fhead+s.fnum-1)%heldForgets]
		if s.fnum == heldForgets || largest <= last.pn || at-last.at < hold/heldForgets {
			return
		}
	}
	s.forgets[(s.fhead+s.fnum)%heldForgets] = heldForget{pn: largest, at: at}
	s.fnum++
}

// multiRanges is Ranges with several paths: the ranges holding the latest
// packets that arrived, and the newest ranges, highest first.
func (s *ReceivedPacketHandler) multiRanges() []wire.AckRange {
	n := s.received.Len()
	idx := s.idx[:0]
	for k := range min(s.nlate, lateFills) {
		if len(idx) == maxAckRanges {
			break
		}
		// Newest first.
		if i, ok := s.received.Index(s.late[(s.nlate-1-k)%lateFills]); ok && !slices.Contains(idx, i) {
			idx = append(idx, i)
		}
	}
	for i := n - 1; i >= 0 && len(idx) < maxAckRanges; i-- {
		if !slices.Contains(idx, i) {
			idx = append(idx, i)
		}
	}
	slices.SortFunc(idx, func(a, b int) int { return b - a })
	for _, i := range idx {
		r := s.received.At(i)
		s.scratch = append(s.scratch, wire.AckRange{Smallest: r.Start, Largest: r.End - 1})
	}
	return s.scratch
}
