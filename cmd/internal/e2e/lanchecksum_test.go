package e2e

// TCP checksums from the LAN: the kernel checks no TCP checksum of a raw
// packet a host sends (nor of one it forwards), so the endpoint, which
// terminates the client's TCP, must. A LAN host at site A sends through a
// raw socket, toward a server at site B: a SYN with a wrong checksum gets
// no SYN-ACK, and a data segment with a wrong checksum on a real
// connection is not acknowledged and never reaches the server. Each has a
// control sent the same way with a right checksum, which is answered.

import (
	be "encoding/binary"
	"io"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"scpsvpn/cmd/internal/testbed"
)

// rawTCP sends IPv4 packets as built (IP_HDRINCL) and receives a copy of
// every TCP packet delivered to its namespace.
type rawTCP struct{ send, recv int }

func openRawTCP(t *testing.T, tb *testbed.Testbed, side testbed.Side) *rawTCP {
	t.Helper()
	r := &rawTCP{send: -1, recv: -1}
	err := tb.Do(side, func() error {
		var err error
		if r.send, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW); err != nil {
			return err
		}
		r.recv, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
		return err
	})
	t.Cleanup(func() {
		for _, fd := range []int{r.send, r.recv} {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	})
	if err != nil {
		t.Fatalf("raw sockets: %v", err)
	}
	tv := unix.NsecToTimeval((50 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(r.recv, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rawTCP) write(t *testing.T, pkt []byte) {
	t.Helper()
	to := &unix.SockaddrInet4{Addr: [4]byte(pkt[16:20])}
	if err := unix.Sendto(r.send, pkt, 0, to); err != nil {
		t.Fatalf("raw send: %v", err)
	}
}

// tcpSeen is a received TCP segment's header.
type tcpSeen struct {
	src, dst netip.AddrPort
	seq, ack uint32
	flags    byte
}

// wait returns the first TCP segment received before deadline for which
// match holds.
func (r *rawTCP) wait(deadline time.Time, match func(tcpSeen) bool) (tcpSeen, bool) {
	buf := make([]byte, 65536)
	for time.Now().Before(deadline) {
		n, _, err := unix.Recvfrom(r.recv, buf, 0)
		if err != nil || n < 20 {
			continue // EAGAIN at each receive timeout
		}
		ihl := int(buf[0]&0x0f) * 4
		if n < ihl+20 {
			continue
		}
		tcp := buf[ihl:n]
		s := tcpSeen{
			src:   netip.AddrPortFrom(netip.AddrFrom4([4]byte(buf[12:16])), be.BigEndian.Uint16(tcp[0:])),
			dst:   netip.AddrPortFrom(netip.AddrFrom4([4]byte(buf[16:20])), be.BigEndian.Uint16(tcp[2:])),
			seq:   be.BigEndian.Uint32(tcp[4:]),
			ack:   be.BigEndian.Uint32(tcp[8:]),
			flags: tcp[13],
		}
		if match(s) {
			return s, true
		}
	}
	return tcpSeen{}, false
}

// breakChecksum makes a built segment's TCP checksum wrong.
func breakChecksum(pkt []byte) []byte {
	pkt[20+16] ^= 0x5a
	return pkt
}

func TestLANBadTCPChecksum(t *testing.T) {
	tb := twoSites(t, testbed.Config{})
	a, b := tb.Site(testbed.A), tb.Site(testbed.B)
	ln, err := tb.Listen(testbed.B, "tcp", hostPort(b.TUN4, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const size = 16
	received := make(chan []byte, 4) // the first size bytes each connection's server read
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(30 * time.Second))
				data := make([]byte, size)
				n, _ := io.ReadFull(c, data)
				received <- data[:n]
			}()
		}
	}()
	server := netip.MustParseAddrPort(ln.Addr().String())
	raw := openRawTCP(t, tb, testbed.A)
	synAckTo := func(port uint16) func(tcpSeen) bool {
		return func(s tcpSeen) bool {
			return s.src == server && s.dst.Port() == port && s.flags&(tcpFlagSYN|tcpFlagACK) == tcpFlagSYN|tcpFlagACK
		}
	}

	// A SYN with a wrong checksum, then one with a right checksum: the TUN
	// is read in order, so once the second is answered the first was
	// judged. (Our own kernel resets both handshakes: it knows neither.)
	badPort, goodPort := uint16(41001), uint16(41002)
	raw.write(t, breakChecksum(buildSYN4(netip.AddrPortFrom(a.TUN4, badPort), server, 1000)))
	raw.write(t, buildSYN4(netip.AddrPortFrom(a.TUN4, goodPort), server, 1000))
	answered := map[uint16]bool{}
	anyAnswer := func(s tcpSeen) bool {
		for _, p := range []uint16{badPort, goodPort} {
			if synAckTo(p)(s) {
				answered[p] = true
			}
		}
		return answered[goodPort]
	}
	if _, ok := raw.wait(time.Now().Add(15*time.Second), anyAnswer); !ok {
		t.Fatal("the SYN with a right checksum got no SYN-ACK")
	}
	raw.wait(time.Now().Add(500*time.Millisecond), func(s tcpSeen) bool { anyAnswer(s); return false })
	if answered[badPort] {
		t.Error("the SYN with a wrong TCP checksum got a SYN-ACK")
	}

	// A real connection from A's kernel; its numbers come from the
	// SYN-ACK the raw socket sees too.
	c, err := tb.Dial(testbed.A, "tcp", server.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	local := netip.MustParseAddrPort(c.LocalAddr().String())
	synAck, ok := raw.wait(time.Now().Add(5*time.Second), synAckTo(local.Port()))
	if !ok {
		t.Fatal("the raw socket saw no SYN-ACK for the kernel's connection")
	}
	seq, ack := synAck.ack, synAck.seq+1 // our next sequence number, theirs
	acked := func(s tcpSeen) bool {
		return s.src == server && s.dst == local && s.flags&tcpFlagACK != 0 && int32(s.ack-seq) > 0
	}
	corrupt, good := []byte("AAAAAAAAAAAAAAAA"), []byte("BBBBBBBBBBBBBBBB") // size bytes
	raw.write(t, breakChecksum(buildTCP4(local, server, seq, ack, tcpFlagACK|tcpFlagPSH, corrupt)))
	if s, ok := raw.wait(time.Now().Add(time.Second), acked); ok {
		t.Errorf("a data segment with a wrong checksum was acknowledged (ack %d, sent from %d)", s.ack, seq)
	}
	raw.write(t, buildTCP4(local, server, seq, ack, tcpFlagACK|tcpFlagPSH, good))
	if _, ok := raw.wait(time.Now().Add(15*time.Second), acked); !ok {
		t.Error("the same segment with a right checksum was not acknowledged")
	}
	if got := <-received; string(got) != string(good) { // within the server's deadline
		t.Errorf("the server read %q, want %q", got, good)
	}
	if n := countersOf(t, tb, testbed.A).TunBadChecksum; n != 2 {
		t.Errorf("site A counted %d TCP segments with a bad checksum, want 2", n)
	}
}
