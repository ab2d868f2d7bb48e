package tunnel

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"
	"time"

	"scpsvpn/scps/varint"
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
	for _, b := range [][]byte{nil, {1}, {2, 4}, {1, 5, 0, 0}, {1, 4, 1, 2, 3, 4, 0, 0, 1, 2, 3, 4, 0, 1}, {3, 4, 1, 2, 3, 4, 0, 1, 1, 2, 3, 4, 0, 1}} {
		if _, err := parseMeta(b); err == nil {
			t.Errorf("parseMeta(%x) accepted", b)
		}
	}
}

func TestParamsRoundTrip(t *testing.T) {
	edges := []uint64{0, 63, 64, 16383, 16384, 1<<30 - 1, 1 << 30, varint.Max}
	for i, v := range edges {
		p := assocParams{version: wireVersion, caps: uint8(i), instance: 0x0102030405060708 + uint64(i),
			assoc: 0x1112131415161718 + uint64(i), up: v, down: edges[len(edges)-1-i], rttMS: v / 3}
		b := p.marshal()
		if want := paramsFixed + varint.Len(p.up) + varint.Len(p.down) + varint.Len(p.rttMS); len(b) != want {
			t.Errorf("%+v: %d bytes, want %d", p, len(b), want)
		}
		got, err := parseParams(b)
		if err != nil || got != p {
			t.Errorf("round trip %+v: got %+v, %v", p, got, err)
		}
	}
	p := assocParams{version: wireVersion, instance: 7, assoc: 9, up: 1_500_000, down: 64_000, rttMS: 600}
	b := p.marshal()
	// The spec's layout: 18 fixed bytes, then 4-, 4- and 2-byte varints.
	want := []byte{wireVersion, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 9,
		0x80, 0x16, 0xe3, 0x60, 0x80, 0, 0xfa, 0, 0x42, 0x58}
	if !bytes.Equal(b, want) {
		t.Errorf("encoded %x, want %x", b, want)
	}
	// Version 2 had the same fixed part and LEB128 integers.
	v2 := append([]byte{2}, b[1:paramsFixed]...)
	v2 = append(v2, 0xe0, 0xc6, 0x5b, 0x80, 0xf4, 0x03, 0xd8, 0x04)
	if _, err := parseParams(v2); err == nil || !strings.Contains(err.Error(), "wire version 2") {
		t.Errorf("version 2 payload: %v", err)
	}
	for _, n := range []int{0, 1, 11, paramsFixed - 1, paramsFixed, len(b) - 1} {
		if _, err := parseParams(b[:n]); err == nil {
			t.Errorf("params truncated to %d bytes accepted", n)
		}
	}
	for name, bad := range map[string][]byte{
		"trailing byte": append(append([]byte(nil), b...), 0),
		// rtt 600 as a 4-byte varint instead of 2 bytes
		"long form": append(append([]byte(nil), b[:len(b)-2]...), 0x80, 0, 0x02, 0x58),
	} {
		if _, err := parseParams(bad); err == nil {
			t.Errorf("%s params accepted: %x", name, bad)
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

// Every accepted payload is of our version and has exactly one encoding:
// it re-encodes to the same bytes.
func FuzzParseParams(f *testing.F) {
	f.Add(assocParams{version: wireVersion, instance: 7, assoc: 9, up: 1, down: 2, rttMS: 3}.marshal())
	f.Add(assocParams{version: wireVersion, caps: 1, instance: 1 << 63, assoc: 0, up: varint.Max, down: 64_000, rttMS: 600}.marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := parseParams(b)
		if err != nil {
			return
		}
		if p.version != wireVersion {
			t.Fatalf("accepted version %d", p.version)
		}
		if again := p.marshal(); !bytes.Equal(again, b) {
			t.Fatalf("accepted %x but re-encodes as %x", b, again)
		}
	})
}

// FuzzRepairFrame: a run of repaired-flow frames, whatever their bytes
// (each cut from the input by a 2-byte length), parses or is refused,
// never panics; an accepted frame re-encodes to its bytes; and the
// receiver, fed the run, delivers no empty packet and stays within its
// bounds.
func FuzzRepairFrame(f *testing.F) {
	frames, _ := fecFrames(7, 40, 6, 2, false)
	var seed []byte
	for i, fr := range frames {
		if i%9 == 4 {
			continue // lost: the run has parities rebuild it
		}
		seed = binary.BigEndian.AppendUint16(seed, uint16(len(fr)))
		seed = append(seed, fr...)
	}
	f.Add(seed)
	// Three parities a block, three of a block's frames lost.
	frames, _ = fecFrames(7, 40, 8, 3, false)
	seed = nil
	for i, fr := range frames {
		if i%11 < 3 {
			continue
		}
		seed = binary.BigEndian.AppendUint16(seed, uint16(len(fr)))
		seed = append(seed, fr...)
	}
	f.Add(seed)
	// Wide blocks: 64 datagrams and four parities, four of a block's
	// frames lost.
	frames, _ = fecFrames(7, 150, fecMaxBlock, fecMaxParities, false)
	seed = nil
	for i, fr := range frames {
		if i%17 == 3 {
			continue
		}
		seed = binary.BigEndian.AppendUint16(seed, uint16(len(fr)))
		seed = append(seed, fr...)
	}
	f.Add(seed)
	// Compact frames: each block's first a datagram frame (the flow's
	// addresses), the others compact, one of a block's frames lost.
	seed = nil
	frames, _ = fecFrames(7, 40, 8, 2, true)
	for i, fr := range frames {
		if i%10 == 6 {
			continue
		}
		seed = binary.BigEndian.AppendUint16(seed, uint16(len(fr)))
		seed = append(seed, fr...)
	}
	f.Add(seed)
	f.Add([]byte{0, 17, fecCompact, 0, 0, 0, 7, 0, 0, 0, 1, 1, compactDF, 0, 64, 0, 0, 0, 0})
	f.Add([]byte{0, 14, fecParity, 0, 0, 0, 7, 0, 0, 0, 0, 64, 0x43, 0, 9, 1})
	f.Add([]byte{0, 11, fecData, 0, 0, 0, 7, 0xff, 0xff, 0xff, 0xff, 63, 0x45})
	f.Add([]byte{0, 14, fecParity, 0, 0, 0, 7, 0, 0, 0, 0, 3, 0x21, 0, 9, 1})
	f.Add([]byte{0, 11, fecData, 0, 0, 0, 7, 0xff, 0xff, 0xff, 0xff, 31, 0x45})
	f.Add(append([]byte{0, fecResendLen}, appendFecResend(nil, 7, 3, 0x8000000000000005)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		var st Stats
		var rx quicRx
		for len(b) >= 2 {
			n := min(int(binary.BigEndian.Uint16(b)), len(b)-2)
			fr := b[2 : 2+n]
			b = b[2+n:]
			if h, body, err := parseFec(fr); err == nil {
				var re []byte
				switch h.typ {
				case fecData, fecCompact:
					re = appendFecFrame(nil, h.typ, h.flow, h.seq, int(h.index), body)
				case fecResend:
					re = appendFecResend(nil, h.flow, h.seq, h.mask)
				default:
					re = appendFecParity(nil, h.flow, h.seq, int(h.count), int(h.parities), h.which, body)
				}
				if !bytes.Equal(re, fr) {
					t.Fatalf("%x re-encodes as %x", fr, re)
				}
			}
			now := time.Unix(1, 0).Add(time.Duration(len(b)) * time.Millisecond)
			out, f := rx.take(&st, fr, now)
			if f != nil {
				// The hold timer's work: ask for the gaps, give up the
				// asked ones whose wait passed.
				out = append(out, rx.holdOver(&st, f, now.Add(2*time.Second))...)
			}
			for _, p := range out {
				if len(p) == 0 {
					t.Fatal("an empty packet delivered")
				}
			}
			for _, a := range rx.takeAsks() {
				if h, _, err := parseFec(a); err != nil || h.typ != fecResend {
					t.Fatalf("resend request %x: %v", a, err)
				}
			}
			if rx.bytes < 0 || rx.bytes > quicRxBytes+2*(0x10000+fecParityHeader) {
				t.Fatalf("receiver holds %d bytes", rx.bytes)
			}
			for _, fl := range rx.flows {
				if len(fl.held) > quicHeldMax || len(fl.asked) > quicAskMax {
					t.Fatalf("a flow holds %d datagrams, asked for %d", len(fl.held), len(fl.asked))
				}
			}
		}
	})
}
