package tunnel

import (
	"bytes"
	"net/netip"
	"testing"
	"time"
)

// hubAndSpokes starts a hub (10.0.0.0/24, fd00::/64) with two spokes
// (10.1.0.0/24, fd00:1::/64 and 10.2.0.0/24, fd00:2::/64), configured as
// docs/hub-and-spoke.md says: each spoke knows only the hub, as the owner
// of the hub's LAN and the other spoke's. s1Routes, if given, replaces s1's list.
func hubAndSpokes(t *testing.T, s1Routes ...string) (h *harness, hub, s1, s2 *site) {
	h = newHarness(t)
	hub = h.addSite("hub", "192.0.2.10:4700", "10.0.0.0/24", "fd00::/64")
	s1 = h.addSite("s1", "192.0.2.11:4700", "10.1.0.0/24", "fd00:1::/64")
	s2 = h.addSite("s2", "192.0.2.12:4700", "10.2.0.0/24", "fd00:2::/64")
	hub.start(hub.peer(s1), hub.peer(s2))
	if len(s1Routes) == 0 {
		s1Routes = []string{"10.0.0.0/24", "fd00::/64", "10.2.0.0/24", "fd00:2::/64"}
	}
	s1.start(peerSpec{s: hub, subnets: s1Routes})
	s2.start(peerSpec{s: hub, subnets: []string{"10.0.0.0/24", "fd00::/64", "10.1.0.0/24", "fd00:1::/64"}})
	hub.waitUp(s1, s2)
	s1.waitUp(hub)
	s2.waitUp(hub)
	return h, hub, s1, s2
}

// TestHubRelaysBetweenSpokes: a flow from one spoke to the other is a
// stream to the hub, opened on by the hub as a stream to the other spoke
// (not through the hub's own LAN), and the server sees the client's own
// address. Datagrams are relayed the same way.
func TestHubRelaysBetweenSpokes(t *testing.T) {
	_, hub, s1, s2 := hubAndSpokes(t)
	s2.echo(7)
	for _, tc := range []struct{ src, dst string }{
		{"10.1.0.7:0", "10.2.0.5:7"},
		{"[fd00:1::7]:0", "[fd00:2::5]:7"},
	} {
		c, err := s1.dial(tc.src, tc.dst)
		if err != nil {
			t.Fatalf("dial %s: %v", tc.dst, err)
		}
		if err := echoCheck(c, 256<<10); err != nil {
			t.Fatalf("%s: %v", tc.dst, err)
		}
		c.Close()
	}
	if n := hub.ep.Stats().FlowsAccepted.Load(); n != 2 {
		t.Errorf("hub relayed %d flows, want 2", n)
	}
	if st := hub.assoc(s1).stats(); st.StreamsAccepted != 2 {
		t.Errorf("hub accepted %d streams from s1, want 2", st.StreamsAccepted)
	}
	if st := hub.assoc(s2).stats(); st.StreamsOpened != 2 {
		t.Errorf("hub opened %d streams to s2, want 2", st.StreamsOpened)
	}
	if n := hub.host.Stats().Accepted + hub.host.Stats().Dialed; n != 0 {
		t.Errorf("hub's own LAN saw %d connections, want none", n)
	}

	for _, tc := range []struct {
		from, to *site
		src, dst string
	}{
		{s1, s2, "10.1.0.7:5000", "10.2.0.5:53"},
		{s2, s1, "[fd00:2::5]:53", "[fd00:1::7]:5000"},
	} {
		pkt := udpPacket(netip.MustParseAddrPort(tc.src), netip.MustParseAddrPort(tc.dst), []byte("relayed by the hub"))
		tc.from.inject(pkt)
		if got := tc.to.nextDatagram(); !bytes.Equal(got, pkt) {
			t.Errorf("%s -> %s: %d bytes arrived, not the %d sent", tc.src, tc.dst, len(got), len(pkt))
		}
	}
	hub.noDatagram(100 * time.Millisecond)
}

// TestHubRefusesLoop: a spoke whose routes to the hub wrongly include part
// of its own subnet (10.1.0.128/25) sends the hub a flow for it; the hub
// refuses it instead of sending it back where it came from. A datagram for
// it is dropped.
func TestHubRefusesLoop(t *testing.T) {
	_, hub, s1, _ := hubAndSpokes(t, "10.0.0.0/24", "fd00::/64", "10.2.0.0/24", "fd00:2::/64", "10.1.0.128/25")
	dialReset(t, s1, "10.1.0.7:0", "10.1.0.200:80")
	if n := hub.ep.Stats().FlowsRefused.Load(); n != 1 {
		t.Errorf("hub refused %d flows, want 1", n)
	}
	if st := hub.assoc(s1).stats(); st.StreamsOpened != 0 {
		t.Errorf("hub opened %d streams back to s1, want 0", st.StreamsOpened)
	}
	s1.inject(udpPacket(netip.MustParseAddrPort("10.1.0.7:5000"), netip.MustParseAddrPort("10.1.0.200:53"), []byte("loop")))
	if !waitFor(waitTime, func() bool { return hub.assoc(s1).stats().DatagramsReceived == 1 }) {
		t.Fatal("the datagram did not reach the hub")
	}
	s1.noDatagram(200 * time.Millisecond)
	hub.noDatagram(0)
	if n := hub.assoc(s1).stats().DatagramsSent; n != 0 {
		t.Errorf("hub sent %d datagrams back to s1, want 0", n)
	}
}
