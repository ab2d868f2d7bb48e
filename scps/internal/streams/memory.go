package streams

// This file owns MemBudget, the association's memory budget
// (Config.Memory): the bytes its streams may hold, unacknowledged in send
// buffers and unconsumed or granted in receive credit, shared fairly by the
// streams. It is enforced by what we accept and grant, never by dropping
// data: a send buffer accepts no more than the stream's share and what the
// budget has free, a receive window shrinks to its stream's share before
// credit is granted, and the association's credit (connflow.go) never
// reaches beyond what the budget leaves after the send buffers. Credit
// already granted is never taken back (RFC 9000 §4.1), so a stream that
// got a large share while few streams were open keeps it until it is
// read; new grants make up for it.
//
// The budget is split so that streams which stop reading do not take the
// credit a new stream needs. Send buffers take at most an eighth of it, so
// the association's credit may reach seven eighths beyond what was
// consumed. Every stream has the protocol's initial credit
// (InitialStreamCredit) whatever we grant, so the peer's stream count is
// capped to fit three quarters of the budget at that credit
// (Config.streamLimit); what streams are granted beyond it, and have not
// read, is held to an eighth. Stalled streams therefore leave at least an
// eighth of the budget for data in flight and new streams, unless the send
// buffers are full and the peer has the most streams open at once. Every
// stream may always buffer SendFloor bytes of its own, so a short request
// gets out however full the budget is: the bound is Memory plus
// SendFloor per stream.

import "scpsvpn/scps/settings"

// SendFloor is what any stream may buffer for sending whatever the budget
// says: a request, a reply header.
const SendFloor = LightThreshold

// MemBudget is the account of the association's memory budget; the
// association applies it (scps/memory.go).
type MemBudget struct {
	Limit       uint64 // Config.Memory; 0 = no budget
	SendHeld    uint64 // bytes written and not yet acknowledged, all streams
	RecvGranted uint64 // streams' receive credit not yet read beyond the initial (State.Credited)
	Waiters     []*State
}

// SendShare is the most one of n streams may buffer for sending: an eighth
// of the budget split evenly, at least SendFloor.
func (m *MemBudget) SendShare(n int) uint64 {
	return max(m.Limit/8/uint64(max(n, 1)), SendFloor)
}

// SendFree is how much more all send buffers together may take: at most an
// eighth of the budget, and what the receive credit outstanding (recvHeld)
// leaves.
func (m *MemBudget) SendFree(recvHeld uint64) uint64 {
	used := m.SendHeld + recvHeld
	if m.SendHeld >= m.Limit/8 || used >= m.Limit {
		return 0
	}
	return min(m.Limit/8-m.SendHeld, m.Limit-used)
}

// RecvHold is how far connection credit may reach beyond what the
// application consumed: the budget less the send buffers, at least seven
// eighths of it.
func (m *MemBudget) RecvHold() uint64 {
	return m.Limit - min(m.SendHeld, m.Limit/8)
}

// SendSpace is how many more bytes s's send buffer accepts: its own
// window, its share of the budget split among n streams, and what the
// budget has free beyond its floor (with recvHeld bytes of receive credit
// outstanding). budget reports that the budget, not s's own window, was
// the limit (growing s's own window would not help).
func (m *MemBudget) SendSpace(s *State, n int, recvHeld uint64) (space int, budget bool) {
	space = s.SendSpace()
	if m.Limit == 0 {
		return space, false
	}
	held := s.writeOff - s.ackedPrefix
	limit := int(m.SendShare(n)) - int(held)
	if held >= SendFloor {
		limit = min(limit, int(m.SendFree(recvHeld)))
	} else {
		limit = max(limit, int(SendFloor-held))
	}
	if limit < space {
		return limit, true
	}
	return space, false
}

// Wait records that s's writer waits for the budget to free up.
func (m *MemBudget) Wait(s *State) {
	if !s.budgetWait {
		s.budgetWait = true
		m.Waiters = append(m.Waiters, s)
	}
}

// Account updates s's part of the streams' receive credit: what it was
// granted beyond the initial credit and has not read, none once it was
// aborted or closed.
func (m *MemBudget) Account(s *State) {
	var c uint64
	if !s.Aborted() && !s.readClosed && !s.gone {
		end := s.recvMax
		if s.finKnown {
			end = min(end, s.finalSize)
		}
		if end > s.readOff+settings.InitialStreamCredit {
			c = end - s.readOff - settings.InitialStreamCredit
		}
	}
	m.RecvGranted += c - s.credited
	s.credited = c
}
