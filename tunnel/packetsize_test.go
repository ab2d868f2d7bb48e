package tunnel

import (
	"net/netip"
	"testing"

	"scpsvpn/configs"
)

// TestPacketsFillThePath: full association packets are as large as the
// path MTU allows after the underlay's headers, IPv4 (1500 - 28) or IPv6
// (1500 - 48), or a configured smaller MTU, and never larger.
func TestPacketsFillThePath(t *testing.T) {
	h := newHarness(t)
	a := h.addSite("a", "192.0.2.1:4700", "10.1.0.0/24")
	b := h.addSite("b", "[2001:db8::2]:4700", "10.2.0.0/24")
	c := h.addSite("c", "192.0.2.3:4700", "10.3.0.0/24")
	pc := a.peer(c)
	pc.link = "rtt = \"20ms\"\nmtu = 1400"
	a.start(a.peer(b), pc)
	b.start(b.peer(a))
	c.start(c.peer(a))
	a.waitUp(b, c)
	b.echo(7)
	c.echo(7)
	for _, dst := range []string{"10.2.0.5:7", "10.3.0.5:7"} {
		for range 4 {
			openEcho(t, a, dst)
		}
	}
	for _, tc := range []struct {
		from, to *site
		want     int
	}{
		{a, b, 1500 - 48},
		{b, a, 1500 - 28},
		{a, c, 1400 - 28},
		{c, a, 1500 - 28},
	} {
		if got := tc.from.conn.LargestTo(tc.to.wireAddr); got != tc.want {
			t.Errorf("%s -> %s: largest datagram %d bytes, want %d", tc.from.name, tc.to.name, got, tc.want)
		}
	}
}

func TestUnderlayGuess(t *testing.T) {
	v4 := netip.MustParseAddrPort("192.0.2.1:4700")
	v6 := netip.MustParseAddrPort("[2001:db8::1]:4700")
	wild := netip.MustParseAddrPort("0.0.0.0:4700")
	for _, tc := range []struct {
		endpoint, listen netip.AddrPort
		headers          int
	}{
		{v6, v4, 48},
		{v4, v6, 28},
		{netip.AddrPort{}, v4, 28},
		{netip.AddrPort{}, v6, 48},
		{netip.AddrPort{}, wild, 48}, // either family may call: the smaller packet
		{netip.MustParseAddrPort("[::ffff:192.0.2.9]:4700"), v6, 28},
	} {
		got := underlayHeaders(underlayGuess(configs.PeerConfig{Endpoint: tc.endpoint}, tc.listen))
		if got != tc.headers {
			t.Errorf("endpoint %v, listen %v: %d bytes of headers, want %d", tc.endpoint, tc.listen, got, tc.headers)
		}
	}
}
