package scps

// This file owns SetMemory, changing a running association's memory budget
// (Config.Memory). The budget's account is streams.MemBudget's
// (internal/streams/memory.go) and its rules (what a stream's send buffer
// may take, waking writers that wait for the budget, the receive windows'
// share and the association's credit) are streams.Manager's
// (internal/streams/manager.go). Tail parity's buffers take their part
// of the budget first (parityPart, parity.go), the streams share the rest.

import "fmt"

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
	if limit < MinMemory || limit > 1<<40 || a.streams.Mem.Limit == 0 {
		return fmt.Errorf("scps: set memory %d: an association with a budget takes %d bytes to 1 TiB", limit, MinMemory)
	}
	a.cfg.Memory = limit
	a.streams.Mem.Limit = a.cfg.streamMemory()
	a.sizeParity()
	a.streams.SetMaxStreams(a.cfg.streamLimit())
	a.streams.BudgetReleased()
	return nil
}
