package streams

// This file owns Window, the auto-tuned size shared by the three kinds of
// flow-control windows: a stream's receive window and the association's
// (credit granted to the peer) and a stream's send buffer (what the
// application may have written but not yet had acknowledged). Each starts
// at a size from the configured link (or a floor when nothing is known) and
// doubles while what drains through it in a smoothed RTT fills half of it,
// the auto-tuning of quic-go's flow controller: a window that limits the
// transfer grows until the bandwidth-delay product fits twice, whatever
// rate the link turns out to have. Nothing grows while nothing drains: a
// stalled writer's buffer stays where it was, and a stalled reader's
// window shrinks (readerstall.go).

import "time"

// Window is the auto-tuned size of one flow-control window.
type Window struct {
	Size       uint64
	EpochStart time.Duration // when the current measurement began
	EpochOff   uint64        // drain offset then
}

func (w *Window) Init(size uint64, now time.Duration, off uint64) {
	w.Size, w.EpochStart, w.EpochOff = size, now, off
}

// Update ends a measurement epoch at drain offset off: the window doubles,
// up to limit, when more than half of it drained per smoothed RTT since
// the epoch began.
func (w *Window) Update(off, limit uint64, now, srtt time.Duration) {
	elapsed := now - w.EpochStart
	drained := off - w.EpochOff
	if w.Size < limit && drained > 0 && float64(drained)*2*srtt.Seconds() >= float64(w.Size)*elapsed.Seconds() {
		w.Size = min(2*w.Size, limit)
	}
	w.EpochStart, w.EpochOff = now, off
}
