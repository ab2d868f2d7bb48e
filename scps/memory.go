package scps

// This file applies the association's memory budget (Config.Memory), whose
// account and rules are streams.MemBudget's (internal/streams/memory.go):
// what a stream's send buffer may take, waking writers that wait for the
// budget, the receive windows' share and the association's credit.

import (
	"fmt"

	"scpsvpn/scps/internal/streams"
)

// budgetReleased wakes writers waiting for the budget once some of it is
// free (acknowledged data, reads or resets released memory): the longest
// waiting first, as many as a share each can serve, so thousands of
// stalled writers are not all woken for every acknowledgement. A writer
// that still finds no room waits again at the back.
func (a *Association) budgetReleased() {
	m := &a.mem
	if len(m.Waiters) == 0 {
		return
	}
	free := m.SendFree(a.flow.RecvMax - a.flow.Consumed)
	share := m.SendShare(len(a.streams.ByID))
	i := 0
	for ; i < len(m.Waiters) && free > 0; i++ {
		s := m.Waiters[i]
		s.BudgetWait = false
		if !s.Gone && s.WriteWait {
			s.WriteWait = false
			a.notify(s)
			free -= min(free, share)
		}
	}
	n := copy(m.Waiters, m.Waiters[i:])
	clear(m.Waiters[n:])
	m.Waiters = m.Waiters[:n]
}

// sendReleased accounts n bytes of send buffer acknowledged (or dropped
// by a reset).
func (a *Association) sendReleased(n uint64) {
	a.mem.SendHeld -= n
	a.budgetReleased()
}

// recvWindowLimit is how far s's receive window may reach now: the
// configured limit, and with a budget the initial credit plus s's even
// share of an eighth of the budget, and what that eighth has left beside
// the other streams' credit; never below the initial credit.
func (a *Association) recvWindowLimit(s *streams.State) uint64 {
	l := a.cfg.streamWindowLimit()
	if m := &a.mem; m.Limit > 0 {
		pool := m.Limit / 8
		share := pool / uint64(max(len(a.streams.ByID), 1))
		others := m.RecvGranted - s.Credited
		left := uint64(0)
		if others < pool {
			left = pool - others
		}
		l = max(min(l, InitialStreamCredit+min(share, left)), InitialStreamCredit)
	}
	return l
}

// connHold is how far the association's credit may reach beyond what the
// application consumed (streams.ConnFlow.MaybeCredit).
func (a *Association) connHold() uint64 {
	l := a.cfg.connWindowLimit()
	if a.mem.Limit > 0 {
		l = min(l, a.mem.RecvHold())
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
	if limit < MinMemory || limit > 1<<40 || a.mem.Limit == 0 {
		return fmt.Errorf("scps: set memory %d: an association with a budget takes %d bytes to 1 TiB", limit, MinMemory)
	}
	a.cfg.Memory = limit
	a.mem.Limit = limit
	a.streams.SetMaxStreams(a.cfg.streamLimit())
	a.budgetReleased()
	return nil
}
