package scps

// This file owns window, the auto-tuned size shared by the three kinds of
// flow-control windows: a stream's receive window and the association's
// (credit granted to the peer) and a stream's send buffer (what the
// application may have written but not yet had acknowledged). Each starts
// at a size from the configured link (or a floor when nothing is known) and
// doubles while what drains through it in a smoothed RTT fills half of it,
// the auto-tuning of quic-go's flow controller: a window that limits the
// transfer grows until the bandwidth-delay product fits twice, whatever
// rate the link turns out to have. Nothing grows while nothing drains: a
// stalled reader's window, or a stalled writer's buffer, stays where it was.

import "time"

type window struct {
	size       uint64
	epochStart time.Duration // when the current measurement began
	epochOff   uint64        // drain offset then
}

func (w *window) init(size uint64, now time.Duration, off uint64) {
	w.size, w.epochStart, w.epochOff = size, now, off
}

// update ends a measurement epoch at drain offset off: the window doubles,
// up to limit, when more than half of it drained per smoothed RTT since
// the epoch began.
func (w *window) update(off, limit uint64, now, srtt time.Duration) {
	elapsed := now - w.epochStart
	drained := off - w.epochOff
	if w.size < limit && drained > 0 && float64(drained)*2*srtt.Seconds() >= float64(w.size)*elapsed.Seconds() {
		w.size = min(2*w.size, limit)
	}
	w.epochStart, w.epochOff = now, off
}
