package tunnel

import (
	"errors"
	"net"
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
	h.wire.setFilter(func(from, to netip.AddrPort) bool { return from != b.wireAddr })
	b.stop()
	h.wire.setFilter(nil)
	// The flow stays open (a cannot tell a dead peer from a quiet one),
	// but nothing comes back.
	old.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := old.Write([]byte("x")); err != nil {
		t.Fatalf("write after the peer died: %v", err)
	}
	var ne net.Error
	if n, err := old.Read(make([]byte, 1)); n != 0 || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read after the peer died: %d bytes, %v; want nothing", n, err)
	}
	b.start(b.peer(a))
	a.waitLog("peer restarted: resetting its streams", nil)
	old.SetReadDeadline(time.Now().Add(waitTime))
	if _, err := old.Read(make([]byte, 1)); !isReset(err) {
		t.Errorf("the old association's flow ended with %v, want a reset", err)
	}
	openEcho(t, a, "10.2.0.5:7")
}

// TestOutageOutlivesMaxOutage: a link outage longer than max_outage ends
// the association at both sides (flows reset); a fresh association starts
// at once and carries new flows when the link is back.
func TestOutageOutlivesMaxOutage(t *testing.T) {
	h := newHarness(t)
	a := h.addSite("a", "192.0.2.1:4700", "10.1.0.0/24")
	b := h.addSite("b", "192.0.2.2:4700", "10.2.0.0/24")
	link := "rtt = \"20ms\"\noutage_after = \"300ms\"\nprobe_interval = \"50ms\"\nmax_outage = \"1s\""
	a.start(peerSpec{s: b, link: link})
	b.start(peerSpec{s: a, link: link})
	a.waitUp(b)
	b.echo(7)
	old := openEcho(t, a, "10.2.0.5:7")
	h.wire.setFilter(func(from, to netip.AddrPort) bool { return false })
	a.waitLog("association down", map[string]string{"peer": "b", "reason": "link outage: probing"})
	old.SetReadDeadline(time.Now().Add(waitTime))
	if _, err := old.Read(make([]byte, 1)); !isReset(err) {
		t.Errorf("a flow across an outage longer than max_outage ended with %v, want a reset", err)
	}
	// Both sides give up and start afresh. (The link comes back only
	// after both did: an association ended at one side only would not be
	// told, as its close was lost in the outage.)
	for _, s := range []struct{ at, peer *site }{{a, b}, {b, a}} {
		s.at.waitLog("association down", map[string]string{"peer": s.peer.name, "reason": scps.ErrOutage.Error()})
		s.at.waitLogN(2, "scps session started", map[string]string{"peer": s.peer.name})
	}
	h.wire.setFilter(nil)
	openEcho(t, a, "10.2.0.5:7")
}
