package tunnel

import (
	"net/netip"
	"testing"
	"time"

	"scpsvpn/scps"
)

// TestPeerRestart: when a site's endpoint dies without a word and comes
// back, the other site notices the new instance in the handshake, resets
// the flows its old association carried, and carries new flows.
func TestPeerRestart(t *testing.T) {
	h, a, b := twoSites(t)
	b.echo(7)
	old := openEcho(t, a, "10.2.0.5:7")
	// b dies: nothing it sends on the way out reaches a.
	h.wire.SetFilter(func(from, to netip.AddrPort) bool { return from != b.wireAddr })
	b.stop()
	h.wire.SetFilter(nil)
	// The flow stays open (a cannot tell a dead peer from a quiet one),
	// but nothing comes back.
	if _, err := old.Write([]byte("x")); err != nil {
		t.Fatalf("write after the peer died: %v", err)
	}
	silent(t, old, 300*time.Millisecond, "read after the peer died")
	b.start(b.peer(a))
	a.waitLog("peer restarted: resetting its streams", nil)
	resetWithin(t, old, "the old association's flow")
	openEcho(t, a, "10.2.0.5:7")
}

// TestOutageOutlivesMaxOutage: a link outage longer than max_outage ends
// the association at both sides (flows reset); a fresh association begins
// with the first handshake once the link is back and carries new flows.
// The outage's times are wall-clock: a loaded machine (the race detector
// beside other packages' tests) left the endpoints silent for over a
// second at times, which with max_outage 1 s ended the fresh association
// too and reset the new flow; 3 s leaves room for such stalls.
func TestOutageOutlivesMaxOutage(t *testing.T) {
	h := newHarness(t)
	a := h.addSite("a", "192.0.2.1:4700", "10.1.0.0/24")
	b := h.addSite("b", "192.0.2.2:4700", "10.2.0.0/24")
	link := "rtt = \"20ms\"\noutage_after = \"1s\"\nprobe_interval = \"100ms\"\nmax_outage = \"3s\""
	a.start(peerSpec{s: b, link: link})
	b.start(peerSpec{s: a, link: link})
	a.waitUp(b)
	b.echo(7)
	old := openEcho(t, a, "10.2.0.5:7")
	h.wire.SetFilter(func(from, to netip.AddrPort) bool { return false })
	a.waitLog("association down", map[string]string{"peer": "b", "reason": "link outage: probing"})
	old.SetReadDeadline(time.Now().Add(waitTime))
	if _, err := old.Read(make([]byte, 1)); !isReset(err) {
		t.Errorf("a flow across an outage longer than max_outage ended with %v, want a reset", err)
	}
	// Both sides give up; their handshakes begin a fresh association
	// once the link is back, and new flows work.
	for _, s := range []struct{ at, peer *site }{{a, b}, {b, a}} {
		s.at.waitLog("association down", map[string]string{"peer": s.peer.name, "reason": scps.ErrOutage.Error()})
	}
	h.wire.SetFilter(nil)
	openEcho(t, a, "10.2.0.5:7")
	a.waitLogN(2, "scps session started", map[string]string{"peer": "b"})
}
