package streams

// This file owns the bound on received stream ranges: each stream keeps
// the ranges it received above what the application read (a Set with O(n)
// inserts), and a peer sending sparse frames (one byte here, one byte a
// little further) could make every stream hold as many ranges as its
// window has bytes, and every insert cost a copy of them all.
//
// A packet whose stream frames would leave a stream with more than
// MaxStreamRanges ranges, or the association with more than
// MaxAssocRanges, is dropped before it is recorded: it is not
// acknowledged, so an honest sender retransmits it after the holes below
// it are repaired, and nothing is lost. A peer that keeps sending such
// packets (MaxRangeStrikes of them without the association's count ever
// falling back to half the bound) is abusing it, and the association
// closes (scps/recvranges.go).

import (
	"errors"
	"fmt"

	"scpsvpn/scps/internal/wire"
)

const (
	// MaxStreamRanges bounds one stream's received ranges: far more holes
	// than loss leaves in a window (1% of 4 BDPs of GEO packets is ~20).
	MaxStreamRanges = 1024
	// MaxAssocRanges bounds them over all streams of the association.
	MaxAssocRanges = 8192
	// MaxRangeStrikes is how many packets in a row may be dropped for the
	// bounds before the association is closed as abused.
	MaxRangeStrikes = 4096
)

// ErrRangesFull: a packet was dropped unacknowledged because its stream
// frames would leave too many received ranges (scps.ErrRangesFull).
var ErrRangesFull = errors.New("scps: received ranges full")

// RecvdChanged accounts a change of s.Recvd, whose length was before.
func (m *Manager) RecvdChanged(s *State, before int) {
	m.RecvRanges += s.recvd.Len() - before
	if m.RangeStrikes > 0 && m.RecvRanges <= MaxAssocRanges/2 {
		m.RangeStrikes = 0
	}
}

// NewRange counts, for the receive path's validation, a STREAM frame that
// would add a range, and tells whether the packet's frames so far (fresh,
// counted in *fresh) would break a bound. It changes nothing. Counting
// every fresh range of the packet against each stream's bound errs on the
// safe side by at most the packet's other streams' frames.
func (m *Manager) NewRange(f *wire.Frame, fresh *int) error {
	if len(f.Data) == 0 {
		return nil
	}
	s := m.ByID[f.StreamID]
	have := 0
	if s != nil {
		if s.Aborted() || s.readClosed {
			return nil // dropped on arrival, nothing kept
		}
		end := f.Offset + uint64(len(f.Data))
		start := max(f.Offset, s.readOff)
		if end <= start || s.recvd.Touches(start, end) {
			return nil // merges with what is there
		}
		have = s.recvd.Len()
	}
	*fresh++
	if have+*fresh > MaxStreamRanges {
		return fmt.Errorf("%w: stream %d would hold more than %d received ranges", ErrRangesFull, f.StreamID, MaxStreamRanges)
	}
	if m.RecvRanges+*fresh > MaxAssocRanges {
		return fmt.Errorf("%w: the association would hold more than %d received ranges", ErrRangesFull, MaxAssocRanges)
	}
	return nil
}
