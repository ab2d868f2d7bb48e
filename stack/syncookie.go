// This file owns SYN cookies: while the SYN guard holds as many handshakes
// as it allows (a SYN flood), new SYNs are answered here, statelessly, with
// a SYN-ACK whose sequence number is a cookie; gVisor sees a connection only
// once the client's ACK returns a valid cookie (cookieflow.go then replays
// the handshake into gVisor and translates sequence numbers).
//
// Why: each SYN given to gVisor's forwarder costs an endpoint, two
// goroutines, SYN-ACK retransmission timers and, once the guard is full, an
// eviction RST. At 10,000 spoofed SYNs a second that work took the CPU real
// clients' handshakes and data needed. A cookie costs a hash and one packet.
//
// The cookie, as Linux's: 2 bits of the time (64 s periods), 2 bits naming
// the client's MSS in a table, and 28 bits of a keyed hash (SHA-256 with a
// random key) of the 4-tuple, the client's ISN, the period and the MSS
// index. It is valid in its period and the next (64 to 128 s). What a
// cookie cannot keep, as in Linux without timestamps: window scaling, SACK
// and timestamps are not offered to a client answered by a cookie, and its
// MSS is rounded down to the table. Normal handshakes (no flood) keep them.

package stack

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
)

const (
	cookiePeriod = 64 * time.Second
	cookieHash   = 1<<28 - 1
)

// cookieMSS are the MSS values a cookie can name (Linux's IPv4 table, with
// IPv6's minimum): the client's MSS is rounded down to one of them.
var cookieMSS = [4]uint16{536, 1220, 1440, 1460}

// cookieJar makes and checks SYN cookies with its own random key.
type cookieJar struct {
	key [32]byte
	now func() time.Time
}

func newCookieJar() *cookieJar {
	j := &cookieJar{now: time.Now}
	_, _ = rand.Read(j.key[:]) // never fails (crypto/rand)
	return j
}

func (j *cookieJar) period() uint32 {
	return uint32(j.now().Unix() / int64(cookiePeriod/time.Second))
}

// hash is the keyed hash of a cookie's inputs (28 bits).
func (j *cookieJar) hash(id gstack.TransportEndpointID, clientISN, period uint32, mssIdx int) uint32 {
	var b [32 + 16 + 16 + 2 + 2 + 4 + 4 + 1]byte
	n := copy(b[:], j.key[:])
	n += copy(b[n:], id.LocalAddress.AsSlice())
	n += copy(b[n:], id.RemoteAddress.AsSlice())
	binary.BigEndian.PutUint16(b[n:], id.LocalPort)
	binary.BigEndian.PutUint16(b[n+2:], id.RemotePort)
	binary.BigEndian.PutUint32(b[n+4:], clientISN)
	binary.BigEndian.PutUint32(b[n+8:], period)
	b[n+12] = byte(mssIdx)
	sum := sha256.Sum256(b[:n+13])
	return binary.BigEndian.Uint32(sum[:]) & cookieHash
}

// make returns the cookie for a SYN of id with sequence number clientISN
// and MSS option mss (0: none), and the MSS the cookie keeps.
func (j *cookieJar) make(id gstack.TransportEndpointID, clientISN uint32, mss uint16) (cookie uint32, kept uint16) {
	if mss == 0 {
		mss = 536 // RFC 9293's default
	}
	idx := 0
	for i, m := range cookieMSS {
		if m <= mss {
			idx = i
		}
	}
	p := j.period()
	return (p&3)<<30 | uint32(idx)<<28 | j.hash(id, clientISN, p, idx), cookieMSS[idx]
}

// check returns the MSS a cookie kept, if cookie is one this jar made for
// id and clientISN in this period or the last.
func (j *cookieJar) check(id gstack.TransportEndpointID, clientISN, cookie uint32) (mss uint16, ok bool) {
	idx := int(cookie >> 28 & 3)
	now := j.period()
	for _, p := range []uint32{now, now - 1} {
		if p&3 == cookie>>30 && j.hash(id, clientISN, p, idx) == cookie&cookieHash {
			return cookieMSS[idx], true
		}
	}
	return 0, false
}

// tcpSegment is an IPv4 or IPv6 packet carrying a TCP header, parsed
// without copying: tcp aliases the packet.
type tcpSegment struct {
	src, dst tcpip.Address
	netProto tcpip.NetworkProtocolNumber
	tcp      header.TCP // header and payload
}

// parseSegment parses an IPv4 or IPv6 TCP packet; ok is false for anything
// else, including fragments, IPv6 extension headers, truncated packets and
// a TCP data offset outside the packet.
func parseSegment(pkt []byte) (s tcpSegment, ok bool) {
	var rest []byte
	switch {
	case len(pkt) >= header.IPv4MinimumSize && header.IPVersion(pkt) == header.IPv4Version:
		ip := header.IPv4(pkt)
		hl := int(ip.HeaderLength())
		tl := int(ip.TotalLength())
		if hl < header.IPv4MinimumSize || tl < hl || tl > len(pkt) ||
			ip.Protocol() != uint8(header.TCPProtocolNumber) || ip.FragmentOffset() != 0 || ip.More() {
			return s, false
		}
		rest = pkt[hl:tl]
		s.src, s.dst, s.netProto = ip.SourceAddress(), ip.DestinationAddress(), header.IPv4ProtocolNumber
	case len(pkt) >= header.IPv6MinimumSize && header.IPVersion(pkt) == header.IPv6Version:
		ip := header.IPv6(pkt)
		pl := int(ip.PayloadLength())
		if ip.NextHeader() != uint8(header.TCPProtocolNumber) || header.IPv6MinimumSize+pl > len(pkt) {
			return s, false
		}
		rest = pkt[header.IPv6MinimumSize : header.IPv6MinimumSize+pl]
		s.src, s.dst, s.netProto = ip.SourceAddress(), ip.DestinationAddress(), header.IPv6ProtocolNumber
	default:
		return s, false
	}
	if len(rest) < header.TCPMinimumSize {
		return s, false
	}
	s.tcp = header.TCP(rest)
	if off := int(s.tcp.DataOffset()); off < header.TCPMinimumSize || off > len(rest) {
		return s, false
	}
	return s, true
}

// inbound is the local view of the 4-tuple of a packet from a client.
func (s *tcpSegment) inbound() gstack.TransportEndpointID {
	return gstack.TransportEndpointID{LocalPort: s.tcp.DestinationPort(), LocalAddress: s.dst,
		RemotePort: s.tcp.SourcePort(), RemoteAddress: s.src}
}

// outbound is the local view of the 4-tuple of a packet to a client.
func (s *tcpSegment) outbound() gstack.TransportEndpointID {
	return gstack.TransportEndpointID{LocalPort: s.tcp.SourcePort(), LocalAddress: s.src,
		RemotePort: s.tcp.DestinationPort(), RemoteAddress: s.dst}
}

// setSeq rewrites the sequence number; the checksum is updated unless it
// is a partial one (GSO, the kernel completes it over the new header).
func (s *tcpSegment) setSeq(v uint32, partial bool) {
	old := s.tcp.SequenceNumber()
	s.tcp.SetSequenceNumber(v)
	if !partial {
		s.tcp.SetChecksum(csumReplace32(s.tcp.Checksum(), old, v))
	}
}

// setAck rewrites the acknowledgement number and updates the checksum.
func (s *tcpSegment) setAck(v uint32) {
	old := s.tcp.AckNumber()
	s.tcp.SetAckNumber(v)
	s.tcp.SetChecksum(csumReplace32(s.tcp.Checksum(), old, v))
}

// csumReplace32 updates an Internet checksum field for a 32-bit word of
// the summed data changing from old to v (RFC 1624, eqn. 3).
func csumReplace32(sum uint16, old, v uint32) uint16 {
	x := uint32(^sum) + uint32(^uint16(old>>16)) + uint32(^uint16(old)) + v>>16 + v&0xffff
	for x > 0xffff {
		x = x>>16 + x&0xffff
	}
	return ^uint16(x)
}

// buildSegment builds an IPv4/IPv6 TCP packet without payload from src to
// dst with the given options (a multiple of 4 bytes) and valid checksums;
// nil if the addresses are neither IPv4 nor IPv6.
func buildSegment(src, dst tcpip.Address, srcPort, dstPort uint16, seq, ack uint32, flags header.TCPFlags, wnd uint16, opts []byte) []byte {
	tcpLen := header.TCPMinimumSize + len(opts)
	var b []byte
	var ipLen int
	switch src.Len() {
	case 4:
		ipLen = header.IPv4MinimumSize
		b = make([]byte, ipLen+tcpLen)
		ip := header.IPv4(b)
		ip.Encode(&header.IPv4Fields{
			TotalLength: uint16(len(b)), TTL: 64, Protocol: uint8(header.TCPProtocolNumber),
			SrcAddr: src, DstAddr: dst,
		})
		ip.SetChecksum(^ip.CalculateChecksum())
	case 16:
		ipLen = header.IPv6MinimumSize
		b = make([]byte, ipLen+tcpLen)
		header.IPv6(b).Encode(&header.IPv6Fields{
			PayloadLength: uint16(tcpLen), TransportProtocol: header.TCPProtocolNumber,
			HopLimit: 64, SrcAddr: src, DstAddr: dst,
		})
	default:
		return nil
	}
	t := header.TCP(b[ipLen:])
	t.Encode(&header.TCPFields{
		SrcPort: srcPort, DstPort: dstPort, SeqNum: seq, AckNum: ack,
		DataOffset: uint8(tcpLen), Flags: flags, WindowSize: wnd,
	})
	copy(t[header.TCPMinimumSize:], opts)
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, src, dst, uint16(tcpLen))
	t.SetChecksum(^checksum.Checksum(t, xsum))
	return b
}

// mssOption is a TCP MSS option.
func mssOption(mss uint16) []byte {
	b := make([]byte, header.TCPOptionMSSLength)
	header.EncodeMSSOption(uint32(mss), b)
	return b
}

// cookieSYNACK answers the SYN syn (of 4-tuple id) with a cookie SYN-ACK
// advertising ourMSS; nil if it cannot be built.
func (j *cookieJar) synAck(syn *tcpSegment, id gstack.TransportEndpointID, ourMSS uint16) []byte {
	opts := header.ParseSynOptions(syn.tcp.Options(), false)
	isn := syn.tcp.SequenceNumber()
	cookie, _ := j.make(id, isn, opts.MSS)
	return buildSegment(id.LocalAddress, id.RemoteAddress, id.LocalPort, id.RemotePort, cookie, isn+1,
		header.TCPFlagSyn|header.TCPFlagAck, 0xffff, mssOption(ourMSS))
}
