package tunnel

// This file splits the endpoint's memory budget ([interface] memory)
// among its parts, as configs/memory.go lays out: the netstack's TCP
// buffers and held packets take a quarter, the peers the rest, evenly;
// each peer's part goes to its receive queue (peerrx.go) and its
// association, within which the streams share it (scps/memory.go).
// configs makes sure the budget gives every peer what it needs. A reload
// that changes the number of peers splits the budget again: every peer's
// part changes, its running association's too (scps.Session.SetMemory).
// The copy buffers of the flows are sized so that every flow the endpoint
// may carry can hold its two.

import (
	"sync"

	"scpsvpn/configs"
	"scpsvpn/scps"
	"scpsvpn/scps/settings"
)

// stackMemory is the netstack's part of the budget.
func stackMemory(total int64) int64 { return configs.StackMemory(total) }

// peerMemory is one peer's part of the budget.
type peerMemory struct {
	assoc   uint64 // its association's (scps.Config.Memory); 0 = no budget
	rxQueue int64  // its receive queue's, in bytes of packet buffers
}

// splitPeerMemory splits one peer's part of a budget of total bytes (0:
// no budget) with peers peers configured. The receive queue takes what
// the association does not need, between configs.MinRxQueueMemory and
// rxQueueMax.
func splitPeerMemory(total int64, peers int) peerMemory {
	if total == 0 {
		return peerMemory{rxQueue: rxQueueMax}
	}
	p := configs.PeerMemory(total, peers)
	rx := min(max(p-scps.MinMemory, configs.MinRxQueueMemory), rxQueueMax)
	return peerMemory{assoc: uint64(max(p-rx, scps.MinMemory)), rxQueue: rx}
}

// Copy buffer sizes: large ones save work at high rates; small ones when
// the budget per flow is small (a flow holds its two while it lives).
const (
	largeCopyBuf        = 64 << 10
	smallCopyBuf        = 16 << 10
	largeCopyBufPerFlow = 256 << 10 // budget per flow from which flows use large buffers
)

var (
	largeCopyBufs = sync.Pool{New: func() any { b := make([]byte, largeCopyBuf); return &b }}
	smallCopyBufs = sync.Pool{New: func() any { b := make([]byte, smallCopyBuf); return &b }}
)

// copyBufPool is the pool of the flows' copy buffers for a budget of total
// bytes (0: none) and at most maxFlows flows.
func copyBufPool(total int64, maxFlows int) *sync.Pool {
	if total == 0 || total/int64(max(maxFlows, 1)) >= largeCopyBufPerFlow {
		return &largeCopyBufs
	}
	return &smallCopyBufs
}

// peerStreams is how many streams a peer may have open at once: as many
// flows as the endpoint carries (max_flows), not the transport's default,
// which held a site's 4,097th concurrent connection back behind the
// others. The memory budget may lower it further (scps.Config.Memory).
func peerStreams(maxFlows int) int {
	return min(max(maxFlows, scps.DefaultMaxStreams), settings.MaxStreams)
}
