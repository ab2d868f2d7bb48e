package tunnel

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// vnetRead is what a TUN with virtio-net headers returns: the header, then
// the packet.
func vnetRead(flags, gso byte, csumStart, csumOff int, pkt []byte) []byte {
	b := make([]byte, 10, 10+len(pkt))
	b[0], b[1] = flags, gso
	binary.NativeEndian.PutUint16(b[6:], uint16(csumStart))
	binary.NativeEndian.PutUint16(b[8:], uint16(csumOff))
	return append(b, pkt...)
}

// checksum16 is RFC 1071 word by word, the reference for checksum.
func checksum16(b []byte, initial uint16) uint16 {
	sum := uint32(initial)
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return uint16(sum)
}

func TestChecksumMatchesRFC1071(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for n := 0; n < 300; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		initial := uint16(r.Uint32())
		if got, want := checksum(b, initial), checksum16(b, initial); got != want {
			t.Fatalf("%d bytes: %#04x, want %#04x", n, got, want)
		}
	}
	if got := checksum(bytes.Repeat([]byte{0xff}, 70000), 0xffff); got != 0xffff {
		t.Fatalf("all ones: %#04x", got)
	}
}

// udpPartial builds a UDP datagram as the kernel hands it over with a
// partial checksum: the field holds the pseudo-header's sum.
func udpPartial(v6 bool, payload int) (pkt []byte, start int, pseudo []byte) {
	src4, dst4 := [4]byte{10, 1, 0, 1}, [4]byte{10, 2, 0, 1}
	src6, dst6 := netip.MustParseAddr("fd00:1::1"), netip.MustParseAddr("fd00:2::1")
	l := 8 + payload
	if v6 {
		pkt, start = ipv6Packet(protoUDP, src6, dst6, l), 40
		s, d := src6.As16(), dst6.As16()
		pseudo = append(append(pseudo, s[:]...), d[:]...)
		pseudo = append(pseudo, 0, 0, byte(l>>8), byte(l), 0, 0, 0, protoUDP)
	} else {
		pkt, start = ipv4Packet(protoUDP, src4, dst4, l), 20
		pseudo = append(append(pseudo, src4[:]...), dst4[:]...)
		pseudo = append(pseudo, 0, protoUDP, byte(l>>8), byte(l))
	}
	u := pkt[start:]
	binary.BigEndian.PutUint16(u[0:], 5353)
	binary.BigEndian.PutUint16(u[2:], 53)
	binary.BigEndian.PutUint16(u[4:], uint16(l))
	for i := 8; i < len(u); i++ {
		u[i] = byte(i * 7)
	}
	binary.BigEndian.PutUint16(u[6:], checksum16(pseudo, 0))
	return pkt, start, pseudo
}

// TestVnetPacketCompletesChecksum: a non-TCP packet with a partial
// checksum leaves with its checksum complete (it may go on to a peer and a
// host that checks it), for IPv4 and IPv6 and odd lengths.
func TestVnetPacketCompletesChecksum(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, payload := range []int{0, 1, 7, 1200} {
			pkt, start, pseudo := udpPartial(v6, payload)
			got, _, err := vnetPacket(vnetRead(vnetNeedsCsum, vnetGSONone, start, 6, pkt))
			if err != nil {
				t.Fatalf("v6 %v, %d bytes: %v", v6, payload, err)
			}
			if len(got) != len(pkt) {
				t.Fatalf("v6 %v: %d bytes out of %d", v6, len(got), len(pkt))
			}
			if sum := checksum16(got[start:], checksum16(pseudo, 0)); sum != 0xffff {
				t.Errorf("v6 %v, %d bytes: checksum does not verify (%#04x)", v6, payload, sum)
			}
			if !bytes.Equal(got[:start], pkt[:start]) || !bytes.Equal(got[start+8:], pkt[start+8:]) {
				t.Errorf("v6 %v, %d bytes: more than the checksum changed", v6, payload)
			}
		}
	}
}

// TestVnetPacketTCPWhole: a TCP segment comes out whole and unchanged,
// however far beyond the MTU, its partial checksum left for the stack; the
// kernel vouched for its checksum when it says the sum is partial or was
// checked, and only then.
func TestVnetPacketTCPWhole(t *testing.T) {
	seg4 := ipv4Packet(protoTCP, [4]byte{10, 1, 0, 1}, [4]byte{10, 2, 0, 1}, 65000)
	seg6 := ipv6Packet(protoTCP, netip.MustParseAddr("fd00:1::1"), netip.MustParseAddr("fd00:2::1"), 65000)
	plain := ipv4Packet(protoTCP, [4]byte{10, 1, 0, 1}, [4]byte{10, 2, 0, 1}, 1480)
	for _, c := range []struct {
		name    string
		read    []byte
		vouched bool
	}{
		{"v4 GSO", vnetRead(vnetNeedsCsum, vnetGSOTCPv4, 20, 16, seg4), true},
		{"v6 GSO", vnetRead(vnetNeedsCsum, vnetGSOTCPv6, 40, 16, seg6), true},
		{"v4 GSO checked", vnetRead(vnetDataValid, vnetGSOTCPv4, 0, 0, seg4), true},
		{"v4 GSO unchecked", vnetRead(0, vnetGSOTCPv4, 0, 0, seg4), false},
		{"v4 partial", vnetRead(vnetNeedsCsum, vnetGSONone, 20, 16, plain), true},
		{"v4 checked", vnetRead(vnetDataValid, vnetGSONone, 0, 0, plain), true},
		{"v4 unchecked", vnetRead(0, vnetGSONone, 0, 0, plain), false},
	} {
		want := append([]byte(nil), c.read[10:]...)
		got, vouched, err := vnetPacket(c.read)
		if err != nil || !bytes.Equal(got, want) || &got[0] != &c.read[10] {
			t.Errorf("%s: %d bytes (want %d in place), %v", c.name, len(got), len(want), err)
		}
		if vouched != c.vouched {
			t.Errorf("%s: vouched %v, want %v", c.name, vouched, c.vouched)
		}
	}
}

// TestVnetPacketRefuses: reads the endpoint cannot pass on whole are
// refused, never cut short or misread.
func TestVnetPacketRefuses(t *testing.T) {
	udp, start, _ := udpPartial(false, 100)
	tcp := ipv4Packet(protoTCP, [4]byte{10, 1, 0, 1}, [4]byte{10, 2, 0, 1}, 100)
	for name, read := range map[string][]byte{
		"short header":          {0, 0, 0},
		"not IP":                vnetRead(0, vnetGSONone, 0, 0, []byte{0x10, 1, 2, 3}),
		"UDP segmentation":      vnetRead(vnetNeedsCsum, 5, start, 6, udp),
		"TCP GSO on UDP":        vnetRead(vnetNeedsCsum, vnetGSOTCPv4, start, 6, udp),
		"unknown GSO on TCP":    vnetRead(vnetNeedsCsum, 3, 20, 16, tcp),
		"checksum past end":     vnetRead(vnetNeedsCsum, vnetGSONone, start, len(udp), udp),
		"checksum start past":   vnetRead(vnetNeedsCsum, vnetGSONone, len(udp), 0, udp),
		"checksum in IP header": vnetRead(vnetNeedsCsum, vnetGSONone, 1, 0, udp),
	} {
		if got, _, err := vnetPacket(read); err == nil {
			t.Errorf("%s: accepted (%d bytes)", name, len(got))
		}
	}
}

// Whatever a read holds, vnetPacket returns an IP packet lying in the read
// after its header, or an error.
func FuzzVnetPacket(f *testing.F) {
	udp, start, _ := udpPartial(false, 20)
	f.Add(vnetRead(vnetNeedsCsum, vnetGSONone, start, 6, udp))
	f.Add(vnetRead(vnetNeedsCsum, vnetGSOTCPv4, 20, 16, ipv4Packet(protoTCP, [4]byte{10, 1, 0, 1}, [4]byte{10, 2, 0, 1}, 3000)))
	f.Fuzz(func(t *testing.T, b []byte) {
		n := len(b)
		pkt, _, err := vnetPacket(b)
		if err != nil {
			return
		}
		if len(pkt) != n-10 || len(pkt) > 0 && &pkt[0] != &b[10] {
			t.Fatalf("packet of %d bytes from a %d-byte read", len(pkt), n)
		}
		if _, ok := parseIP(pkt); !ok {
			t.Fatal("accepted a packet that is not IP")
		}
	})
}
