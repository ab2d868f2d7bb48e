package tunnel

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// tcpSegment builds an IPv4 or IPv6 TCP segment from src to dst with the
// given flags, sequence number and payload, and a right checksum
// (checksum16, the reference).
func tcpSegment(src, dst netip.AddrPort, flags byte, seq uint32, payload []byte) []byte {
	var p, tcp, pseudo []byte
	n := 20 + len(payload)
	if src.Addr().Is4() {
		p = ipv4Packet(protoTCP, src.Addr().As4(), dst.Addr().As4(), n)
		tcp, pseudo = p[20:], append(append([]byte{}, p[12:20]...), 0, protoTCP, byte(n>>8), byte(n))
	} else {
		p = ipv6Packet(protoTCP, src.Addr(), dst.Addr(), n)
		tcp, pseudo = p[40:], append(append([]byte{}, p[8:40]...), 0, 0, byte(n>>8), byte(n), 0, 0, 0, protoTCP)
	}
	binary.BigEndian.PutUint16(tcp[0:], src.Port())
	binary.BigEndian.PutUint16(tcp[2:], dst.Port())
	binary.BigEndian.PutUint32(tcp[4:], seq)
	tcp[12], tcp[13] = 5<<4, flags
	binary.BigEndian.PutUint16(tcp[14:], 65535)
	copy(tcp[20:], payload)
	binary.BigEndian.PutUint16(tcp[16:], ^checksum16(tcp, checksum16(pseudo, 0)))
	return p
}

const (
	tcpSYN = 0x02
	tcpPSH = 0x08
	tcpACK = 0x10
)

func checksumValid(pkt []byte) bool {
	info, ok := parseIP(pkt)
	return ok && info.proto == protoTCP && tcpChecksumValid(pkt, info)
}

// TestTCPChecksumValid: right checksums pass in IPv4 and IPv6 whatever the
// length, padding past the IP length is not summed, and any one bit
// flipped in the pseudo-header, the TCP header or the payload fails.
func TestTCPChecksumValid(t *testing.T) {
	pairs := [][2]netip.AddrPort{
		{netip.MustParseAddrPort("10.1.0.7:40000"), netip.MustParseAddrPort("10.2.0.5:80")},
		{netip.MustParseAddrPort("[fd00:1::7]:40000"), netip.MustParseAddrPort("[fd00:2::5]:80")},
	}
	for _, ap := range pairs {
		for _, size := range []int{0, 1, 2, 3, 1379} {
			pkt := tcpSegment(ap[0], ap[1], tcpACK|tcpPSH, 1000, randomBytes(size))
			if !checksumValid(pkt) {
				t.Fatalf("%v, %d bytes: a right checksum fails", ap[0], size)
			}
			if padded := append(bytes.Clone(pkt), 1, 2, 3); !checksumValid(padded) && ap[0].Addr().Is4() {
				t.Errorf("%v, %d bytes: padding after the IP length was summed", ap[0], size)
			}
			hlen := 20
			if ap[0].Addr().Is6() {
				hlen = 40
			}
			// Every bit the sum covers: the addresses, then the segment.
			from := 12
			if ap[0].Addr().Is6() {
				from = 8
			}
			for i := from; i < len(pkt); i++ {
				if i >= from+8 && i < hlen && ap[0].Addr().Is4() {
					continue // the IPv4 header past the addresses (not summed)
				}
				for bit := range 8 {
					bad := bytes.Clone(pkt)
					bad[i] ^= 1 << bit
					if _, ok := parseIP(bad); ok && checksumValid(bad) {
						t.Fatalf("%v, %d bytes: byte %d bit %d flipped passes", ap[0], size, i, bit)
					}
				}
			}
		}
	}
	short := ipv4Packet(protoTCP, [4]byte{10, 1, 0, 7}, [4]byte{10, 2, 0, 5}, 12)
	if checksumValid(short) {
		t.Error("a segment shorter than a TCP header passes")
	}
}

// FuzzTCPChecksumValid: any packet parseIP reads as TCP is judged without
// a panic, as the reference sum judges it.
func FuzzTCPChecksumValid(f *testing.F) {
	f.Add(tcpSegment(netip.MustParseAddrPort("10.1.0.7:1"), netip.MustParseAddrPort("10.2.0.5:2"), tcpSYN, 7, nil))
	f.Add(tcpSegment(netip.MustParseAddrPort("[fd00:1::7]:1"), netip.MustParseAddrPort("[fd00:2::5]:2"), tcpACK, 7, []byte("x")))
	f.Fuzz(func(t *testing.T, pkt []byte) {
		info, ok := parseIP(pkt)
		if !ok || info.proto != protoTCP {
			return
		}
		got := tcpChecksumValid(pkt, info)
		var seg, pseudo []byte
		if info.src.Is4() {
			seg = pkt[info.hlen:binary.BigEndian.Uint16(pkt[2:])]
			pseudo = append(append([]byte{}, pkt[12:20]...), 0, protoTCP, byte(len(seg)>>8), byte(len(seg)))
		} else {
			seg = pkt[40 : 40+int(binary.BigEndian.Uint16(pkt[4:]))]
			pseudo = append(append([]byte{}, pkt[8:40]...), 0, 0, byte(len(seg)>>8), byte(len(seg)), 0, 0, 0, protoTCP)
		}
		want := len(seg) >= 20 && checksum16(seg, checksum16(pseudo, 0)) == 0xffff
		if got != want {
			t.Fatalf("valid %v, the reference says %v", got, want)
		}
	})
}

// TestTUNBadChecksumSYN: a SYN with a wrong TCP checksum from the LAN gets
// no SYN-ACK (it is dropped and counted), a right one gets one.
func TestTUNBadChecksumSYN(t *testing.T) {
	_, a, b := twoSites(t)
	b.echo(7)
	synAcks := make(chan uint16, 16) // the ports SYN-ACKs went to
	tap := func(pkt []byte) {
		if info, ok := parseIP(pkt); ok && info.proto == protoTCP && len(pkt) >= info.hlen+20 {
			if tcp := pkt[info.hlen:]; tcp[13]&(tcpSYN|tcpACK) == tcpSYN|tcpACK {
				select {
				case synAcks <- binary.BigEndian.Uint16(tcp[2:]):
				default:
				}
			}
		}
	}
	a.tap.Store(&tap)
	defer a.tap.Store(nil)
	dst := netip.MustParseAddrPort("10.2.0.5:7")
	bad := tcpSegment(netip.MustParseAddrPort("10.1.0.9:40001"), dst, tcpSYN, 1, nil)
	bad[len(bad)-1] ^= 0x40 // the urgent pointer: the checksum no longer holds
	a.inject(bad)
	a.inject(tcpSegment(netip.MustParseAddrPort("10.1.0.9:40002"), dst, tcpSYN, 1, nil))
	// The TUN is read in order: once the right SYN is answered, the wrong
	// one was judged.
	select {
	case port := <-synAcks:
		if port != 40002 {
			t.Errorf("the SYN with a wrong checksum (port 40001) got a SYN-ACK")
		}
	case <-time.After(waitTime):
		t.Fatal("the SYN with a right checksum got no SYN-ACK")
	}
	select {
	case port := <-synAcks:
		if port == 40001 {
			t.Errorf("the SYN with a wrong checksum got a SYN-ACK")
		}
	case <-time.After(100 * time.Millisecond): // room for one, were it coming
	}
	if n := a.ep.Status().Counters.TunBadChecksum; n != 1 {
		t.Errorf("tun_bad_checksum %d, want 1", n)
	}
}

// TestTUNCorruptSegment: a data segment corrupted on the LAN (its checksum
// no longer holds) is not taken: the client's retransmission carries the
// bytes, which reach the far server and come back unchanged.
func TestTUNCorruptSegment(t *testing.T) {
	_, a, b := twoSites(t)
	b.echo(7)
	conn := openEcho(t, a, "10.2.0.5:7")
	marker := []byte("corrupt-this-segment-once")
	var corrupted bool // only the tamper func (one LAN writer) touches it
	f := func(pkt []byte) {
		if i := bytes.Index(pkt, marker); i >= 0 && !corrupted {
			corrupted = true
			pkt[i] ^= 0x20 // 'c' -> 'C'
		}
	}
	a.tamper.Store(&f)
	conn.SetDeadline(time.Now().Add(waitTime))
	if _, err := conn.Write(marker); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(marker))
	if _, err := conn.Read(got); err != nil {
		t.Fatalf("read the echo: %v", err)
	}
	a.tamper.Store(nil)
	if !corrupted {
		t.Fatal("the segment was never corrupted")
	}
	if !bytes.Equal(got, marker) {
		t.Errorf("echo %q, sent %q: the corrupted segment was taken", got, marker)
	}
	if n := a.ep.Status().Counters.TunBadChecksum; n != 1 {
		t.Errorf("tun_bad_checksum %d, want 1", n)
	}
	if err := echoCheck(conn, 64<<10); err != nil {
		t.Errorf("the flow after the corrupted segment: %v", err)
	}
}

// BenchmarkTCPChecksumValid: the cost of checking a segment the kernel did
// not vouch for, per byte (docs/performance.md).
func BenchmarkTCPChecksumValid(b *testing.B) {
	for _, size := range []int{1360, 65000} {
		pkt := tcpSegment(netip.MustParseAddrPort("10.1.0.7:40000"), netip.MustParseAddrPort("10.2.0.5:80"), tcpACK, 1, randomBytes(size))
		info, _ := parseIP(pkt)
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			b.SetBytes(int64(len(pkt)))
			for b.Loop() {
				if !tcpChecksumValid(pkt, info) {
					b.Fatal("invalid")
				}
			}
		})
	}
}
