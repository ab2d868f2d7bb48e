package tunnel

// Forward erasure coding of a repaired QUIC flow (spec.md, "Repaired
// datagrams"): the sender adds one or two parity datagrams to each short
// block of the flow's datagrams, and the receiver rebuilds up to as many
// lost ones from them without a round trip. Two parities are RAID-6's P
// and Q over GF(2^8): P is the XOR of the block's shards, Q the XOR of
// g^i times shard i (g = 2). A shard is a datagram's 2-byte length and
// the datagram, zero-padded to the block's longest.

import (
	"encoding/binary"
	"errors"
	"math"
)

const (
	fecData   = 0x01 // frame types; an IP packet's first byte is 0x4_ or 0x6_
	fecParity = 0x02
	fecResend = 0x03 // the receiver asks for datagrams it could not rebuild
	// fecDataHeader and fecParityHeader are the frames' headers;
	// fecResendLen is a resend request's whole length.
	fecDataHeader   = 10
	fecParityHeader = 11
	fecResendLen    = 17
	// fecMaxBlock bounds the datagrams of a block (the index is one byte,
	// and the receiver's mask of received ones is 64 bits).
	fecMaxBlock = 32
)

var gfExp [510]byte
var gfLog [256]byte

func init() {
	x := 1
	for i := range 255 {
		gfExp[i], gfExp[i+255] = byte(x), byte(x)
		gfLog[x] = byte(i)
		x <<= 1
		if x&0x100 != 0 {
			x ^= 0x11d
		}
	}
}

func gfMul(a, b byte) byte {
	if a == 0 || b == 0 {
		return 0
	}
	return gfExp[int(gfLog[a])+int(gfLog[b])]
}

func gfDiv(a, b byte) byte { // b != 0
	if a == 0 {
		return 0
	}
	return gfExp[int(gfLog[a])+255-int(gfLog[b])]
}

// fecSums accumulates P and Q of shards: at the sender over a block's
// datagrams, at the receiver over the ones received (with the parities
// folded in, what is left are the sums over the missing ones).
type fecSums struct{ p, q []byte }

// addShard adds the shard of pkt at index i.
func (s *fecSums) addShard(i int, pkt []byte) {
	var l [2]byte
	binary.BigEndian.PutUint16(l[:], uint16(len(pkt)))
	s.grow(2 + len(pkt))
	c := gfExp[i]
	s.add(0, l[:], c)
	s.add(2, pkt, c)
}

func (s *fecSums) grow(n int) {
	for len(s.p) < n {
		s.p = append(s.p, 0)
		s.q = append(s.q, 0)
	}
}

func (s *fecSums) add(off int, b []byte, c byte) {
	p, q := s.p[off:], s.q[off:]
	for j, v := range b {
		p[j] ^= v
		q[j] ^= gfMul(c, v)
	}
}

// foldParity folds a received parity (which 0: P, 1: Q) into the sums.
func (s *fecSums) foldParity(which byte, b []byte) {
	s.grow(len(b))
	dst := s.p
	if which == 1 {
		dst = s.q
	}
	for j, v := range b {
		dst[j] ^= v
	}
}

// fecRecover rebuilds the missing shards of a block from sums that hold
// the parities folded in and every received shard added: one missing (x)
// from P or from Q, two (x < y) from both. It returns the datagrams, nil
// if the shards are not enough or a rebuilt length is impossible.
func fecRecover(s *fecSums, haveP, haveQ bool, missing []int) [][]byte {
	shards := make([][]byte, len(missing))
	switch {
	case len(missing) == 1 && haveP:
		shards[0] = s.p
	case len(missing) == 1 && haveQ:
		inv := gfExp[missing[0]]
		d := make([]byte, len(s.q))
		for j, v := range s.q {
			d[j] = gfDiv(v, inv)
		}
		shards[0] = d
	case len(missing) == 2 && haveP && haveQ:
		gx, gy := gfExp[missing[0]], gfExp[missing[1]]
		den := gx ^ gy
		dx := make([]byte, len(s.p))
		dy := make([]byte, len(s.p))
		for j := range s.p {
			// gx·Dx ^ gy·Dy = Q, Dx ^ Dy = P: Dx = (Q ^ gy·P) / (gx ^ gy).
			dx[j] = gfDiv(s.q[j]^gfMul(gy, s.p[j]), den)
			dy[j] = s.p[j] ^ dx[j]
		}
		shards[0], shards[1] = dx, dy
	default:
		return nil
	}
	pkts := make([][]byte, len(shards))
	for i, d := range shards {
		if len(d) < 3 {
			return nil
		}
		n := int(binary.BigEndian.Uint16(d))
		if n == 0 || n > len(d)-2 {
			return nil
		}
		pkts[i] = d[2 : 2+n]
	}
	return pkts
}

// fecHeader is a repaired flow's frame header (spec.md): for a datagram,
// its sequence number and index in its block; for a parity, the block's
// first sequence number, its count of datagrams and which parity; for a
// resend request, the first number asked for and the mask of those asked.
type fecHeader struct {
	typ      byte
	flow     uint32
	seq      uint32 // datagram: its number; parity: the block's first; resend: the first asked
	index    byte   // datagram: its index in the block
	count    byte   // parity: the block's datagrams
	which    byte   // parity: 0 P, 1 Q
	parities byte   // parity: the block's parities, 1 (P) or 2 (P and Q)
	mask     uint64 // resend: bit i asks for datagram seq+i (bit 0 always set)
}

var errFecFrame = errors.New("malformed repaired-flow frame")

func appendFecData(b []byte, flow, seq uint32, index int, pkt []byte) []byte {
	b = append(b, fecData)
	b = binary.BigEndian.AppendUint32(b, flow)
	b = binary.BigEndian.AppendUint32(b, seq)
	b = append(b, byte(index))
	return append(b, pkt...)
}

func appendFecParity(b []byte, flow, first uint32, count, parities int, which byte, sum []byte) []byte {
	b = append(b, fecParity)
	b = binary.BigEndian.AppendUint32(b, flow)
	b = binary.BigEndian.AppendUint32(b, first)
	b = append(b, byte(count), byte(parities)<<4|which)
	return append(b, sum...)
}

// appendFecResend asks the sender of flow for the datagrams seq+i of
// each bit i set in mask (bit 0 set).
func appendFecResend(b []byte, flow, seq uint32, mask uint64) []byte {
	b = append(b, fecResend)
	b = binary.BigEndian.AppendUint32(b, flow)
	b = binary.BigEndian.AppendUint32(b, seq)
	return binary.BigEndian.AppendUint64(b, mask)
}

// parseFec parses a repaired flow's frame; the body (the IP packet, or
// the parity bytes; none for a resend request) aliases b.
func parseFec(b []byte) (fecHeader, []byte, error) {
	if len(b) < 1 {
		return fecHeader{}, nil, errFecFrame
	}
	h := fecHeader{typ: b[0]}
	var body []byte
	switch h.typ {
	case fecData:
		if len(b) <= fecDataHeader {
			return h, nil, errFecFrame
		}
		h.index = b[9]
		if h.index >= fecMaxBlock {
			return h, nil, errFecFrame
		}
		body = b[fecDataHeader:]
	case fecParity:
		if len(b) < fecParityHeader+3 {
			return h, nil, errFecFrame
		}
		h.count, h.parities, h.which = b[9], b[10]>>4, b[10]&0x0f
		if h.count == 0 || h.count > fecMaxBlock || h.parities == 0 || h.parities > 2 || h.which >= h.parities {
			return h, nil, errFecFrame
		}
		body = b[fecParityHeader:]
	case fecResend:
		if len(b) != fecResendLen {
			return h, nil, errFecFrame
		}
		h.mask = binary.BigEndian.Uint64(b[9:])
		if h.mask&1 == 0 {
			return h, nil, errFecFrame
		}
	default:
		return h, nil, errFecFrame
	}
	h.flow = binary.BigEndian.Uint32(b[1:])
	h.seq = binary.BigEndian.Uint32(b[5:])
	return h, body, nil
}

// fecShape chooses a block's datagrams (k) and parities (m) for the
// forward loss p the association measures: the least overhead m/k that
// leaves at most one datagram in fecResidual unrepaired (a block fails
// when more than m of its k+m frames are lost).
func fecShape(p float64) (k, m int) {
	const fecResidual = 5e-5
	p = min(max(p, 1e-4), 0.2)
	bestK, bestM, best := 4, 2, math.Inf(1)
	for m := 1; m <= 2; m++ {
		for k := 4; k <= fecMaxBlock; k++ {
			n := k + m
			fail := 0.0 // P(more than m of n lost)
			for j := m + 1; j <= n; j++ {
				fail += binom(n, j) * math.Pow(p, float64(j)) * math.Pow(1-p, float64(n-j))
			}
			if fail/float64(k) > fecResidual {
				continue
			}
			if o := float64(m) / float64(k); o < best {
				bestK, bestM, best = k, m, o
			}
		}
	}
	return bestK, bestM
}

func binom(n, k int) float64 {
	r := 1.0
	for i := range k {
		r = r * float64(n-i) / float64(i+1)
	}
	return r
}
