// replay.go owns the sliding anti-replay window of a receive session
// (RFC 6479 style): a ring of 64-bit words, so moving the window forward
// clears whole words instead of shifting a bit array.

package peers

const (
	// One session carries every path of a peer, so a packet sent on a
	// slow path arrives behind all those the fast paths sent meanwhile:
	// a GEO beside a LEO at 100 Mbit/s (8,500 packets/s) arrives some
	// 1,200-2,400 counters behind (its extra one-way delay), thousands
	// more with its queue. A window of 1,984 dropped nearly every GEO
	// packet of a bonded download as too old (the GEO's checks went
	// unanswered, the path down most of the time, 0.5-3% of the data).
	// 32,704 packets: 3.8 s of reordering at 100 Mbit/s, 0.38 s at
	// 1 Gbit/s, for 4 KB per session.
	replayWords     = 512 // 32768 bits of bitmap
	replayBlockBits = 64  // bits per word
	replayRingBits  = replayWords * replayBlockBits
	// ReplayWindow is how far behind the highest counter seen a packet may
	// arrive and still be accepted. One word of the ring is sacrificed so
	// that advancing never clears bits still inside the window.
	ReplayWindow = replayRingBits - replayBlockBits
)

// replayWindow is not safe for concurrent use; the session serialises it.
type replayWindow struct {
	last   uint64 // highest counter accepted
	any    bool   // whether any counter was accepted
	bitmap [replayWords]uint64
}

// check reports whether counter would be accepted, without recording it.
func (w *replayWindow) check(counter uint64) bool {
	if !w.any || counter > w.last {
		return true
	}
	if w.last-counter >= ReplayWindow {
		return false
	}
	word := (counter / replayBlockBits) % replayWords
	return w.bitmap[word]&(1<<(counter%replayBlockBits)) == 0
}

// update records counter and reports whether it was fresh.
func (w *replayWindow) update(counter uint64) bool {
	if !w.any {
		w.any = true
		w.last = counter
	} else if counter > w.last {
		cur := w.last / replayBlockBits
		next := counter / replayBlockBits
		diff := next - cur
		if diff > replayWords {
			diff = replayWords
		}
		for i := uint64(1); i <= diff; i++ {
			w.bitmap[(cur+i)%replayWords] = 0
		}
		w.last = counter
	} else if w.last-counter >= ReplayWindow {
		return false
	}
	word := (counter / replayBlockBits) % replayWords
	bit := uint64(1) << (counter % replayBlockBits)
	if w.bitmap[word]&bit != 0 {
		return false
	}
	w.bitmap[word] |= bit
	return true
}
