package peers

import (
	"testing"
	"time"
)

// TestReplayWindowBondedLag: a packet of a GEO bonded beside a LEO arrives
// behind every packet the LEO carried meanwhile; the window must take it,
// and once only.
func TestReplayWindowBondedLag(t *testing.T) {
	const (
		leoRate   = 100e6 / 8 / 1472 // packets/s of a LEO at 100 Mbit/s
		leoOneWay = 20 * time.Millisecond
		geoOneWay = 300 * time.Millisecond // a GEO's 600 ms RTT
		geoQueue  = 600 * time.Millisecond // its modem's queue, one RTT
	)
	lag := uint64(leoRate * (geoOneWay + geoQueue - leoOneWay).Seconds())
	var w replayWindow
	hi := uint64(1 << 20)
	if !w.update(hi) {
		t.Fatal("first counter refused")
	}
	for _, d := range []uint64{lag / 4, lag / 2, lag} {
		if !w.check(hi-d) || !w.update(hi-d) {
			t.Fatalf("a GEO packet %d counters behind the LEO's refused (window %d)", d, ReplayWindow)
		}
		if w.update(hi - d) {
			t.Fatalf("the second copy of a packet %d behind accepted", d)
		}
	}
	if w.update(hi - ReplayWindow) {
		t.Fatal("a packet a whole window behind accepted")
	}
}
