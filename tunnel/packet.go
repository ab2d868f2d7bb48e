package tunnel

// IP header inspection for packets read from the TUN or arriving as
// datagrams from a peer: just enough to route them (version, protocol,
// source and destination). Bytes from the network pass through here, so
// every malformed packet yields ok == false, never a panic.

import (
	"encoding/binary"
	"net/netip"
)

const (
	protoTCP = 6
)

// ipInfo is what routing needs from an IP header.
type ipInfo struct {
	proto uint8
	hlen  int // the IP header's length: where the transport header starts
	src   netip.Addr
	dst   netip.Addr
}

// parseIP reads the IPv4 or IPv6 header at the start of pkt. For IPv6 the
// protocol is the first next-header value; extension headers are not walked
// (TCP behind an extension header is then carried as a datagram, which is
// still delivered, only not split).
func parseIP(pkt []byte) (ipInfo, bool) {
	if len(pkt) < 1 {
		return ipInfo{}, false
	}
	switch pkt[0] >> 4 {
	case 4:
		if len(pkt) < 20 {
			return ipInfo{}, false
		}
		ihl := int(pkt[0]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(pkt[2:4]))
		if ihl < 20 || total < ihl || total > len(pkt) {
			return ipInfo{}, false
		}
		return ipInfo{
			proto: pkt[9],
			hlen:  ihl,
			src:   netip.AddrFrom4([4]byte(pkt[12:16])),
			dst:   netip.AddrFrom4([4]byte(pkt[16:20])),
		}, true
	case 6:
		if len(pkt) < 40 {
			return ipInfo{}, false
		}
		if 40+int(binary.BigEndian.Uint16(pkt[4:6])) > len(pkt) {
			return ipInfo{}, false
		}
		return ipInfo{
			proto: pkt[6],
			hlen:  40,
			src:   netip.AddrFrom16([16]byte(pkt[8:24])),
			dst:   netip.AddrFrom16([16]byte(pkt[24:40])),
		}, true
	}
	return ipInfo{}, false
}

// tcpChecksumValid reports whether the TCP segment of pkt, an IP packet
// parseIP read as info (protocol TCP), carries a right checksum. The kernel
// checks no transport checksum of a packet it forwards, or of a raw packet
// a local program sends, into the TUN; the stack trusts what it is given
// (stack.Config.TrustRXChecksums), and a corrupted segment it acknowledged
// would reach the far server as good data. A segment too short for a TCP
// header is not valid either.
func tcpChecksumValid(pkt []byte, info ipInfo) bool {
	var end int
	var addrs []byte // source and destination, where the pseudo-header takes them
	if info.src.Is4() {
		end, addrs = int(binary.BigEndian.Uint16(pkt[2:4])), pkt[12:20]
	} else {
		end, addrs = 40+int(binary.BigEndian.Uint16(pkt[4:6])), pkt[8:40]
	}
	seg := pkt[info.hlen:end]
	if len(seg) < 20 {
		return false
	}
	// The rest of the pseudo-header adds up, in IPv4 and IPv6 alike, to
	// the protocol plus the segment's length.
	rest := [4]byte{0, info.proto, byte(len(seg) >> 8), byte(len(seg))}
	return checksum(seg, checksum(rest[:], checksum(addrs, 0))) == 0xffff
}
