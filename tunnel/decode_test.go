package tunnel

import (
	"bytes"
	"net/netip"
	"testing"
)

func ipv4Packet(proto byte, src, dst [4]byte, payload int) []byte {
	p := make([]byte, 20+payload)
	p[0] = 0x45
	p[2], p[3] = byte(len(p)>>8), byte(len(p))
	p[8], p[9] = 64, proto
	copy(p[12:], src[:])
	copy(p[16:], dst[:])
	return p
}

func ipv6Packet(next byte, src, dst netip.Addr, payload int) []byte {
	p := make([]byte, 40+payload)
	p[0] = 0x60
	p[4], p[5] = byte(payload>>8), byte(payload)
	p[6], p[7] = next, 64
	s, d := src.As16(), dst.As16()
	copy(p[8:], s[:])
	copy(p[24:], d[:])
	return p
}

func TestParseIP(t *testing.T) {
	info, ok := parseIP(ipv4Packet(17, [4]byte{10, 1, 0, 1}, [4]byte{10, 2, 0, 1}, 8))
	if !ok || info.proto != 17 || info.src != netip.MustParseAddr("10.1.0.1") || info.dst != netip.MustParseAddr("10.2.0.1") {
		t.Fatalf("v4: %+v %v", info, ok)
	}
	s6, d6 := netip.MustParseAddr("fd00:1::1"), netip.MustParseAddr("fd00:2::1")
	info, ok = parseIP(ipv6Packet(6, s6, d6, 20))
	if !ok || info.proto != 6 || info.src != s6 || info.dst != d6 {
		t.Fatalf("v6: %+v %v", info, ok)
	}
	bad := [][]byte{nil, {0x45}, ipv4Packet(6, [4]byte{}, [4]byte{}, 0)[:19], {0x60, 0, 0, 0}, {0x70}}
	short := ipv4Packet(6, [4]byte{}, [4]byte{}, 10)
	short[3] = 200 // total length beyond the packet
	bad = append(bad, short)
	for i, b := range bad {
		if _, ok := parseIP(b); ok {
			t.Errorf("bad packet %d accepted", i)
		}
	}
}

func TestMetaRoundTrip(t *testing.T) {
	for _, m := range []flowMeta{
		{netip.MustParseAddrPort("10.1.0.1:5555"), netip.MustParseAddrPort("10.2.0.1:80")},
		{netip.MustParseAddrPort("[fd00:1::1]:40000"), netip.MustParseAddrPort("[fd00:2::5]:443")},
	} {
		got, err := parseMeta(m.marshal())
		if err != nil || got != m {
			t.Errorf("round trip %v: got %v, %v", m, got, err)
		}
	}
	for _, b := range [][]byte{nil, {1}, {2, 4}, {1, 5, 0, 0}, {1, 4, 1, 2, 3, 4, 0, 0, 1, 2, 3, 4, 0, 1}} {
		if _, err := parseMeta(b); err == nil {
			t.Errorf("parseMeta(%x) accepted", b)
		}
	}
}

func TestParamsRoundTrip(t *testing.T) {
	p := assocParams{version: wireVersion, instance: 0x0102030405060708, assoc: 0x1112131415161718, up: 1_500_000, down: 64_000, rttMS: 600}
	got, err := parseParams(p.marshal())
	if err != nil || got != p {
		t.Fatalf("got %+v, %v", got, err)
	}
	old := p
	old.version = 9
	if _, err := parseParams(old.marshal()); err == nil {
		t.Error("foreign version accepted")
	}
	for _, n := range []int{0, 1, 11, 17, 18} {
		if _, err := parseParams(p.marshal()[:n]); err == nil {
			t.Errorf("params truncated to %d bytes accepted", n)
		}
	}
}

func FuzzParseIP(f *testing.F) {
	f.Add(ipv4Packet(6, [4]byte{10, 1, 0, 1}, [4]byte{10, 2, 0, 1}, 20))
	f.Add(ipv6Packet(58, netip.MustParseAddr("fd00:1::1"), netip.MustParseAddr("fd00:2::1"), 8))
	f.Fuzz(func(t *testing.T, b []byte) {
		info, ok := parseIP(b)
		if ok && !info.src.IsValid() {
			t.Fatal("ok without addresses")
		}
	})
}

func FuzzParseMeta(f *testing.F) {
	f.Add(flowMeta{netip.MustParseAddrPort("10.1.0.1:5555"), netip.MustParseAddrPort("10.2.0.1:80")}.marshal())
	f.Add(flowMeta{netip.MustParseAddrPort("[fd00:1::1]:1"), netip.MustParseAddrPort("[fd00:2::5]:2")}.marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseMeta(b)
		if err == nil && !bytes.Equal(m.marshal(), b) {
			t.Fatalf("accepted %x but re-encodes as %x", b, m.marshal())
		}
	})
}

func FuzzParseParams(f *testing.F) {
	f.Add(assocParams{version: wireVersion, instance: 7, assoc: 9, up: 1, down: 2, rttMS: 3}.marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := parseParams(b)
		if err == nil && !bytes.HasPrefix(b, p.marshal()) {
			t.Fatalf("accepted %x but re-encodes as %x", b, p.marshal())
		}
	})
}
