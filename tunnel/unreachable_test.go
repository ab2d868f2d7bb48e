package tunnel

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"
)

func TestUnreachableIPv4(t *testing.T) {
	pkt := ipv4Packet(17, [4]byte{10, 1, 0, 1}, [4]byte{10, 3, 0, 9}, 40)
	info, _ := parseIP(pkt)
	out := unreachable(pkt, info)
	got, ok := parseIP(out)
	if !ok || got.proto != protoICMPv4 || got.src != info.dst || got.dst != info.src {
		t.Fatalf("reply header %+v %v", got, ok)
	}
	if checksum(out[:20], 0) != 0xffff {
		t.Error("bad IPv4 header checksum")
	}
	icmp := out[20:]
	if icmp[0] != icmpv4Unreachable || checksum(icmp, 0) != 0xffff {
		t.Errorf("ICMP type %d, checksum ok %v", icmp[0], checksum(icmp, 0) == 0xffff)
	}
	if len(icmp) != 8+20+8 {
		t.Errorf("quote is %d bytes, want the header and 8 bytes", len(icmp)-8)
	}
	// Never answer an ICMP error, multicast or broadcast.
	errPkt := out
	if info, _ := parseIP(errPkt); unreachable(errPkt, info) != nil {
		t.Error("answered an ICMP error")
	}
	bcast := ipv4Packet(17, [4]byte{10, 1, 0, 1}, [4]byte{255, 255, 255, 255}, 8)
	if info, _ := parseIP(bcast); unreachable(bcast, info) != nil {
		t.Error("answered a broadcast")
	}
}

func TestUnreachableIPv6(t *testing.T) {
	src, dst := netip.MustParseAddr("fd00:1::1"), netip.MustParseAddr("fd00:3::9")
	pkt := ipv6Packet(17, src, dst, 2000)
	info, _ := parseIP(pkt)
	out := unreachable(pkt, info)
	got, ok := parseIP(out)
	if !ok || got.proto != protoICMPv6 || got.src != dst || got.dst != src {
		t.Fatalf("reply header %+v %v", got, ok)
	}
	if len(out) > 1280 {
		t.Errorf("reply is %d bytes, over the IPv6 minimum MTU", len(out))
	}
	var ph [40]byte
	copy(ph[:32], out[8:40])
	binary.BigEndian.PutUint32(ph[32:], uint32(len(out)-40))
	ph[39] = protoICMPv6
	if checksum(out[40:], checksum(ph[:], 0)) != 0xffff {
		t.Error("bad ICMPv6 checksum")
	}
	if info, _ := parseIP(out); unreachable(out, info) != nil {
		t.Error("answered an ICMPv6 error")
	}
	mc := ipv6Packet(58, src, netip.MustParseAddr("ff02::2"), 16)
	if info, _ := parseIP(mc); unreachable(mc, info) != nil {
		t.Error("answered multicast")
	}
}

func TestUnreachableRateLimit(t *testing.T) {
	r := rateLimiter{perSecond: unreachPerSecond}
	now := time.Unix(1000, 0)
	n := 0
	for i := 0; i < 1000; i++ {
		if r.allow(now) {
			n++
		}
	}
	if n != unreachPerSecond {
		t.Errorf("%d allowed in one instant, want %d", n, unreachPerSecond)
	}
	if !r.allow(now.Add(20 * time.Millisecond)) {
		t.Error("no token after 20 ms")
	}
}

// FuzzUnreachable: whatever a LAN host sends, the refusals built from it
// parse, and the QUIC path's reads of it (ports, CE mark) keep it a packet.
func FuzzUnreachable(f *testing.F) {
	f.Add(ipv4Packet(1, [4]byte{10, 1, 0, 1}, [4]byte{10, 3, 0, 9}, 8))
	f.Add(ipv6Packet(58, netip.MustParseAddr("fd00:1::1"), netip.MustParseAddr("fd00:3::9"), 8))
	f.Add(udpPacket(netip.MustParseAddrPort("10.1.0.7:40000"), netip.MustParseAddrPort("10.2.0.5:443"), []byte("quic initial")))
	f.Fuzz(func(t *testing.T, b []byte) {
		info, ok := parseIP(b)
		if !ok {
			return
		}
		if out := unreachable(b, info); out != nil {
			if _, ok := parseIP(out); !ok {
				t.Fatal("reply does not parse")
			}
		}
		// The QUIC path's reads of a LAN packet: its ports, the refusal
		// (quic = "fallback"), and the marker's in-place CE mark.
		if _, _, ok := udpPorts(b, info); ok {
			if out := portUnreachable(b, info); out != nil {
				if _, ok := parseIP(out); !ok {
					t.Fatal("port unreachable does not parse")
				}
			}
		}
		if markCE(b) {
			if again, ok := parseIP(b); !ok || again != info {
				t.Fatalf("marked CE, the packet reads %+v %v, was %+v", again, ok, info)
			}
		}
	})
}
