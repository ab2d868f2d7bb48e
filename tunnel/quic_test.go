package tunnel

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// quicSites starts two sites whose peers carry the given [[peer]] lines
// (the quic keys) toward each other.
func quicSites(t *testing.T, keys string, link ...string) (h *harness, a, b *site) {
	h = newHarness(t)
	a = h.addSite("a", "192.0.2.1:4700", "10.1.0.0/24", "fd00:1::/64")
	b = h.addSite("b", "192.0.2.2:4700", "10.2.0.0/24", "fd00:2::/64")
	l := strings.Join(link, "\n")
	a.start(peerSpec{s: b, keys: keys, link: l})
	b.start(peerSpec{s: a, keys: keys, link: l})
	a.waitUp(b)
	b.waitUp(a)
	return h, a, b
}

// TestQuicFallback: with the default policy a datagram toward a QUIC port
// of the peer's subnets is answered at once with ICMP port unreachable
// from its destination, and nothing crosses; other UDP, and a server's
// answers from a QUIC port, cross as before.
func TestQuicFallback(t *testing.T) {
	_, a, b := quicSites(t, "")
	for _, tc := range []struct{ src, dst string }{
		{"10.1.0.7:40000", "10.2.0.5:443"},
		{"[fd00:1::7]:40000", "[fd00:2::5]:443"},
	} {
		src, dst := netip.MustParseAddrPort(tc.src), netip.MustParseAddrPort(tc.dst)
		pkt := udpPacket(src, dst, []byte("quic initial"))
		a.inject(pkt)
		reply := a.nextDatagram()
		info, ok := parseIP(reply)
		if !ok || info.src != dst.Addr() || info.dst != src.Addr() {
			t.Fatalf("%s: reply %+v", tc.dst, info)
		}
		icmp := reply[info.hlen:]
		if src.Addr().Is4() && (info.proto != protoICMPv4 || icmp[0] != icmpv4Unreachable || icmp[1] != icmpv4PortUnreach) {
			t.Errorf("%s: ICMP type %d code %d, want port unreachable", tc.dst, icmp[0], icmp[1])
		}
		if src.Addr().Is6() && (info.proto != protoICMPv6 || icmp[0] != icmpv6Unreachable || icmp[1] != icmpv6PortUnreach) {
			t.Errorf("%s: ICMPv6 type %d code %d, want port unreachable", tc.dst, icmp[0], icmp[1])
		}
		if !bytes.Equal(icmp[8:8+info.hlen], pkt[:info.hlen]) {
			t.Errorf("%s: the reply does not quote the datagram's header", tc.dst)
		}
	}
	b.noDatagram(100 * time.Millisecond)
	if n := a.ep.Stats().QuicRefused.Load(); n != 2 {
		t.Errorf("%d datagrams refused, want 2", n)
	}
	// DNS, and a server's answer from port 443, cross untouched.
	for _, pkt := range [][]byte{
		udpPacket(netip.MustParseAddrPort("10.1.0.7:40000"), netip.MustParseAddrPort("10.2.0.5:53"), []byte("dns")),
		udpPacket(netip.MustParseAddrPort("10.1.0.7:443"), netip.MustParseAddrPort("10.2.0.5:40000"), []byte("answer")),
	} {
		a.inject(pkt)
		if got := b.nextDatagram(); !bytes.Equal(got, pkt) {
			t.Errorf("datagram changed on the way: %x", got)
		}
	}
	if st := a.ep.Status().Counters; st.QuicRefused != 2 || st.QuicRepaired != 0 {
		t.Errorf("status counters %+v", st)
	}
}

// TestQuicPassAndPorts: quic = "pass" carries port 443 as plain
// datagrams; quic_ports moves fallback to the ports listed.
func TestQuicPassAndPorts(t *testing.T) {
	_, a, b := quicSites(t, "quic = \"pass\"\n")
	pkt := udpPacket(netip.MustParseAddrPort("10.1.0.7:40000"), netip.MustParseAddrPort("10.2.0.5:443"), []byte("q"))
	a.inject(pkt)
	if got := b.nextDatagram(); !bytes.Equal(got, pkt) {
		t.Errorf("datagram changed on the way: %x", got)
	}
	if err := a.ep.Reload(a.config(peerSpec{s: b, keys: "quic_ports = [8443]\n"})); err != nil {
		t.Fatal(err)
	}
	a.waitUp(b)
	a.inject(pkt)
	if got := b.nextDatagram(); !bytes.Equal(got, pkt) {
		t.Errorf("port 443 with quic_ports = [8443]: %x", got)
	}
	a.inject(udpPacket(netip.MustParseAddrPort("10.1.0.7:40000"), netip.MustParseAddrPort("10.2.0.5:8443"), []byte("q")))
	if info, _ := parseIP(a.nextDatagram()); info.proto != protoICMPv4 {
		t.Errorf("port 8443: got protocol %d, want an ICMP answer", info.proto)
	}
}

// TestQuicRepairHidesLoss: with quic = "repair" on a wire losing 10% of
// the packets each way, every datagram of a QUIC flow arrives, once and
// in order, both from the client (to port 443) and from the server (from
// port 443); other UDP is still carried as plain datagrams.
func TestQuicRepairHidesLoss(t *testing.T) {
	// A configured RTT of 1 s puts the give-up deadline at 3 s: a loaded
	// machine's delays do not give datagrams up.
	h, a, b := quicSites(t, "quic = \"repair\"\n", `rtt = "1s"`)
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	var dropped atomic.Uint64
	h.wire.SetFilter(func(from, to netip.AddrPort) bool {
		mu.Lock()
		defer mu.Unlock()
		if rng.IntN(10) == 0 {
			dropped.Add(1)
			return false
		}
		return true
	})
	const n = 300
	flows := []struct {
		from, to *site
		src, dst string
	}{
		{a, b, "10.1.0.7:40000", "10.2.0.5:443"},
		{b, a, "[fd00:2::5]:443", "[fd00:1::7]:40000"},
	}
	for _, f := range flows {
		src, dst := netip.MustParseAddrPort(f.src), netip.MustParseAddrPort(f.dst)
		// In rounds of a quarter of a flow's queue: the test checks what
		// the hop loses, not what a loaded machine's queue would.
		const round = quicQueue / 4
		for i := range n {
			if i%round == 0 {
				for j := i; j < min(i+round, n); j++ {
					var seq [1000]byte
					binary.BigEndian.PutUint32(seq[:], uint32(j))
					f.from.inject(udpPacket(src, dst, seq[:]))
				}
			}
			var p []byte
			select {
			case p = <-f.to.datagrams:
			case <-time.After(waitTime):
				for _, s := range []*site{a, b} {
					st := s.ep.Stats()
					t.Logf("%s: repaired %d, given up %d", s.name, st.QuicRepaired.Load(), st.QuicGivenUp.Load())
				}
				t.Fatalf("%s: datagram %d did not arrive", f.dst, i)
			}
			info, ok := parseIP(p)
			if !ok || info.src != src.Addr() || info.dst != dst.Addr() {
				t.Fatalf("%s: datagram %d from %v to %v", f.dst, i, info.src, info.dst)
			}
			if got := binary.BigEndian.Uint32(p[info.hlen+8:]); got != uint32(i) {
				t.Fatalf("%s: datagram %d carries %d: lost or out of order", f.dst, i, got)
			}
		}
	}
	for _, s := range []*site{a, b} {
		st := s.ep.Stats()
		if st.QuicRepaired.Load() != n || st.QuicGivenUp.Load() != 0 {
			t.Errorf("%s: repaired %d, given up %d, want %d and 0", s.name, st.QuicRepaired.Load(), st.QuicGivenUp.Load(), n)
		}
	}
	if dropped.Load() == 0 {
		t.Errorf("the wire dropped no packet: its loss did not happen")
	}
	opened := a.assoc(b).stats().StreamsOpened
	h.wire.SetFilter(nil)
	dns := udpPacket(netip.MustParseAddrPort("10.1.0.7:40000"), netip.MustParseAddrPort("10.2.0.5:53"), []byte("dns"))
	a.inject(dns)
	if got := b.nextDatagram(); !bytes.Equal(got, dns) {
		t.Errorf("DNS changed on the way: %x", got)
	}
	if st := a.assoc(b).stats(); st.StreamsOpened != opened || a.ep.Stats().QuicRepaired.Load() != n {
		t.Errorf("DNS went on a repair stream")
	}
}

// TestQuicLateness: the delay is measured against the earliest arrival,
// whatever the offset of the two clocks, across the wrap of the ms clock.
func TestQuicLateness(t *testing.T) {
	for _, offset := range []uint32{0, 5000, 1<<32 - 300} {
		var l lateness
		sent := uint32(1<<32 - 1000)
		at := func(delay uint32) uint32 { return sent + offset + delay }
		if d := l.late(sent, at(300)); d != 0 {
			t.Errorf("offset %d: first datagram %v late", offset, d)
		}
		sent += 100
		if d := l.late(sent, at(1300)); d != time.Second {
			t.Errorf("offset %d: %v late, want 1s", offset, d)
		}
		sent += 2000 // past the wrap
		if d := l.late(sent, at(250)); d != 0 {
			t.Errorf("offset %d: a faster arrival is %v late", offset, d)
		}
		if d := l.late(sent, at(400)); d != 150*time.Millisecond {
			t.Errorf("offset %d: %v late, want 150ms against the new base", offset, d)
		}
	}
	if quicDeadline(600*time.Millisecond) != 1800*time.Millisecond || quicDeadline(20*time.Millisecond) != time.Second {
		t.Error("deadline is not three round trips, at least 1 s")
	}
}

// TestQuicPacer: datagrams that arrive as sent go at once; a burst
// released by a repair goes with the sender's gaps halved, and the flow
// is on time again once the burst is through.
func TestQuicPacer(t *testing.T) {
	var p quicPacer
	t0 := time.Unix(100, 0)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	if at := p.at(1000, t0); !at.Equal(t0) {
		t.Fatalf("first datagram at %v", at.Sub(t0))
	}
	if at := p.at(1010, t0.Add(ms(10))); !at.Equal(t0.Add(ms(10))) {
		t.Errorf("an on-time datagram waits %v", at.Sub(t0.Add(ms(10))))
	}
	// Sent 10 ms apart after that one, held by a repair, all arriving at
	// 700 ms: they go 5 ms apart from then on.
	now := t0.Add(ms(700))
	for i := 1; i <= 40; i++ {
		at := p.at(uint32(1010+10*i), now)
		if want := t0.Add(ms(700 + 5*(i-1))); !at.Equal(want) {
			t.Fatalf("datagram %d at %v, want %v", i, at.Sub(t0), want.Sub(t0))
		}
	}
	// One sent on time after the burst is through goes at once.
	late := t0.Add(ms(1100))
	if at := p.at(1010+10*41+300, late); !at.Equal(late) {
		t.Errorf("after the burst: waits %v", at.Sub(late))
	}
	// The clock wraps between two datagrams.
	var q quicPacer
	q.at(1<<32-5, t0)
	if at := q.at(5, t0); !at.Equal(t0.Add(ms(5))) {
		t.Errorf("across the wrap: at %v, want 5ms", at.Sub(t0))
	}
}
