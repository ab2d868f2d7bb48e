package e2e

// Issue 10: the endpoint facing buggy or hostile peers and LANs, through
// the real binary in a hub with spokes (testbed.Star).

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"scpsvpn/cmd/internal/testbed"
)

// A peer speaks only for the addresses whose longest-prefix owner it is
// (WireGuard's allowed IPs): the hub lists spoke 2 with a /16 that holds
// spoke 1's /24, and spoke 2 (hostile or misconfigured: it does not list
// spoke 1's LAN itself, so its own TUN check lets the packets through)
// sends from spoke 1's addresses. The hub refuses its datagrams and
// streams, to the hub and relayed to spoke 3, while spoke 2's own part of
// the /16 still works. And a spoke drops packets from its own TUN that
// claim a source in a peer's subnet.
func TestSourceCheckLongestPrefix(t *testing.T) {
	wide := netip.MustParsePrefix("10.1.0.0/16")
	st := starSites(t, testbed.StarConfig{
		Spokes: 3,
		PeerSubnets: func(node, peer int, subnets []netip.Prefix) []netip.Prefix {
			switch {
			case node == 0 && peer == 2, node == 3:
				// The hub gives spoke 2 the /16; spoke 3 hears of
				// it through the hub.
				return append(subnets, wide)
			case node == 2:
				return slices.DeleteFunc(subnets, func(p netip.Prefix) bool { return p.Contains(netip.MustParseAddr("10.1.0.1")) })
			}
			return subnets
		},
	}, nil)
	spoofed := netip.MustParseAddr("10.1.0.9") // spoke 1's
	ownWide := netip.MustParseAddr("10.1.7.9") // spoke 2's part of the /16
	for _, a := range []netip.Addr{spoofed, ownWide} {
		if out, err := st.Exec(2, "ip", "addr", "add", netip.PrefixFrom(a, 32).String(), "dev", "lo"); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}

	// TCP and UDP servers on the hub's LAN and on spoke 3's.
	type server struct {
		tcp, udp netip.AddrPort
		seen     chan netip.AddrPort
	}
	servers := map[int]*server{}
	for _, i := range []int{0, 3} {
		srv := &server{seen: make(chan netip.AddrPort, 64)}
		ln, err := st.Listen(i, "tcp", hostPort(st.Nodes[i].TUN4, 0))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go serveEach(ln, func(c net.Conn) {
			srv.seen <- c.RemoteAddr().(*net.TCPAddr).AddrPort()
			c.Write([]byte("hi"))
			c.Close()
		})
		pc, err := st.ListenPacket(i, "udp", hostPort(st.Nodes[i].TUN4, 0))
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		go recordSources(pc, srv.seen)
		srv.tcp = ln.Addr().(*net.TCPAddr).AddrPort()
		srv.udp = pc.LocalAddr().(*net.UDPAddr).AddrPort()
		servers[i] = srv
	}
	// dialFrom connects from spoke 2 with source src and reads the greeting.
	dialFrom := func(src netip.Addr, to netip.AddrPort) error {
		var c net.Conn
		err := st.Do(2, func() (err error) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src.AsSlice()}, Timeout: 5 * time.Second}
			c, err = d.DialContext(context.Background(), "tcp", to.String())
			return err
		})
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 2))
		return err
	}
	expectSeen := func(srv *server, want netip.Addr, what string) {
		t.Helper()
		select {
		case from := <-srv.seen:
			if from.Addr() != want {
				t.Errorf("%s: the server saw %v, want %v", what, from, want)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s: never reached the server", what)
		}
	}
	expectNothing := func(srv *server, what string) {
		t.Helper()
		select {
		case from := <-srv.seen:
			t.Errorf("%s: the server saw %v", what, from)
		case <-time.After(time.Second):
		}
	}

	before := status(t, st, 0)
	for _, i := range []int{0, 3} {
		srv, name := servers[i], st.Nodes[i].Name
		// Spoke 2's own part of the /16 passes: this is longest-prefix
		// matching, not a blanket refusal of the wide subnet.
		if err := dialFrom(ownWide, srv.tcp); err != nil {
			t.Errorf("TCP from spoke 2's %v to %s: %v", ownWide, name, err)
		}
		expectSeen(srv, ownWide, "TCP from spoke 2's own wide address to "+name)
		if err := st.SendUDPRaw(2, netip.AddrPortFrom(ownWide, 999), srv.udp, [][]byte{[]byte("mine")}); err != nil {
			t.Fatal(err)
		}
		expectSeen(srv, ownWide, "UDP from spoke 2's own wide address to "+name)

		// Spoke 1's address: refused at the hub.
		if err := dialFrom(spoofed, srv.tcp); err == nil {
			t.Errorf("TCP from spoke 1's %v, sent by spoke 2, was served by %s", spoofed, name)
		}
		if err := st.SendUDPRaw(2, netip.AddrPortFrom(spoofed, 999), srv.udp, [][]byte{[]byte("a"), []byte("b"), []byte("c")}); err != nil {
			t.Fatal(err)
		}
		expectNothing(srv, "spoofed traffic to "+name)
	}
	after := status(t, st, 0)
	if n := after.Counters.DatagramsBadSrc - before.Counters.DatagramsBadSrc; n != 6 {
		t.Errorf("the hub counted %d datagrams with another peer's source, sent 6", n)
	}
	if n := after.Counters.StreamsBadSrc - before.Counters.StreamsBadSrc; n != 2 {
		t.Errorf("the hub counted %d streams with another peer's source, opened 2", n)
	}

	// Spoke 1 (configured as usual: the hub owns spoke 2's LAN) drops a
	// packet from its own TUN that claims spoke 2's source.
	s1 := status(t, st, 1)
	if err := st.SendUDPRaw(1, netip.AddrPortFrom(st.Spoke(2).TUN4, 999), servers[0].udp, [][]byte{[]byte("x"), []byte("y")}); err != nil {
		t.Fatal(err)
	}
	expectNothing(servers[0], "spoke 1 sending as spoke 2")
	if n := status(t, st, 1).Counters.TunBadSrc - s1.Counters.TunBadSrc; n != 2 {
		t.Errorf("spoke 1 counted %d TUN packets with a peer's source, sent 2", n)
	}
	if n := status(t, st, 0).Counters.DatagramsBadSrc - after.Counters.DatagramsBadSrc; n != 0 {
		t.Errorf("%d of spoke 1's spoofed packets reached the hub", n)
	}
}
