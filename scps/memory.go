package scps

// This file owns memBudget, the association's memory budget
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
// stream may always buffer sendFloor bytes of its own, so a short request
// gets out however full the budget is: the bound is Memory plus sendFloor
// per stream.

import "fmt"

// sendFloor is what any stream may buffer for sending whatever the budget
// says: a request, a reply header.
const sendFloor = lightThreshold

type memBudget struct {
	limit       uint64 // Config.Memory; 0 = no budget
	sendHeld    uint64 // bytes written and not yet acknowledged, all streams
	recvGranted uint64 // streams' receive credit not yet read beyond the initial (streamState.credited)
	waiters     []*streamState
}

// sendShare is the most one of n streams may buffer for sending: an eighth
// of the budget split evenly, at least sendFloor.
func (m *memBudget) sendShare(n int) uint64 {
	return max(m.limit/8/uint64(max(n, 1)), sendFloor)
}

// sendFree is how much more all send buffers together may take: at most an
// eighth of the budget, and what the receive credit outstanding (recvHeld)
// leaves.
func (m *memBudget) sendFree(recvHeld uint64) uint64 {
	used := m.sendHeld + recvHeld
	if m.sendHeld >= m.limit/8 || used >= m.limit {
		return 0
	}
	return min(m.limit/8-m.sendHeld, m.limit-used)
}

// recvHold is how far connection credit may reach beyond what the
// application consumed: the budget less the send buffers, at least seven
// eighths of it.
func (m *memBudget) recvHold() uint64 {
	return m.limit - min(m.sendHeld, m.limit/8)
}

// sendSpace is how many more bytes s's send buffer accepts: its own
// window, its share of the budget, and what the budget has free beyond
// its floor. budget reports that the budget, not s's own window, was the
// limit (growing s's own window would not help).
func (a *Association) sendSpace(s *streamState) (space int, budget bool) {
	space = s.sendSpace()
	m := &a.mem
	if m.limit == 0 {
		return space, false
	}
	held := s.writeOff - s.ackedPrefix
	limit := int(m.sendShare(len(a.streams.byID))) - int(held)
	if held >= sendFloor {
		limit = min(limit, int(m.sendFree(a.flow.recvMax-a.flow.consumed)))
	} else {
		limit = max(limit, int(sendFloor-held))
	}
	if limit < space {
		return limit, true
	}
	return space, false
}

// waitForBudget records that s's writer waits for the budget to free up.
func (a *Association) waitForBudget(s *streamState) {
	if !s.budgetWait {
		s.budgetWait = true
		a.mem.waiters = append(a.mem.waiters, s)
	}
}

// budgetReleased wakes writers waiting for the budget once some of it is
// free (acknowledged data, reads or resets released memory): the longest
// waiting first, as many as a share each can serve, so thousands of
// stalled writers are not all woken for every acknowledgement. A writer
// that still finds no room waits again at the back.
func (a *Association) budgetReleased() {
	m := &a.mem
	if len(m.waiters) == 0 {
		return
	}
	free := m.sendFree(a.flow.recvMax - a.flow.consumed)
	share := m.sendShare(len(a.streams.byID))
	i := 0
	for ; i < len(m.waiters) && free > 0; i++ {
		s := m.waiters[i]
		s.budgetWait = false
		if !s.gone && s.writeWait {
			s.writeWait = false
			a.notify(s)
			free -= min(free, share)
		}
	}
	n := copy(m.waiters, m.waiters[i:])
	clear(m.waiters[n:])
	m.waiters = m.waiters[:n]
}

// sendReleased accounts n bytes of send buffer acknowledged (or dropped
// by a reset).
func (a *Association) sendReleased(n uint64) {
	a.mem.sendHeld -= n
	a.budgetReleased()
}

// recvWindowLimit is how far s's receive window may reach now: the
// configured limit, and with a budget the initial credit plus s's even
// share of an eighth of the budget, and what that eighth has left beside
// the other streams' credit; never below the initial credit.
func (a *Association) recvWindowLimit(s *streamState) uint64 {
	l := a.cfg.streamWindowLimit()
	if m := &a.mem; m.limit > 0 {
		pool := m.limit / 8
		share := pool / uint64(max(len(a.streams.byID), 1))
		others := m.recvGranted - s.credited
		left := uint64(0)
		if others < pool {
			left = pool - others
		}
		l = max(min(l, InitialStreamCredit+min(share, left)), InitialStreamCredit)
	}
	return l
}

// recvAccount updates s's part of the streams' receive credit: what it
// was granted beyond the initial credit and has not read, none once it was
// aborted or closed.
func (a *Association) recvAccount(s *streamState) {
	var c uint64
	if !s.aborted() && !s.readClosed && !s.gone {
		end := s.recvMax
		if s.finKnown {
			end = min(end, s.finalSize)
		}
		if end > s.readOff+InitialStreamCredit {
			c = end - s.readOff - InitialStreamCredit
		}
	}
	a.mem.recvGranted += c - s.credited
	s.credited = c
}

// connHold is how far the association's credit may reach beyond what the
// application consumed (connFlow.maybeCredit).
func (a *Association) connHold() uint64 {
	l := a.cfg.connWindowLimit()
	if a.mem.limit > 0 {
		l = min(l, a.mem.recvHold())
	}
	return l
}

// SetMemory changes the memory budget (Config.Memory) of a running
// association: an endpoint re-splits its budget when peers come or go.
// Nothing is dropped or taken back to fit a smaller budget: credit already
// granted stays (RFC 9000 §4.1) and send buffers keep what they hold.
// What follows the new limit is what comes next: send buffers accept data
// only within it, receive windows and the association's credit grow only
// within it, and the peer's stream limit (MAX_STREAMS) is raised only as
// far as it fits. So the association is back within a smaller budget once
// the data it held then is read or acknowledged. A larger budget wakes the
// writers waiting for room at once. 0 (no budget) and a budget below
// MinMemory are refused, as Config.Validate refuses them.
func (a *Association) SetMemory(limit uint64) error {
	if limit < MinMemory || limit > 1<<40 || a.mem.limit == 0 {
		return fmt.Errorf("scps: set memory %d: an association with a budget takes %d bytes to 1 TiB", limit, MinMemory)
	}
	a.cfg.Memory = limit
	a.mem.limit = limit
	a.streams.maxStreams = a.cfg.streamLimit()
	a.streams.maybeMaxStreams()
	a.budgetReleased()
	return nil
}
