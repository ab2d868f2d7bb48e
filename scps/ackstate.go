package scps

// This file owns the receiver's side of acknowledgement: which packet
// numbers arrived (duplicate detection and ACK ranges) and the ACK policy.
// An ACK goes out after AckEvery ack-eliciting packets, after an ack delay
// of min(MaxAckDelay, srtt/4), and at once when a packet arrives out of
// order or while a new hole is fresh (so the sender can apply its 3-packet
// threshold without waiting). Every ACK reports the holes (up to
// maxAckRanges): SACK and SNACK in one frame.

import (
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
)

type ackState struct {
	received     ranges.Set // packet numbers received (half-open)
	floor        uint64     // packets below are forgotten
	largest      uint64
	largestAt    time.Duration
	any          bool
	pending      bool // something received since the last ACK sent
	eliciting    int  // ack-eliciting packets since the last ACK sent
	immediate    bool
	deadline     time.Duration // ack delay timer; 0 = not armed
	ackOnlyCount int
	deferred     bool // the ACK budget held back the pending ACK (counted once)
	scratch      []wire.AckRange
}

// duplicate reports whether pn was already received (or is too old).
func (s *ackState) duplicate(pn uint64) bool {
	return pn < s.floor || s.received.Contains(pn)
}

// onReceived records pn; ackDelay is the current ack delay.
func (s *ackState) onReceived(pn uint64, now time.Duration, eliciting bool, every int, ackDelay time.Duration) {
	outOfOrder := s.any && pn != s.largest+1
	s.received.Add(pn, pn+1)
	for s.received.Len() > maxTrackedRanges {
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
	if outOfOrder || s.eliciting >= every || (s.received.Len() > 1 && top.Len() < freshHole) {
		s.immediate = true
	}
	if s.deadline == 0 {
		s.deadline = now + ackDelay
	}
}

// due reports whether an ACK must go out now.
func (s *ackState) due(now time.Duration) bool {
	return s.pending && s.eliciting > 0 && (s.immediate || (s.deadline != 0 && now >= s.deadline))
}

// ranges fills s.scratch with up to maxAckRanges ranges, highest first.
func (s *ackState) ranges() []wire.AckRange {
	s.scratch = s.scratch[:0]
	for i := s.received.Len() - 1; i >= 0 && len(s.scratch) < maxAckRanges; i-- {
		r := s.received.At(i)
		s.scratch = append(s.scratch, wire.AckRange{Smallest: r.Start, Largest: r.End - 1})
	}
	return s.scratch
}

// onAckSent resets the policy after an ACK went out.
func (s *ackState) onAckSent() {
	s.pending, s.eliciting, s.immediate, s.deadline, s.deferred = false, 0, false, 0, false
}

// onAckAcked: the peer has our ACK whose largest was largest; it knows
// every hole below, so we may forget them.
func (s *ackState) onAckAcked(largest uint64) {
	if largest+1 > s.floor {
		s.floor = largest + 1
		s.received.RemoveBelow(s.floor)
	}
}
