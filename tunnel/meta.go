package tunnel

// Stream metadata: what the opening side tells the far side about a TCP
// connection so it can re-originate it from the client's own address. The
// bytes are specified in spec.md ("Stream metadata"): kind 1, address
// family 4 or 6, then client address and port, server address and port,
// fixed sizes, big-endian ports; exactly one encoding per connection.

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

const metaKindTCP = 1

var errBadMeta = errors.New("malformed stream metadata")

// flowMeta names one TCP connection.
type flowMeta struct {
	src, dst netip.AddrPort
}

func (m flowMeta) marshal() []byte {
	src, dst := m.src.Addr(), m.dst.Addr()
	fam := byte(4)
	if !src.Is4() {
		fam = 6
	}
	b := make([]byte, 0, 2+2*(16+2))
	b = append(b, metaKindTCP, fam)
	b = appendAddr(b, src, fam)
	b = binary.BigEndian.AppendUint16(b, m.src.Port())
	b = appendAddr(b, dst, fam)
	b = binary.BigEndian.AppendUint16(b, m.dst.Port())
	return b
}

func appendAddr(b []byte, a netip.Addr, fam byte) []byte {
	if fam == 4 {
		v := a.As4()
		return append(b, v[:]...)
	}
	v := a.As16()
	return append(b, v[:]...)
}

func parseMeta(b []byte) (flowMeta, error) {
	if len(b) < 2 || b[0] != metaKindTCP {
		return flowMeta{}, errBadMeta
	}
	var alen int
	switch b[1] {
	case 4:
		alen = 4
	case 6:
		alen = 16
	default:
		return flowMeta{}, errBadMeta
	}
	if len(b) != 2+2*(alen+2) {
		return flowMeta{}, errBadMeta
	}
	p := b[2:]
	src, _ := netip.AddrFromSlice(p[:alen])
	sport := binary.BigEndian.Uint16(p[alen:])
	p = p[alen+2:]
	dst, _ := netip.AddrFromSlice(p[:alen])
	dport := binary.BigEndian.Uint16(p[alen:])
	if !src.IsValid() || !dst.IsValid() || sport == 0 || dport == 0 {
		return flowMeta{}, errBadMeta
	}
	return flowMeta{src: netip.AddrPortFrom(src, sport), dst: netip.AddrPortFrom(dst, dport)}, nil
}
