// This file owns the stack's buffer budget (Config.BufferMemory): the
// bytes the TCP endpoints' receive and send buffers may take together.
// A stalled leg fills its buffers (a LAN client that stopped reading, or
// the tunnel waiting for the satellite), so what thousands of stalled
// connections hold is what their buffers allow. Each new connection gets
// a share of what the budget has free: the full auto-tuned range while
// plenty is free, smaller fixed buffers as it fills, never below
// minConnBuffers; what the connections share is at most maxConnBudget. The total stays within the budget plus minConnBuffers
// per connection; a connection keeps its share until it closes. The
// packets held for SYN-cookie connections take a sixteenth of the budget
// (cookieflow.go); the connections share the rest.

package stack

import "gvisor.dev/gvisor/pkg/tcpip"

const (
	// minConnBuffers is the least a connection gets, receive and send
	// together: 16 KiB each way still carries tens of Mbit/s over a LAN
	// leg's sub-millisecond round trip.
	minConnBuffers = 32 << 10
	// fullConnBuffers is what a connection may grow to with auto-tuning,
	// and what it is charged when it gets that.
	fullConnBuffers = rcvBufMax + sndBufMax
	// budgetShareDiv: a new connection gets 1/budgetShareDiv of what is
	// free, so the budget is never taken by the first few connections.
	budgetShareDiv = 16
	// maxConnBudget bounds the part of the budget the connections share
	// however large it is (beyond it, each gets minConnBuffers). A
	// connection's receive window is what its LAN sender may have in
	// flight toward the endpoint: it needs to cover the LAN's round trip
	// and the tunnel's read of it, not the satellite's, whose data waits
	// in the stream's send buffer. With a quarter of a large machine's
	// memory shared the old way, 1,000 servers each filled hundreds of
	// KiB of window at once: far more than the endpoint could read
	// before its TUN queue overflowed, and all of it waited for the
	// satellite anyway.
	maxConnBudget = 32 << 20
)

// chargeBuffers sizes a new connection's buffers from the budget and
// returns what it was charged (0 without a budget).
func (s *Stack) chargeBuffers(ep tcpip.Endpoint) int64 {
	if s.cfg.BufferMemory == 0 {
		return 0
	}
	s.mu.Lock()
	free := max(s.connBudget()-s.bufCharged, 0)
	charge := min(max(free/budgetShareDiv, minConnBuffers), fullConnBuffers)
	s.bufCharged += charge
	s.mu.Unlock()
	if charge < fullConnBuffers {
		// Fixed sizes: auto-tuning could grow them past the share. The
		// send buffer stays within sndBufMax (configureTCP: what a
		// client that stopped reading holds here), the rest of the share
		// goes to the receive buffer.
		snd, rcv := splitCharge(charge)
		ops := ep.SocketOptions()
		ops.SetReceiveBufferSize(rcv, true)
		ops.SetSendBufferSize(snd, true)
	}
	return charge
}

// splitCharge is the fixed send and receive buffer sizes of a connection
// charged charge bytes (below fullConnBuffers): half each, but the send
// buffer at most sndBufMax.
func splitCharge(charge int64) (snd, rcv int64) {
	snd = min(charge/2, sndBufMax)
	return snd, charge - snd
}

// connBudget is the part of the buffer budget the connections share.
func (s *Stack) connBudget() int64 {
	return min(s.cfg.BufferMemory-s.cfg.BufferMemory/cookieHeldShare, maxConnBudget)
}

// BufferCharged is what open connections were charged against the buffer
// budget.
func (s *Stack) BufferCharged() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bufCharged
}
