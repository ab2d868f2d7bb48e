package streams

// This file owns the cut of a stream's receive credit when its reader
// falls behind. Credit granted ahead of the reader is what lets a fresh
// stream start at the link's rate (window.go), but a reader that stops
// would otherwise keep all of it, and every byte of it would cross the
// link for nobody: ten downloads whose clients stopped reading took 21 MB
// of a 10 Mbit/s link (38 MB with the rate configured), the fresh
// download beside them a third of it. So once in-order data has waited
// unread for stallAfter without the reader ever catching up, the
// stream's window falls to twice what the reader drained meanwhile per
// smoothed RTT, at least StallWindow, and its credit to what already
// arrived or the window beyond what was read, whichever is more: the
// MAX_STREAM_DATA that says so withdraws credit the sender has not used
// (spec.md), and the stream holds what was in flight when the sender
// heard it and the window. Reading grows the window again as window.go
// says: a reader that catches up regains it, a slow one keeps about
// twice what it drains in a round trip, so it costs the link its read
// rate.

import (
	"time"

	"scpsvpn/scps/settings"
)

// minStallAfter is the least time data must wait unread before the
// reader counts as behind: scheduling delays of a busy endpoint's copy
// loop stay below it.
const minStallAfter = 100 * time.Millisecond

// stallAfter is how long in-order data must wait unread before the
// reader counts as behind: a smoothed RTT, at least minStallAfter. A
// fast reader whose local connection hiccups on a busy machine keeps its
// window; one that has not caught up for a round trip has fallen behind
// the link, and meanwhile takes at most the credit it had.
func stallAfter(srtt time.Duration) time.Duration {
	return max(srtt, minStallAfter)
}

// StallWindow is the least window of a stream whose reader fell behind,
// the one of a reader that stopped: what it may hold beyond what was
// read and what was in flight, the protocol's initial stream credit.
const StallWindow = settings.InitialStreamCredit

// readAt notes a read: once nothing waits, the reader has caught up.
func (s *State) readAt() {
	if s.Contiguous() == s.readOff {
		s.waiting = false
	}
}

// checkReader, after data arrived on s, starts the clock of data waiting
// unread, or once data has waited stallAfter without the reader ever
// catching up, cuts s's window to what the reader drained meanwhile:
// twice its rate times srtt, at least StallWindow. A reader that keeps
// up empties what waits now and then; one that works through a burst
// drains far more than its window meanwhile and keeps it.
func (m *Manager) checkReader(s *State, now, srtt time.Duration) {
	if s.Contiguous() == s.readOff {
		s.waiting = false
		return
	}
	if !s.waiting {
		s.waiting, s.waitSince, s.waitOff = true, now, s.readOff
		return
	}
	waited := now - s.waitSince
	if waited < stallAfter(srtt) {
		return
	}
	size := uint64(2 * float64(s.readOff-s.waitOff) * srtt.Seconds() / waited.Seconds())
	m.CutCredit(s, now, max(size, StallWindow))
}

// CutCredit shrinks s's receive window to size (restarting its
// measurement) if it is larger, and withdraws the credit beyond what
// arrived or the window beyond what was read. It never reaches below
// what was granted before for data that arrived.
func (m *Manager) CutCredit(s *State, now time.Duration, size uint64) {
	if s.finKnown || s.Aborted() || s.readClosed {
		return
	}
	if s.recvWin.Size > size {
		s.recvWin.Init(size, now, s.readOff)
		s.cut = true
	}
	if limit := max(s.highestRecv, s.readOff+s.recvWin.Size); limit < s.recvMax {
		s.recvMax = limit
		s.maxDataQueued = true
		m.ScheduleCtrl(s)
		m.Mem.Account(s)
	}
}
