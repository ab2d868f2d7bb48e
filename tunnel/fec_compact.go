package tunnel

// Compact datagram frames of a repaired flow (spec.md, "Repaired
// datagrams"): a flow is one direction of a UDP 5-tuple, so the inner
// IP and UDP headers of its datagrams repeat the flow's addresses and
// ports, and their lengths and IPv4 checksum follow from the rest. A
// compact frame carries only what varies (the IPv4 TOS, identification,
// DF bit and TTL, or the IPv6 traffic class, flow label and hop limit,
// and the UDP checksum), 17 or 18 bytes of header where a datagram frame
// and the headers are 38 or 58: 21 bytes of the 1432 a full-size QUIC
// packet costs on the wire over IPv4 (1.5 %), 40 over IPv6. The
// receiver learns the flow's addresses and ports from its datagram
// frames (the first 64 of a flow, and each block's first, go whole)
// and rebuilds the very packet the sender read, which the parities
// cover.

import (
	"bytes"
	"encoding/binary"
	"net/netip"
)

const (
	fecCompact = 0x04 // frame type
	// capFecCompact is the capability bit (assocParams.caps, spec.md)
	// of a side whose parser takes compact frames; an older peer's
	// takes a 0x04 for a malformed IP packet, so it gets none.
	capFecCompact = 0x04
	// fecCompactAfter is how many of a flow's first datagrams go whole,
	// so that the receiver knows the flow's addresses before its first
	// compact frame.
	fecCompactAfter = 64
	// The compact frames' headers: the datagram frame's 10 bytes, then
	// flags, TOS or traffic class, TTL or hop limit, the IPv4
	// identification (2) or the IPv6 flow label (3), the UDP checksum.
	fecCompactHeader4 = fecDataHeader + 7
	fecCompactHeader6 = fecDataHeader + 8
	compactIPv6       = 0x80 // flags: the packet is IPv6
	compactDF         = 0x40 // flags: IPv4 don't fragment
)

// appendFecCompact appends datagram pkt of flow as a compact frame, if
// it is a UDP packet whose headers the receiver rebuilds exactly from
// the frame and the packet's own addresses and ports (the flow's); ok
// false (b unchanged) otherwise: IPv4 options or fragments, IPv6
// extension headers, lengths or a checksum that do not match.
func appendFecCompact(b []byte, flow, seq uint32, index int, pkt []byte) (_ []byte, ok bool) {
	info, ok := parseIP(pkt)
	if !ok || info.proto != protoUDP || len(pkt) < info.hlen+8 {
		return b, false
	}
	key, ok := compactKey(pkt, info)
	if !ok {
		return b, false
	}
	n := len(b)
	b = appendFecFrame(b, fecCompact, flow, seq, index, nil)
	udp := pkt[info.hlen:]
	if info.hlen == 20 {
		var flags byte
		if pkt[6]&0x40 != 0 {
			flags |= compactDF
		}
		b = append(b, flags, pkt[1], pkt[8], pkt[4], pkt[5])
	} else {
		tc := pkt[0]<<4 | pkt[1]>>4
		b = append(b, compactIPv6, tc, pkt[7], pkt[1]&0x0f, pkt[2], pkt[3])
	}
	b = append(b, udp[6], udp[7])
	b = append(b, udp[8:]...)
	// Only what rebuilds to the same bytes: the parities cover those.
	if re, ok := expandCompact(key, b[n+fecDataHeader:]); !ok || !bytes.Equal(re, pkt) {
		return b[:n], false
	}
	return b, true
}

// compactKey is the flow's addresses and ports, read from one of its
// UDP packets.
func compactKey(pkt []byte, info ipInfo) (quicFlowKey, bool) {
	sport, dport, ok := udpPorts(pkt, info)
	if !ok {
		return quicFlowKey{}, false
	}
	return quicFlowKey{netip.AddrPortFrom(info.src, sport), netip.AddrPortFrom(info.dst, dport)}, true
}

// expandCompact rebuilds the IP packet of a compact frame's body (what
// follows the datagram frame's 10 bytes) for the flow key; ok false for
// a body cut short, or whose family is not the key's.
func expandCompact(key quicFlowKey, body []byte) (_ []byte, ok bool) {
	if len(body) < 1 || body[0]&^(compactIPv6|compactDF) != 0 {
		return nil, false
	}
	v6 := body[0]&compactIPv6 != 0
	if !key.src.Addr().IsValid() || !key.dst.Addr().IsValid() || v6 != key.src.Addr().Is6() || v6 != key.dst.Addr().Is6() {
		return nil, false
	}
	hlen, fields := 20, fecCompactHeader4-fecDataHeader
	if v6 {
		hlen, fields = 40, fecCompactHeader6-fecDataHeader
		if body[0]&compactDF != 0 {
			return nil, false
		}
	}
	if len(body) < fields {
		return nil, false
	}
	payload := body[fields:]
	total := hlen + 8 + len(payload)
	if total > 0xffff {
		return nil, false
	}
	p := make([]byte, hlen+8, total)
	if v6 {
		tc := body[1]
		p[0] = 0x60 | tc>>4
		p[1] = tc<<4 | body[3]&0x0f
		p[2], p[3] = body[4], body[5]
		binary.BigEndian.PutUint16(p[4:], uint16(8+len(payload)))
		p[6], p[7] = protoUDP, body[2]
		s, d := key.src.Addr().As16(), key.dst.Addr().As16()
		copy(p[8:], s[:])
		copy(p[24:], d[:])
		if body[3]&0xf0 != 0 {
			return nil, false
		}
	} else {
		p[0], p[1] = 0x45, body[1]
		binary.BigEndian.PutUint16(p[2:], uint16(total))
		p[4], p[5] = body[3], body[4]
		if body[0]&compactDF != 0 {
			p[6] = 0x40
		}
		p[8], p[9] = body[2], protoUDP
		s, d := key.src.Addr().As4(), key.dst.Addr().As4()
		copy(p[12:], s[:])
		copy(p[16:], d[:])
		binary.BigEndian.PutUint16(p[10:], ^checksum(p[:20], 0))
	}
	u := p[hlen:]
	binary.BigEndian.PutUint16(u, key.src.Port())
	binary.BigEndian.PutUint16(u[2:], key.dst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(8+len(payload)))
	u[6], u[7] = body[fields-2], body[fields-1]
	return append(p, payload...), true
}
