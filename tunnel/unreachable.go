package tunnel

// ICMP "destination unreachable" for packets that reach the TUN but that no
// peer owns (a route into the TUN wider than the peers' subnets, or a peer
// just removed): the sender learns at once instead of timing out. TCP gets
// an RST from the stack instead. Replies are rate limited so a scan cannot
// turn the endpoint into an ICMP source of its own.

import (
	"encoding/binary"
	"math/bits"
	"sync"
	"time"

	"scpsvpn/peers/tokenbucket"
)

const (
	icmpv4Unreachable = 3
	icmpv4NetUnreach  = 0
	icmpv6Unreachable = 1
	icmpv6NoRoute     = 0
	protoICMPv4       = 1
	protoICMPv6       = 58
	// unreachPerSecond bounds the ICMP errors the endpoint sends.
	unreachPerSecond = 100
)

// unreachable builds the ICMP error answering pkt (whose header is info),
// sent from the address the packet was for. It returns nil for packets that
// must not be answered: ICMP errors themselves, multicast and broadcast.
func unreachable(pkt []byte, info ipInfo) []byte {
	return icmpUnreachable(pkt, info, icmpv4NetUnreach, icmpv6NoRoute)
}

// icmpUnreachable is unreachable with the given codes of ICMP's and
// ICMPv6's destination unreachable.
func icmpUnreachable(pkt []byte, info ipInfo, code4, code6 byte) []byte {
	if !info.dst.IsGlobalUnicast() || !info.src.IsGlobalUnicast() {
		return nil
	}
	if info.dst.Is4() {
		ihl := int(pkt[0]&0x0f) * 4
		if info.proto == protoICMPv4 && (len(pkt) <= ihl || isICMPv4Error(pkt[ihl])) {
			return nil
		}
		quote := pkt[:min(len(pkt), ihl+8)]
		out := make([]byte, 20+8+len(quote))
		out[0] = 0x45
		binary.BigEndian.PutUint16(out[2:], uint16(len(out)))
		out[8], out[9] = 64, protoICMPv4
		s, d := info.dst.As4(), info.src.As4()
		copy(out[12:], s[:])
		copy(out[16:], d[:])
		binary.BigEndian.PutUint16(out[10:], ^checksum(out[:20], 0))
		icmp := out[20:]
		icmp[0], icmp[1] = icmpv4Unreachable, code4
		copy(icmp[8:], quote)
		binary.BigEndian.PutUint16(icmp[2:], ^checksum(icmp, 0))
		return out
	}
	if info.proto == protoICMPv6 && (len(pkt) <= 40 || pkt[40] < 128) {
		return nil // an ICMPv6 error (types below 128) is never answered
	}
	// As much of the packet as fits the IPv6 minimum MTU.
	quote := pkt[:min(len(pkt), 1280-40-8)]
	out := make([]byte, 40+8+len(quote))
	out[0] = 0x60
	binary.BigEndian.PutUint16(out[4:], uint16(8+len(quote)))
	out[6], out[7] = protoICMPv6, 64
	s, d := info.dst.As16(), info.src.As16()
	copy(out[8:], s[:])
	copy(out[24:], d[:])
	icmp := out[40:]
	icmp[0], icmp[1] = icmpv6Unreachable, code6
	copy(icmp[8:], quote)
	// The ICMPv6 checksum covers a pseudo-header.
	sum := checksum(out[8:40], 0)
	var ph [8]byte
	binary.BigEndian.PutUint32(ph[:4], uint32(len(icmp)))
	ph[7] = protoICMPv6
	sum = checksum(ph[:], sum)
	binary.BigEndian.PutUint16(icmp[2:], ^checksum(icmp, sum))
	return out
}

func isICMPv4Error(typ byte) bool {
	switch typ {
	case 3, 4, 5, 11, 12:
		return true
	}
	return false
}

// checksum is the Internet checksum (RFC 1071) of b added to initial,
// folded, not complemented.
// It adds 64-bit words with end-around carry (2^16 is 1 modulo 0xffff, so
// the fold of their sum is the sum of the 16-bit words), four at a time:
// it runs over every TCP segment the kernel did not vouch for
// (tcpChecksumValid) and every UDP datagram a local program sends through
// the TUN (vnetPacket).
func checksum(b []byte, initial uint16) uint16 {
	sum, carry := uint64(initial), uint64(0)
	for len(b) >= 32 {
		sum, carry = bits.Add64(sum, binary.BigEndian.Uint64(b), carry)
		sum, carry = bits.Add64(sum, binary.BigEndian.Uint64(b[8:]), carry)
		sum, carry = bits.Add64(sum, binary.BigEndian.Uint64(b[16:]), carry)
		sum, carry = bits.Add64(sum, binary.BigEndian.Uint64(b[24:]), carry)
		b = b[32:]
	}
	for len(b) >= 8 {
		sum, carry = bits.Add64(sum, binary.BigEndian.Uint64(b), carry)
		b = b[8:]
	}
	sum, carry = bits.Add64(sum, carry, 0)
	sum += carry // sum wrapped to below 2^64-1: no carry again
	sum = sum>>32 + sum&0xffffffff
	if len(b) >= 4 {
		sum += uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		sum += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint64(b[0]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return uint16(sum)
}

// rateLimiter allows perSecond events a second, as many at once.
type rateLimiter struct {
	perSecond float64
	mu        sync.Mutex
	b         tokenbucket.Bucket
}

func (r *rateLimiter) allow(now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.b.Allow(now, r.perSecond, r.perSecond)
}
