package scps

// This file owns the bound on received stream ranges: each stream keeps
// the ranges it received above what the application read (a Set with O(n)
// inserts), and a peer sending sparse frames (one byte here, one byte a
// little further) could make every stream hold as many ranges as its
// window has bytes, and every insert cost a copy of them all.
//
// A packet whose stream frames would leave a stream with more than
// maxStreamRanges ranges, or the association with more than
// maxAssocRanges, is dropped before it is recorded: it is not acknowledged,
// so an honest sender retransmits it after the holes below it are
// repaired, and nothing is lost. A peer that keeps sending such packets
// (maxRangeStrikes of them without the association's count ever falling
// back to half the bound) is abusing it, and the association is closed.

import (
	"fmt"

	"scpsvpn/scps/internal/streams"
	"scpsvpn/scps/internal/wire"
)

const (
	// maxStreamRanges bounds one stream's received ranges: far more holes
	// than loss leaves in a window (1% of 4 BDPs of GEO packets is ~20).
	maxStreamRanges = 1024
	// maxAssocRanges bounds them over all streams of the association.
	maxAssocRanges = 8192
	// maxRangeStrikes is how many packets in a row may be dropped for the
	// bounds before the association is closed as abused.
	maxRangeStrikes = 4096
)

// recvdChanged accounts a change of s.recvd, whose length was before.
func (a *Association) recvdChanged(s *streams.State, before int) {
	a.streams.RecvRanges += s.Recvd.Len() - before
	if a.rangeStrikes > 0 && a.streams.RecvRanges <= maxAssocRanges/2 {
		a.rangeStrikes = 0
	}
}

// newRange counts, for validate, a STREAM frame that would add a range,
// and tells whether the packet's frames so far (fresh, counted in *fresh)
// would break a bound. It changes nothing. Counting every fresh range of
// the packet against each stream's bound errs on the safe side by at most
// the packet's other streams' frames.
func (a *Association) newRange(f *wire.Frame, fresh *int) error {
	if len(f.Data) == 0 {
		return nil
	}
	s := a.streams.ByID[f.StreamID]
	have := 0
	if s != nil {
		if s.Aborted() || s.ReadClosed {
			return nil // dropped on arrival, nothing kept
		}
		end := f.Offset + uint64(len(f.Data))
		start := max(f.Offset, s.ReadOff)
		if end <= start || s.Recvd.Touches(start, end) {
			return nil // merges with what is there
		}
		have = s.Recvd.Len()
	}
	*fresh++
	if have+*fresh > maxStreamRanges {
		return fmt.Errorf("%w: stream %d would hold more than %d received ranges", ErrRangesFull, f.StreamID, maxStreamRanges)
	}
	if a.streams.RecvRanges+*fresh > maxAssocRanges {
		return fmt.Errorf("%w: the association would hold more than %d received ranges", ErrRangesFull, maxAssocRanges)
	}
	return nil
}

// refuseForRanges drops a packet that would break the bounds and closes the
// association once the peer has kept at it for maxRangeStrikes packets.
func (a *Association) refuseForRanges(pn uint64, why error) error {
	a.stats.RecvRangeDrops++
	a.rangeStrikes++
	if a.rangeStrikes >= maxRangeStrikes {
		a.stats.RangeAbuseCloses++
		return a.protocolError("%d packets in a row would exceed the received-range bounds (last: %v)", a.rangeStrikes, why)
	}
	return fmt.Errorf("packet %d dropped unacknowledged: %w", pn, why)
}
