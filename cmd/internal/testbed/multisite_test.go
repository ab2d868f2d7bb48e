package testbed

// Tests of the hub-and-spoke topology: configurations checked by the
// endpoint's own parser (no root), the packet decoder and builder (no root,
// plus a fuzz target), and, as root, every link carrying UDP both ways,
// endpoints (the fake one) started and stopped per node, the capture and the
// raw sender on a real link, and teardown after a panic.

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"scpsvpn/cmd/internal/namespace"
	"scpsvpn/cmd/internal/testenv"
	"scpsvpn/configs"
)

// paperStar is a Star with names, addresses and keys but no namespaces.
func paperStar(t *testing.T, spokes int) *Star {
	t.Helper()
	cfg := StarConfig{Spokes: spokes, Endpoints: Endpoints{Dir: t.TempDir()}}
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	st := &Star{ID: "abc123", Port: cfg.Port, cfg: cfg, Dir: cfg.Dir}
	for i := 0; i <= spokes; i++ {
		st.Nodes = append(st.Nodes, st.newNode(i))
		if i > 0 {
			st.Links = append(st.Links, st.newLink(i))
		}
	}
	if err := st.writeFiles(); err != nil {
		t.Fatal(err)
	}
	return st
}

func TestStarConfigs(t *testing.T) {
	st := paperStar(t, 3)
	hub, err := configs.Load(st.Hub().ConfigFile)
	if err != nil {
		t.Fatalf("hub config: %v\n%s", err, mustRead(t, st.Hub().ConfigFile))
	}
	if hub.Listen.String() != "0.0.0.0:4700" || hub.Name != "scpsabc123h" || len(hub.Peers) != 3 {
		t.Fatalf("hub: listen %v name %q peers %d", hub.Listen, hub.Name, len(hub.Peers))
	}
	for i, p := range hub.Peers {
		s := st.Spoke(i + 1)
		want := []string{fmt.Sprintf("10.%d.0.0/24", i+1), fmt.Sprintf("fd00:%d::/64", i+1)}
		if p.Name != s.Name || p.Endpoint.String() != fmt.Sprintf("10.201.%d.2:4700", i+1) || fmt.Sprint(p.Subnets) != fmt.Sprint(want) {
			t.Errorf("hub peer %d: %s %v %v", i, p.Name, p.Endpoint, p.Subnets)
		}
	}
	for i := 1; i <= 3; i++ {
		c, err := configs.Load(st.Spoke(i).ConfigFile)
		if err != nil {
			t.Fatalf("spoke %d: %v", i, err)
		}
		if len(c.Peers) != 1 || c.Peers[0].Name != "hub" || c.Peers[0].Endpoint != st.HubEndpoint(i) {
			t.Fatalf("spoke %d peers: %+v", i, c.Peers)
		}
		if c.Listen != st.SpokeEndpoint(i) || fmt.Sprint(c.Addresses) != fmt.Sprintf("[10.%d.0.1/32 fd00:%d::1/128]", i, i) {
			t.Errorf("spoke %d: listen %v addresses %v", i, c.Listen, c.Addresses)
		}
		// The hub owns its LAN and every other spoke's, never this spoke's.
		var got []string
		for _, p := range c.Peers[0].Subnets {
			got = append(got, p.String())
		}
		for j := 0; j <= 3; j++ {
			has := slices.Contains(got, st.Nodes[j].LAN4.String()) && slices.Contains(got, st.Nodes[j].LAN6.String())
			if has != (j != i) {
				t.Errorf("spoke %d: the hub's subnets %v (node %d: %v)", i, got, j, has)
			}
		}
	}
	// A hub without spoke 2, for a reload.
	if err := st.WriteHubConfig([]int{3, 1}); err != nil {
		t.Fatal(err)
	}
	hub, err = configs.Load(st.Hub().ConfigFile)
	if err != nil || len(hub.Peers) != 2 || hub.Peers[0].Name != "spoke-1" || hub.Peers[1].Name != "spoke-3" {
		t.Fatalf("rewritten hub config: %v %+v", err, hub)
	}
	for _, bad := range [][]int{nil, {0}, {4}, {1, 1}} {
		if err := st.WriteHubConfig(bad); err == nil {
			t.Errorf("WriteHubConfig(%v) accepted", bad)
		}
	}
	if _, err := os.Stat(st.Hub().ConfigFile + ".new"); !os.IsNotExist(err) {
		t.Errorf("temporary config left behind: %v", err)
	}
}

func TestStarNames(t *testing.T) {
	st := &Star{ID: "ffffff"}
	for _, i := range []int{0, 1, 9, MaxSpokes} {
		n, l := st.newNode(i), st.newLink(max(i, 1))
		for _, name := range []string{n.TUNName, l.HubDev, l.SpokeDev} {
			if len(name) > 15 || len(name) == 0 {
				t.Errorf("node %d: interface name %q", i, name)
			}
		}
		if !strings.HasPrefix(n.NS, fmt.Sprintf("%s%d-ffffff-", NamePrefix, os.Getpid())) {
			t.Errorf("namespace %q escapes SweepStale's pattern", n.NS)
		}
		if !n.LAN4.Contains(n.TUN4) || !n.LAN6.Contains(n.TUN6) || n.TUN4 == n.LAN4.Addr() {
			t.Errorf("node %d: %v %v %v %v", i, n.LAN4, n.TUN4, n.LAN6, n.TUN6)
		}
	}
	if _, err := NewStar(StarConfig{Spokes: MaxSpokes + 1}); err == nil {
		t.Error("too many spokes accepted")
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestBuildAndParseUDP(t *testing.T) {
	src, dst := netip.MustParseAddrPort("10.201.1.2:4700"), netip.MustParseAddrPort("10.201.1.1:4701")
	for _, n := range []int{0, 1, 2, 7, 1400} {
		payload := bytes.Repeat([]byte{byte(n), 0xa5}, n)[:n]
		pkt, err := BuildUDP4(src, dst, payload, 7)
		if err != nil {
			t.Fatal(err)
		}
		// Both checksums verify: the sum over the covered bytes is all ones.
		if s := onesSum(0, pkt[:20]); s != 0xffff {
			t.Errorf("%d: IP header sum %#x", n, s)
		}
		var ph [12]byte
		copy(ph[0:8], pkt[12:20])
		ph[9] = 17
		ph[10], ph[11] = pkt[24], pkt[25]
		if s := onesSum(onesSum(0, ph[:]), pkt[20:]); s != 0xffff {
			t.Errorf("%d: UDP sum %#x", n, s)
		}
		gs, gd, gp, ok := ParseUDP(pkt)
		if !ok || gs != src || gd != dst || !bytes.Equal(gp, payload) {
			t.Errorf("%d: parsed %v %v %d bytes %v", n, gs, gd, len(gp), ok)
		}
		// Every truncation is rejected, and so is a fragment.
		for cut := 0; cut < len(pkt); cut += 1 + cut/3 {
			if _, _, _, ok := ParseUDP(pkt[:cut]); ok {
				t.Errorf("%d: truncated to %d accepted", n, cut)
			}
		}
		frag := slices.Clone(pkt)
		frag[6] |= 0x20
		if _, _, _, ok := ParseUDP(frag); ok {
			t.Errorf("%d: fragment accepted", n)
		}
	}
	if _, err := BuildUDP4(netip.MustParseAddrPort("[fd00::1]:1"), dst, nil, 0); err == nil {
		t.Error("IPv6 accepted by BuildUDP4")
	}
	// An IPv6 packet (as a capture sees it).
	v6 := make([]byte, 40+8+3)
	v6[0] = 0x60
	v6[5] = 11
	v6[6] = 17
	copy(v6[8:24], netip.MustParseAddr("fd00::1").AsSlice())
	copy(v6[24:40], netip.MustParseAddr("fd00::2").AsSlice())
	v6[40], v6[41], v6[42], v6[43], v6[45] = 0x12, 0x34, 0x00, 0x35, 11
	copy(v6[48:], "abc")
	s, d, p, ok := ParseUDP(v6)
	if !ok || s.String() != "[fd00::1]:4660" || d.String() != "[fd00::2]:53" || string(p) != "abc" {
		t.Errorf("IPv6: %v %v %q %v", s, d, p, ok)
	}
}

// vnet prefixes pkt with a virtio_net_hdr of the given GSO type and size
// and an Ethernet header.
func vnet(gsoType byte, gsoSize uint16, pkt []byte) []byte {
	h := make([]byte, vnetHdrLen+14, vnetHdrLen+14+len(pkt))
	h[1] = gsoType
	h[4], h[5] = byte(gsoSize), byte(gsoSize>>8)
	h[vnetHdrLen+12] = 0x08 // IPv4
	return append(h, pkt...)
}

func TestParseCapturedSplitsGSO(t *testing.T) {
	src, dst := netip.MustParseAddrPort("10.201.1.2:4700"), netip.MustParseAddrPort("10.201.1.1:4700")
	payload := make([]byte, 350)
	for i := range payload {
		payload[i] = byte(i)
	}
	pkt, _ := BuildUDP4(src, dst, payload, 1)
	for _, tc := range []struct {
		gsoType byte
		size    uint16
		want    []int
	}{
		{vnetGSONone, 0, []int{350}},
		{vnetGSONone, 100, []int{350}}, // a size without GSO means nothing
		{vnetGSOUDPL4, 100, []int{100, 100, 100, 50}},
		{vnetGSOUDPL4 | vnetGSOECN, 175, []int{175, 175}},
		{vnetGSOUDPL4, 350, []int{350}},
		{vnetGSOUDPL4, 1000, []int{350}},
		{vnetGSOUDPL4, 0, nil}, // inconsistent: rejected
		{1, 1448, nil},         // TCP segmentation: not a datagram
	} {
		s, d, dgs, ok := ParseCaptured(vnet(tc.gsoType, tc.size, pkt), 14)
		var sizes []int
		off := 0
		for _, dg := range dgs {
			sizes = append(sizes, len(dg))
			if !bytes.Equal(dg, payload[off:off+len(dg)]) {
				t.Errorf("type %d size %d: datagram at %d differs", tc.gsoType, tc.size, off)
			}
			off += len(dg)
		}
		if ok != (tc.want != nil) || fmt.Sprint(sizes) != fmt.Sprint(tc.want) || ok && (s != src || d != dst) {
			t.Errorf("type %d size %d: %v %v, %v", tc.gsoType, tc.size, sizes, ok, s)
		}
	}
	for _, link := range []int{-1, 15, 100} {
		if _, _, _, ok := ParseCaptured(vnet(vnetGSONone, 0, pkt), link); ok {
			t.Errorf("link header of %d accepted", link)
		}
	}
	if _, _, _, ok := ParseCaptured(pkt[:vnetHdrLen-1], 0); ok {
		t.Error("short buffer accepted")
	}
	// No link header (a TUN).
	if _, _, dgs, ok := ParseCaptured(append(make([]byte, vnetHdrLen), pkt...), 0); !ok || len(dgs) != 1 {
		t.Error("packet without a link header rejected")
	}
}

func FuzzParseCaptured(f *testing.F) {
	pkt, _ := BuildUDP4(netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:2"), []byte("seed datagrams"), 1)
	f.Add(vnet(vnetGSONone, 0, pkt))
	f.Add(vnet(vnetGSOUDPL4, 4, pkt))
	f.Add(vnet(vnetGSOUDPL4, 0, pkt[:20]))
	f.Add([]byte{0, 5, 0, 0, 1, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 8, 0, 0x45})
	f.Add(vnet(0, 0, []byte{0x60, 0, 0, 0, 0, 8, 17, 64}))
	f.Add(vnet(0, 0, append([]byte{0x4f}, make([]byte, 70)...)))
	f.Fuzz(func(t *testing.T, b []byte) {
		src, dst, dgs, ok := ParseCaptured(b, 14)
		if !ok {
			return
		}
		// The datagrams are exactly the IP packet's UDP payload, in order.
		s2, d2, payload, ok2 := ParseUDP(b[vnetHdrLen+14:])
		if !ok2 || s2 != src || d2 != dst || !bytes.Equal(bytes.Join(dgs, nil), payload) || len(dgs) == 0 {
			t.Fatalf("datagrams %d do not rebuild the payload (%v)", len(dgs), ok2)
		}
		if !src.IsValid() || !dst.IsValid() {
			t.Fatalf("accepted with %v %v", src, dst)
		}
		// What parses as IPv4 rebuilds into a packet carrying the same.
		if src.Addr().Is4() {
			re, err := BuildUDP4(src, dst, payload, 1)
			if err != nil {
				t.Fatal(err)
			}
			s3, d3, p3, ok := ParseUDP(re)
			if !ok || s3 != src || d3 != dst || !bytes.Equal(p3, payload) {
				t.Fatalf("rebuilt packet parses as %v %v %v", s3, d3, ok)
			}
		}
	})
}

// udpOverLinks checks UDP both ways over every spoke's link.
func udpOverLinks(t *testing.T, st *Star) {
	t.Helper()
	for _, l := range st.Links {
		for _, dir := range []struct {
			from, to int
			dst      netip.Addr
		}{{l.Spoke, 0, l.HubAddr.Addr()}, {0, l.Spoke, l.SpokeAddr.Addr()}} {
			srv, err := st.ListenPacket(dir.to, "udp", netip.AddrPortFrom(dir.dst, 5555).String())
			if err != nil {
				t.Fatal(err)
			}
			c, err := st.Dial(dir.from, "udp", netip.AddrPortFrom(dir.dst, 5555).String())
			if err != nil {
				t.Fatal(err)
			}
			msg := fmt.Sprintf("from node %d to node %d", dir.from, dir.to)
			c.Write([]byte(msg))
			buf := make([]byte, 100)
			srv.SetReadDeadline(time.Now().Add(3 * time.Second))
			n, _, err := srv.ReadFrom(buf)
			if err != nil || string(buf[:n]) != msg {
				t.Fatalf("%s: got %q, %v", msg, buf[:n], err)
			}
			srv.Close()
			c.Close()
		}
	}
}

// assertStarGone checks that nothing of st is left.
func assertStarGone(t *testing.T, st *Star) {
	t.Helper()
	for i, n := range st.Nodes {
		if nsExists(n.NS) {
			t.Errorf("namespace %s left behind", n.NS)
		}
		if len(namespace.Pids(n.NS)) > 0 {
			t.Errorf("processes left in %s", n.NS)
		}
		if st.PID(i) != 0 {
			t.Errorf("endpoint of %s still running", n.Name)
		}
	}
	if _, err := os.Stat(st.Dir); !os.IsNotExist(err) {
		t.Errorf("directory %s left behind: %v", st.Dir, err)
	}
}

func TestStarTopology(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces")
	st, err := NewStar(StarConfig{Spokes: 3, Endpoints: Endpoints{Binary: selfBinary(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	udpOverLinks(t, st)
	// Spokes have no underlay path to each other: only the hub joins them.
	c, err := st.Dial(1, "udp", netip.AddrPortFrom(st.Link(2).SpokeAddr.Addr(), 5555).String())
	if err == nil {
		_, err = c.Write([]byte("x"))
		c.Close()
	}
	if err == nil {
		t.Error("spoke 1 can send to spoke 2's underlay address directly")
	}
	if err := st.StartAll(); err != nil {
		t.Fatal(err)
	}
	if err := st.StartEndpoint(2); err == nil {
		t.Error("a second start was accepted")
	}
	for i, n := range st.Nodes {
		if st.PID(i) == 0 {
			t.Fatalf("%s: no PID", n.Name)
		}
		out, err := st.Exec(i, "ip", "-br", "addr", "show", "dev", n.TUNName)
		if err != nil || !strings.Contains(string(out), n.TUN4.String()) || !strings.Contains(string(out), n.TUN6.String()) {
			t.Errorf("%s TUN: %s, %v", n.Name, out, err)
		}
	}
	// Signal and stop one spoke; the others keep running.
	if err := st.Signal(2, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, err := st.StopEndpoint(2, syscall.SIGTERM); err != nil || code != 0 {
		t.Fatalf("stop spoke 2: %d, %v", code, err)
	}
	if st.PID(2) != 0 || st.PID(1) == 0 || st.PID(0) == 0 {
		t.Fatalf("PIDs after stopping spoke 2: %d %d %d", st.PID(0), st.PID(1), st.PID(2))
	}
	if err := st.Signal(2, syscall.SIGHUP); err == nil {
		t.Error("signalling a stopped endpoint succeeded")
	}
	if tail := st.LogTail(2, 3); !strings.Contains(tail, "stopping on terminated") {
		t.Errorf("spoke 2 log tail:\n%s", tail)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	assertStarGone(t, st)
}

func TestStarCloseAfterPanic(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces")
	var st *Star
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v", r)
			}
		}()
		var err error
		st, err = NewStar(StarConfig{Spokes: 2, Endpoints: Endpoints{Binary: selfBinary(t)}})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := st.StartEndpoint(1); err != nil {
			t.Fatal(err)
		}
		stray := st.Command(0, "sleep", "60") // not tracked by the Star
		if err := stray.Start(); err != nil {
			t.Fatal(err)
		}
		go stray.Wait()
		panic("boom")
	}()
	assertStarGone(t, st)
}

func TestCaptureAndRawSend(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces")
	st, err := NewStar(StarConfig{Spokes: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l := st.Link(1)
	capt, err := st.Capture(0, l.HubDev)
	if err != nil {
		t.Fatal(err)
	}
	defer capt.Close()
	// A socket already holds the spoke's address and port, as a running
	// endpoint's would: the raw sender still sends from them.
	spokeAP := st.SpokeEndpoint(1)
	held, err := st.ListenPacket(1, "udp", spokeAP.String())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	hubAP := netip.AddrPortFrom(l.HubAddr.Addr(), 5000)
	srv, err := st.ListenPacket(0, "udp", hubAP.String())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	payloads := [][]byte{{}, []byte("one"), bytes.Repeat([]byte{0xee}, 1300)}
	if err := st.SendUDPRaw(1, spokeAP, hubAP, payloads); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	for i, want := range payloads {
		srv.SetReadDeadline(time.Now().Add(3 * time.Second))
		n, from, err := srv.ReadFrom(buf)
		if err != nil || !bytes.Equal(buf[:n], want) || from.String() != spokeAP.String() {
			t.Fatalf("datagram %d: %d bytes from %v, %v", i, n, from, err)
		}
	}
	// The reply reaches the socket that holds the address.
	srv.WriteTo([]byte("reply"), net.UDPAddrFromAddrPort(spokeAP))
	held.SetReadDeadline(time.Now().Add(3 * time.Second))
	if n, _, err := held.ReadFrom(buf); err != nil || string(buf[:n]) != "reply" {
		t.Fatalf("reply: %q, %v", buf[:n], err)
	}
	// The capture saw all of it, in both directions.
	deadline := time.Now().Add(3 * time.Second)
	var in, out []UDPPacket
	for time.Now().Before(deadline) {
		in = capt.Select(func(p UDPPacket) bool { return !p.Outgoing && p.Src == spokeAP && p.Dst == hubAP })
		out = capt.Select(func(p UDPPacket) bool { return p.Outgoing && p.Src == hubAP && p.Dst == spokeAP })
		if len(in) == len(payloads) && len(out) == 1 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(in) != len(payloads) || len(out) != 1 || string(out[0].Payload) != "reply" {
		t.Fatalf("captured %d in, %d out", len(in), len(out))
	}
	for i, p := range in {
		if !bytes.Equal(p.Payload, payloads[i]) {
			t.Errorf("captured datagram %d: %d bytes", i, len(p.Payload))
		}
	}
	// A UDP GSO send (one super-packet, which the veth passes on whole)
	// is captured as the datagrams the socket at the hub receives.
	gsoFrom := netip.AddrPortFrom(l.SpokeAddr.Addr(), 4800)
	err = st.Do(1, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: gsoFrom.Addr().As4(), Port: int(gsoFrom.Port())}); err != nil {
			return err
		}
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT, 100); err != nil {
			return err
		}
		return unix.Sendto(fd, bytes.Repeat([]byte("0123456789"), 35), 0, &unix.SockaddrInet4{Addr: hubAP.Addr().As4(), Port: int(hubAP.Port())})
	})
	if err != nil {
		t.Fatalf("GSO send: %v", err)
	}
	var sizes []int
	for range 4 {
		srv.SetReadDeadline(time.Now().Add(3 * time.Second))
		n, _, err := srv.ReadFrom(buf)
		if err != nil {
			t.Fatalf("GSO datagrams at the hub: %v after %v", err, sizes)
		}
		sizes = append(sizes, n)
	}
	var gsoSeen []int
	for time.Now().Before(deadline.Add(3 * time.Second)) {
		gsoSeen = gsoSeen[:0]
		for _, p := range capt.Select(func(p UDPPacket) bool { return p.Src == gsoFrom }) {
			gsoSeen = append(gsoSeen, len(p.Payload))
		}
		if len(gsoSeen) >= 4 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if fmt.Sprint(sizes) != "[100 100 100 50]" || fmt.Sprint(gsoSeen) != fmt.Sprint(sizes) {
		t.Errorf("GSO send: the hub received %v, the capture saw %v", sizes, gsoSeen)
	}
	if lost, err := capt.Lost(); lost != 0 || err != nil {
		t.Errorf("capture lost %d, %v", lost, err)
	}
	if err := capt.Close(); err != nil {
		t.Fatal(err)
	}
	if err := capt.Close(); err != nil { // twice is fine
		t.Fatal(err)
	}
	if len(capt.Packets()) < len(payloads)+1 {
		t.Error("packets gone after Close")
	}
	if _, err := st.Capture(0, "nosuchdev"); err == nil {
		t.Error("capture on a missing device succeeded")
	}
}
