package ackhandler

// This file owns ReceivedPacketHandler, the receiver's side of
// acknowledgement: which packet numbers arrived (duplicate detection and
// ACK ranges) and the ACK policy. An ACK goes out after AckEvery
// ack-eliciting packets, after an ack delay of min(MaxAckDelay, srtt/4),
// and at once when a packet arrives out of order or while a new hole is
// fresh (so the sender can apply its 3-packet threshold without waiting),
// and at once for a packet the sender marked (AckAtOnce). Every ACK reports the holes (up to
// maxAckRanges): SACK and SNACK in one frame. An ACK that leaves later
// than it fell due (a host that takes packets in batches) is preceded by
// the frames it would have been (ackPoint), so the sender still times
// the path.

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
	// ranges, and each ACK reports the range of the largest packet, the
	// ranges holding every packet that arrived (on any path; late) that
	// no ACK sent has reported yet (up to maxUnsentRanges of them), then
	// those holding the latest lateFills runs of arrivals already
	// reported, newest first both, then the newest ranges.
	maxTrackedRangesMulti = 4096
	lateFills             = 64
	// maxUnsentRanges bounds the ranges of unreported arrivals one ACK
	// frame reports: some 2 bytes each, a tenth of a LEO-sized batch's
	// runs at most (a socket read of 64 GRO runs of 64 packets).
	maxUnsentRanges = 512
	// maxAckPoints bounds the earlier points (ackPoint) one ACK reports,
	// and maxPointRanges the ranges each may take: a point below more
	// holes is left out (its frame would cost as much as the ACK).
	maxAckPoints   = 3
	maxPointRanges = 4
	// trainGap: a packet that arrives this long after the one before
	// begins a train; its arrival is a point.
	trainGap = 10 * time.Millisecond
)

// ackPoint is an arrival the sender times the path by: the first packet
// of a train, or one after which an ACK fell due (every AckEvery
// packets). A host that takes packets in batches (socket reads, a busy
// scheduler) answers a whole batch with one ACK, and the sender learns
// only when its last packet arrived: at 250 Mbit/s a first flight of 32
// packets arrives within 1.5 ms, one batch, and the sender could not
// time the link (slow start then doubled up from the initial window, ten
// round trips to the link's rate). So each ACK is preceded by an ACK
// frame per point its packets passed, ranges cut at the point's packet
// and the delay counted from its arrival: the frames the receiver would
// have sent then.
type ackPoint struct {
	pn  uint64
	at  time.Duration
	due bool // an ACK fell due (else the train began)
}

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
	extra   bool
	carried int
	// holdUntil: for an ack delay after a timing mark the flight's ACKs
	// wait for that delay and go as one with points (ackPoint), not one
	// by one every AckEvery packets. One by one they queued behind each
	// other on a thin return link (10-25 ms each at 64 kbit/s), and the
	// sender timed that queue as the flight's spread: a 20 Mbit/s link
	// at 0.47 MB/s of 2.4.
	holdUntil    time.Duration
	lastDelay    time.Duration // the ack delay OnReceived was last given
	deadline     time.Duration // ack delay timer; 0 = not armed
	ackOnlyCount int
	deferred     bool // the ACK budget held back the pending ACK (counted once)
	scratch      []wire.AckRange
	points       [maxAckPoints]ackPoint // since the last ACK sent, in order
	npoints      int
	lastArrival  time.Duration // arrival of the latest packet
	timed        bool          // the arrivals are the host's receive timestamps (SetTimed)
	pointScratch []wire.AckRange

	multi bool              // several paths (SetMultipath)
	late  [lateFills]uint64 // the latest runs of packets received (each its newest packet), a ring
	nlate int               // how many runs were, in all
	// unsent: the packets received with several paths that no ACK sent
	// on the fastest path has reported yet, bounded as received is. A
	// host that takes packets in batches (a socket read of GRO runs, a
	// busy scheduler) takes in many runs between two ACKs: when only
	// the latest runs were kept (a ring of lateFills) and an ACK
	// reported maxAckRanges ranges, those early in the batch, a slow
	// path's among them, were never acknowledged or acknowledged after
	// later ones of their path; the sender took them for lost (false
	// congestion losses on both paths) and the slow path for down.
	unsent ranges.Set
	idx    []int // Ranges' scratch
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
		s.noteLate(pn)
	}
	for s.fnum > 0 && now >= s.forgets[s.fhead].at {
		s.OnAckAcked(s.forgets[s.fhead].pn)
		s.fhead, s.fnum = (s.fhead+1)%heldForgets, s.fnum-1
	}
	train := !s.any || now-s.lastArrival >= trainGap
	s.lastArrival = max(s.lastArrival, now)
	newest := !s.any || pn > s.largest
	s.received.Add(pn, pn+1)
	for s.received.Len() > limit {
		s.floor = s.received.First().End
		s.received.DropLowest()
	}
	if s.multi {
		s.unsent.Add(pn, pn+1)
		s.unsent.RemoveBelow(s.floor)
		for s.unsent.Len() > maxTrackedRangesMulti {
			s.unsent.DropLowest()
		}
	}
	if !s.any || pn > s.largest {
		s.largest, s.largestAt, s.any = pn, now, true
	}
	s.pending = true
	if !eliciting {
		return
	}
	s.eliciting++
	if due := (s.eliciting+s.carried)%every == 0; newest && s.timed && !s.multi && (train || due) {
		s.addPoint(ackPoint{pn: pn, at: now, due: due})
	}
	top := s.received.Last()
	s.lastDelay = ackDelay
	if outOfOrder || s.eliciting+s.carried >= every && now >= s.holdUntil || (!s.multi && s.received.Len() > 1 && top.Len() < freshHole) {
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
// they would without it. With the arrivals timed, the flight's next
// ACK then waits an ack delay (holdUntil) and carries its points.
//
// The marked packet is also a point the ACK falls due at: a host that
// takes packets in batches (a socket read, an emulator's writer that
// woke late) hands over the rest of its batch before the ACK leaves, and
// the ACK then answers the batch's last packet at the batch's arrival.
// Timed from there, the flight's first batch fell out of the train:
// the flight's bytes after it over the span to the last arrival, a
// partial batch, read as half the link (LEO's 24-packet flight in
// batches 2-3 ms apart: 42-63 of 100 Mbit/s).
func (s *ReceivedPacketHandler) AckAtOnce() {
	if s.pending && s.eliciting > 0 {
		s.immediate, s.extra = true, true
		if s.timed && !s.multi {
			s.holdUntil = s.lastArrival + s.lastDelay
			if s.npoints > 0 && s.points[s.npoints-1].pn == s.largest {
				s.points[s.npoints-1].due = true
			} else {
				s.addPoint(ackPoint{pn: s.largest, at: s.largestAt, due: true})
			}
		}
	}
}

// Holding reports whether the flight's ACKs are held at now: within an
// ack delay after a timing mark (AckAtOnce), while its points gather.
func (s *ReceivedPacketHandler) Holding(now time.Duration) bool { return now < s.holdUntil }

// SetTimed says whether the arrival times OnReceived is given are when
// the host received the packets (kernel receive timestamps), not when it
// handed them over: only such arrivals make points (ackPoint). A batch
// handed over at once without them arrives at one time, and its points
// would time the host's hold as the path.
func (s *ReceivedPacketHandler) SetTimed(on bool) { s.timed = on }

// addPoint notes that an ACK of pn would time the path (ackPoint). When
// the points are full the newest replaces the last: the first ones
// hold the start of the train, and the widest span times it best.
func (s *ReceivedPacketHandler) addPoint(p ackPoint) {
	if s.npoints == maxAckPoints {
		s.npoints--
	}
	s.points[s.npoints] = p
	s.npoints++
}

// Points calls add for each point (ackPoint) below the largest packet
// received, oldest first, with the ranges of rs (an ACK frame's, highest
// first) at or below it, cut at it; the slice is reused. Only for a late
// ACK, one that fell due at an earlier packet: an ACK that leaves when
// due times the path itself, and a train's start added to it would
// change what every ACK of a quiet host says. None while the ACK budget
// holds ACKs back: a narrow return link's ACKs stay small.
func (s *ReceivedPacketHandler) Points(rs []wire.AckRange, add func(at time.Duration, ranges []wire.AckRange)) {
	if s.deferred || s.multi || !slices.ContainsFunc(s.points[:s.npoints], func(p ackPoint) bool { return p.due && p.pn < s.largest }) {
		return
	}
	for _, p := range s.points[:s.npoints] {
		if p.pn >= s.largest {
			break
		}
		s.pointScratch = s.pointScratch[:0]
		for _, r := range rs {
			if r.Smallest > p.pn {
				continue
			}
			s.pointScratch = append(s.pointScratch, wire.AckRange{Smallest: r.Smallest, Largest: min(r.Largest, p.pn)})
		}
		// Left out: a point below more holes than it may list (its
		// frame would cost what the ACK does), or whose packet the
		// ACK's ranges do not hold (cut for room).
		if n := len(s.pointScratch); n == 0 || n > maxPointRanges || s.pointScratch[0].Largest != p.pn {
			continue
		}
		add(p.at, s.pointScratch)
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
	s.npoints = 0
}

// OnAckAcked: the peer has our ACK whose largest was largest; it knows
// every hole below, so we may forget them.
func (s *ReceivedPacketHandler) OnAckAcked(largest uint64) {
	if largest+1 > s.floor {
		s.floor = largest + 1
		s.received.RemoveBelow(s.floor)
		s.unsent.RemoveBelow(s.floor)
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

// noteLate records that pn arrived with several paths: a packet that
// follows the newest run's packet extends that run (its range holds
// both), any other begins a run, which replaces the oldest.
func (s *ReceivedPacketHandler) noteLate(pn uint64) {
	k := (s.nlate - 1) % lateFills
	if s.nlate == 0 || pn != s.late[k]+1 {
		k = s.nlate % lateFills
		s.nlate++
	}
	s.late[k] = pn
}

// OnAckRanges notes that an ACK with the ranges rs (highest first) is
// sent: the arrivals it holds are no longer unsent (multiRanges).
func (s *ReceivedPacketHandler) OnAckRanges(rs []wire.AckRange) {
	for _, r := range rs {
		if s.unsent.Empty() {
			return
		}
		s.unsent.Remove(r.Smallest, r.Largest+1)
	}
}

// multiRanges is Ranges with several paths (see maxTrackedRangesMulti),
// highest first.
func (s *ReceivedPacketHandler) multiRanges() []wire.AckRange {
	n := s.received.Len()
	idx := s.idx[:0]
	// Every arrival no ACK reported, newest first: an unsent range lies
	// within one received range, and they descend together.
	top, _ := s.received.Index(s.largest)
	idx = append(idx, top)
	for u := s.unsent.Len() - 1; u >= 0 && len(idx) < maxUnsentRanges; u-- {
		if i, ok := s.received.Index(s.unsent.At(u).Start); ok && i != top && i != idx[len(idx)-1] {
			idx = append(idx, i)
		}
	}
	add := func(i int) {
		if len(idx) < maxAckRanges && !slices.Contains(idx, i) {
			idx = append(idx, i)
		}
	}
	runs := min(s.nlate, lateFills)
	for k := 0; k < runs && len(idx) < maxAckRanges; k++ { // newest first
		if i, ok := s.received.Index(s.late[(s.nlate-1-k)%lateFills]); ok {
			add(i)
		}
	}
	for i := n - 1; i >= 0 && len(idx) < maxAckRanges; i-- {
		add(i)
	}
	slices.SortFunc(idx, func(a, b int) int { return b - a })
	for _, i := range idx {
		r := s.received.At(i)
		s.scratch = append(s.scratch, wire.AckRange{Smallest: r.Start, Largest: r.End - 1})
	}
	s.idx = idx
	return s.scratch
}
