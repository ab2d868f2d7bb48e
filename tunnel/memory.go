package tunnel

// This file splits the endpoint's memory budget ([interface] memory)
// among its parts: the netstack's TCP buffers take a quarter, the
// associations the rest, evenly per configured peer (each at least what
// the transport needs, scps.MinMemory); within an association the streams
// share it (scps/memory.go). The copy buffers of the flows are sized so
// that every flow the endpoint may carry can hold its two.

import (
	"sync"

	"scpsvpn/scps"
	"scpsvpn/scps/settings"
)

// stackMemory is the netstack's part of the budget.
func stackMemory(total int64) int64 { return total / 4 }

// assocMemory is one association's part of the budget when peers peers
// are configured; 0 (no budget) without one.
func assocMemory(total int64, peers int) uint64 {
	if total == 0 {
		return 0
	}
	return max(uint64(total-stackMemory(total))/uint64(max(peers, 1)), scps.MinMemory)
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
