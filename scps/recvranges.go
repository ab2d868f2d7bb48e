package scps

// This file owns what the association does when a packet would break the
// bound on received stream ranges (streams.MaxStreamRanges,
// streams.MaxAssocRanges; internal/streams/recvranges.go): the packet is
// dropped unacknowledged, and a peer that keeps sending such packets
// (streams.MaxRangeStrikes of them in a row) is abusing it and the
// association closes.

import (
	"fmt"

	"scpsvpn/scps/internal/streams"
)

// refuseForRanges drops a packet that would break the bounds and closes the
// association once the peer has kept at it for streams.MaxRangeStrikes
// packets.
func (a *Association) refuseForRanges(pn uint64, why error) error {
	a.stats.RecvRangeDrops++
	a.streams.RangeStrikes++
	if a.streams.RangeStrikes >= streams.MaxRangeStrikes {
		a.stats.RangeAbuseCloses++
		return a.protocolError("%d packets in a row would exceed the received-range bounds (last: %v)", a.streams.RangeStrikes, why)
	}
	return fmt.Errorf("packet %d dropped unacknowledged: %w", pn, why)
}
