package tunnel

import "testing"

// TestUplinkMeasured: with [peer.link] up not configured, the rate a
// flow's data reached toward the peer becomes the peer's uplink for
// peers' bound on cookie replies (uplink.go).
func TestUplinkMeasured(t *testing.T) {
	_, a, b := twoSites(t)
	b.echo(7)
	p, ok := a.ep.dev.Peer("b")
	if !ok {
		t.Fatal("a has no peer b")
	}
	if up := p.Uplink(); up != 0 {
		t.Fatalf("uplink toward b %d bit/s before any data, want 0 (none configured)", up)
	}
	openEcho(t, a, "10.2.0.5:7")
	if !waitFor(waitTime, func() bool { return p.Uplink() > 0 }) {
		t.Fatal("no uplink rate measured toward b after a flow's data")
	}
	t.Logf("uplink toward b measured at %d bit/s", p.Uplink())
}
