package streams

// This file owns the credit a stream gets beyond its window while a hole
// holds its reader long. A stream's credit reaches its window beyond what
// was read, and moves only as the application reads (manager.go,
// MaybeStreamCredit): a hole stops the reads, so the sender may send no
// further than the credit it had when the hole came, until the repair
// fills it and the credit that follows comes back. That takes a round
// trip (the packet's way there, the credit's way back) and a repair
// round trip, with its loss detection, per time the packet was sent:
// about 3 round trips when its repair is lost, 4 when it is lost twice
// (2.42 s on told GEO, 600 ms, in the simulator). A told window of four
// bandwidth-delay products, moved by quarters, leaves three ahead of the
// reader at the least: a repair lost twice on told GEO (10 Mbit/s)
// stopped the sender 0.40-0.45 s through the binary and 0.45 s in the
// simulator, on the stream's credit (scps TestRepairLostTwiceKeepsSending).
//
// So, told the rate (Manager.HoleCredit), what waits behind a hole
// beyond a quarter of the window (a repair round trip's worth: the holes
// a first repair fills stay about there) adds to the credit, up to half
// the window: a stream holds at most its window and half of it beyond
// what was read, never beyond how far its window may reach (the
// configured cap, its share of the memory budget: RecvWindowLimit), and
// the association's credit and budget bound them all as before
// (connflow.go, memory.go). Credit so granted is not taken back; once
// the repair arrives the reads move the credit on as before.
//
// A window made larger instead (six products, or moved by eighths) let in
// more than the congestion controllers of a fading or a bonded link hold
// back (TestFadeSmallQueue, TestBondHybla), and moved by eighths it cost
// a told link with stalls at its near end and untold downloads a little
// (TestToldNearEndStalls, TestUntoldDownloadNearItsBound,
// TestPathTrainFromTheInitiator); a hole that holds the reader long is
// rare, and the extra credit comes only then. Untold, the same rule let
// one association of two sharing a beam take more than its share
// (TestTwoSitesFillBeam), as a window that grew while holes held it did
// before (docs/pageload.md).

const (
	// holeFree: bytes behind a hole up to Size/holeFree take their
	// share of the window, as any.
	holeFree = 4
	// holeExtra: the credit may reach Size/holeExtra beyond the window.
	holeExtra = 2
	// holeStep: the extra credit moves by at least Size/holeStep, so
	// that a hole costs a MAX_STREAM_DATA per step, not per packet.
	holeStep = 16
)

// holeCredit grants s credit beyond its window for the data that waits
// behind a hole beyond holeFree of it (see above); called as data
// arrives.
func (m *Manager) holeCredit(s *State) {
	if !m.HoleCredit || s.finKnown || s.Aborted() || s.readClosed || s.cut {
		return
	}
	limit := m.RecvWindowLimit(s)
	w := min(s.recvWin.Size, limit) // more streams: a smaller share
	behind := s.highestRecv - s.Contiguous()
	if behind <= w/holeFree {
		return
	}
	e := s.readOff + min(w+min(behind-w/holeFree, w/holeExtra), limit)
	if e < s.recvMax+w/holeStep {
		return
	}
	m.grantStream(s, e)
}
