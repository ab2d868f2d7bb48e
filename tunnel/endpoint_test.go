package tunnel

import (
	"bytes"
	"io"
	"net/netip"
	"testing"
	"time"

	"scpsvpn/stack"
)

// twoSites starts sites a (10.1.0.0/24, fd00:1::/64) and b (10.2.0.0/24,
// fd00:2::/64), each the other's peer.
func twoSites(t *testing.T) (h *harness, a, b *site) { return twoSitesWith(t, "") }

// twoSitesWith is twoSites with more [interface] lines at a.
func twoSitesWith(t *testing.T, aIface string) (h *harness, a, b *site) {
	h = newHarness(t)
	a = h.addSite("a", "192.0.2.1:4700", "10.1.0.0/24", "fd00:1::/64")
	a.iface = aIface
	b = h.addSite("b", "192.0.2.2:4700", "10.2.0.0/24", "fd00:2::/64")
	a.start(a.peer(b))
	b.start(b.peer(a))
	// Datagrams sent before the handshake are lost (streams wait for it).
	a.waitUp(b)
	b.waitUp(a)
	return h, a, b
}

// dialReset dials through the TUN a connection the far side will refuse:
// the local side accepts it at once (optimistic open) and resets it when
// the refusal arrives, which may be before the dial returns.
func dialReset(t *testing.T, s *site, src, dst string) *stack.Conn {
	t.Helper()
	c, err := s.dial(src, dst)
	if err == nil {
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(waitTime))
		_, err = c.Read(make([]byte, 1))
	}
	if !isReset(err) {
		t.Fatalf("%s -> %s: %v, want a reset", src, dst, err)
	}
	return c
}

// accept returns the next connection a site's server accepted.
func accept(t *testing.T, ch chan *stack.Conn) *stack.Conn {
	t.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(waitTime):
		t.Fatal("no connection reached the server")
		return nil
	}
}

// TestFlowCarriesBytes: a TCP connection from site a's LAN to a server at
// site b is terminated at a, carried as a stream and re-originated at b
// from the client's own address; half a megabyte each way arrives intact, and
// each side's FIN reaches the other (half-close).
func TestFlowCarriesBytes(t *testing.T) {
	_, a, b := twoSites(t)
	srv := b.listen(80)
	for _, tc := range []struct{ src, dst string }{
		{"10.1.0.7:0", "10.2.0.5:80"},
		{"[fd00:1::7]:0", "[fd00:2::5]:80"},
	} {
		c, err := a.dial(tc.src, tc.dst)
		if err != nil {
			t.Fatalf("dial %s: %v", tc.dst, err)
		}
		sc := accept(t, srv)
		if sc.RemoteAddrPort() != c.LocalAddrPort() || sc.LocalAddrPort() != netip.MustParseAddrPort(tc.dst) {
			t.Errorf("server sees %v -> %v, want %v -> %s", sc.RemoteAddrPort(), sc.LocalAddrPort(), c.LocalAddrPort(), tc.dst)
		}
		up, down := randomBytes(512<<10), randomBytes(512<<10)
		c.SetDeadline(time.Now().Add(waitTime))
		sc.SetDeadline(time.Now().Add(waitTime))
		go func() {
			c.Write(up)
			c.CloseWrite()
		}()
		got, err := io.ReadAll(sc)
		if err != nil || !bytes.Equal(got, up) {
			t.Fatalf("%s: server got %d bytes (err %v), want the client's %d", tc.dst, len(got), err, len(up))
		}
		// The client's FIN arrived; the server's direction is still open.
		go func() {
			sc.Write(down)
			sc.CloseWrite()
		}()
		got, err = io.ReadAll(c)
		if err != nil || !bytes.Equal(got, down) {
			t.Fatalf("%s: client got %d bytes (err %v), want the server's %d", tc.dst, len(got), err, len(down))
		}
		c.Close()
		sc.Close()
	}
	if n := a.ep.Stats().FlowsOpened.Load(); n != 2 {
		t.Errorf("a opened %d flows, want 2", n)
	}
	if n := b.ep.Stats().FlowsAccepted.Load(); n != 2 {
		t.Errorf("b accepted %d flows, want 2", n)
	}
	if !waitFor(waitTime, func() bool { return a.ep.Stats().FlowsActive.Load() == 0 && b.ep.Stats().FlowsActive.Load() == 0 }) {
		t.Errorf("flows still active after both ends closed: a %d, b %d", a.ep.Stats().FlowsActive.Load(), b.ep.Stats().FlowsActive.Load())
	}
}

// TestFlowRefusedByServer: when the server at b refuses (RST), the client
// at a, already accepted locally (optimistic open), sees its connection
// reset.
func TestFlowRefusedByServer(t *testing.T) {
	_, a, b := twoSites(t)
	dialReset(t, a, "10.1.0.7:0", "10.2.0.5:81") // nothing listens on 81
	if n := b.ep.Stats().FlowsRefused.Load(); n != 1 {
		t.Errorf("b refused %d flows, want 1", n)
	}
}

// TestFlowToNoPeer: a connection to a subnet no peer owns is refused at
// once (RST), not carried anywhere.
func TestFlowToNoPeer(t *testing.T) {
	_, a, _ := twoSites(t)
	if c, err := a.dial("10.1.0.7:0", "10.9.0.5:80"); err == nil {
		c.Close()
		t.Fatal("a connection to no peer's subnet was accepted")
	}
	if n := a.ep.Stats().FlowsRefused.Load(); n != 1 {
		t.Errorf("a refused %d flows, want 1", n)
	}
	if n := a.ep.Stats().FlowsOpened.Load(); n != 0 {
		t.Errorf("a opened %d flows, want 0", n)
	}
}

// TestDatagrams: non-TCP packets cross as datagrams and come out of the
// far TUN byte for byte, both ways, IPv4 and IPv6.
func TestDatagrams(t *testing.T) {
	_, a, b := twoSites(t)
	for i, tc := range []struct {
		from, to *site
		src, dst string
	}{
		{a, b, "10.1.0.7:5000", "10.2.0.5:53"},
		{b, a, "10.2.0.5:53", "10.1.0.7:5000"},
		{a, b, "[fd00:1::7]:5000", "[fd00:2::5]:53"},
		{b, a, "[fd00:2::5]:53", "[fd00:1::7]:5000"},
	} {
		pkt := udpPacket(netip.MustParseAddrPort(tc.src), netip.MustParseAddrPort(tc.dst), randomBytes(100+i*300))
		tc.from.inject(pkt)
		if got := tc.to.nextDatagram(); !bytes.Equal(got, pkt) {
			t.Errorf("%s -> %s: %s received %d bytes, not the %d sent", tc.src, tc.dst, tc.to.name, len(got), len(pkt))
		}
	}
	for _, s := range []*site{a, b} {
		if n := s.ep.Stats().DatagramsIn.Load(); n != 2 {
			t.Errorf("%s: %d datagrams in, want 2", s.name, n)
		}
		if n := s.ep.Stats().TunPackets.Load(); n < 2 {
			t.Errorf("%s: %d TUN packets read, want at least 2", s.name, n)
		}
	}
}

// TestNoPeerUnreachable: a datagram to a subnet no peer owns is answered
// with ICMP unreachable into the TUN; a malformed packet is counted and
// dropped.
func TestNoPeerUnreachable(t *testing.T) {
	_, a, _ := twoSites(t)
	for _, tc := range []struct{ src, dst string }{
		{"10.1.0.7:5000", "10.9.0.1:53"},
		{"[fd00:1::7]:5000", "[fd00:9::1]:53"},
	} {
		src, dst := netip.MustParseAddrPort(tc.src), netip.MustParseAddrPort(tc.dst)
		a.inject(udpPacket(src, dst, []byte("anyone there?")))
		reply := a.nextDatagram()
		info, ok := parseIP(reply)
		if !ok || info.src != dst.Addr() || info.dst != src.Addr() || (info.proto != protoICMPv4 && info.proto != protoICMPv6) {
			t.Errorf("%s: reply %+v (ok %v), want ICMP from %v to %v", tc.dst, info, ok, dst.Addr(), src.Addr())
		}
	}
	if n := a.ep.Stats().TunNoPeer.Load(); n != 2 {
		t.Errorf("%d packets to no peer, want 2", n)
	}
	a.inject([]byte{0x45, 0, 0})
	if !waitFor(waitTime, func() bool { return a.ep.Stats().TunMalformed.Load() == 1 }) {
		t.Errorf("malformed packets counted: %d, want 1", a.ep.Stats().TunMalformed.Load())
	}
	a.noDatagram(100 * time.Millisecond)
}

// TestForeignSourceRefused: a peer speaks only for its own subnets. A
// stream or datagram from a source outside them (here a's LAN sends from
// 10.7.0.7, which b does not know as a's) is refused at b; a packet with a
// source in b's own subnet does not even leave a. Nothing reaches b's LAN.
func TestForeignSourceRefused(t *testing.T) {
	_, a, b := twoSites(t)
	srv := b.listen(80)
	dialReset(t, a, "10.7.0.7:4321", "10.2.0.5:80")
	b.waitLog("stream denied: source not in the peer's subnets", map[string]string{"src": "10.7.0.7:4321"})
	if n := b.ep.Stats().StreamsBadSrc.Load(); n != 1 {
		t.Errorf("b refused %d streams for their source, want 1", n)
	}
	a.inject(udpPacket(netip.MustParseAddrPort("10.7.0.7:5000"), netip.MustParseAddrPort("10.2.0.5:53"), []byte("spoofed")))
	if !waitFor(waitTime, func() bool { return b.ep.Stats().DatagramsBadSrc.Load() == 1 }) {
		t.Errorf("b counted %d datagrams with a foreign source, want 1", b.ep.Stats().DatagramsBadSrc.Load())
	}
	// A LAN host at a posing as one of b's: dropped at a's TUN already.
	a.inject(udpPacket(netip.MustParseAddrPort("10.2.0.9:5000"), netip.MustParseAddrPort("10.2.0.5:53"), []byte("spoofed")))
	if !waitFor(waitTime, func() bool { return a.ep.Stats().TunBadSrc.Load() == 1 }) {
		t.Errorf("a counted %d TUN packets with a peer's source, want 1", a.ep.Stats().TunBadSrc.Load())
	}
	b.noDatagram(100 * time.Millisecond)
	select {
	case sc := <-srv:
		t.Errorf("b's server was reached from %v", sc.RemoteAddrPort())
	default:
	}
}

// TestLinkSettingsInHandshake: each side tells the other, inside the
// handshake, the link settings it was configured with, and logs the
// peer's when the association comes up.
func TestLinkSettingsInHandshake(t *testing.T) {
	h := newHarness(t)
	a := h.addSite("a", "192.0.2.1:4700", "10.1.0.0/24")
	b := h.addSite("b", "192.0.2.2:4700", "10.2.0.0/24")
	a.start(peerSpec{s: b, link: "up = \"10Mbit\"\ndown = \"2Mbit\"\nrtt = \"300ms\""})
	b.start(peerSpec{s: a, link: "up = \"2Mbit\"\ndown = \"10Mbit\"\nrtt = \"310ms\""})
	b.waitLog("association up", map[string]string{"peer": "a", "peer_up": "10000000", "peer_down": "2000000", "peer_rtt_ms": "300"})
	a.waitLog("association up", map[string]string{"peer": "b", "peer_up": "2000000", "peer_down": "10000000", "peer_rtt_ms": "310"})
}
