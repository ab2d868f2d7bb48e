package tunnel

// Forward erasure coding of a repaired QUIC flow (spec.md, "Repaired
// datagrams"): the sender adds one to four parity datagrams to each short
// block of the flow's datagrams, and the receiver rebuilds up to as many
// lost ones from them without a round trip. Parity j is the XOR of
// g^(i*j) times shard i over GF(2^8) (g = 2): the first two are RAID-6's
// P and Q, the others extend them as Reed-Solomon's Vandermonde rows do.
// A shard is a datagram's 2-byte length and the datagram, zero-padded to
// the block's longest.

import (
	"encoding/binary"
	"errors"
	"math"
	"math/bits"
	"slices"
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
	// and the receiver's mask of received ones is 64 bits), and
	// fecMaxParities its parities. A peer that has not said it takes
	// such blocks (capFecWide, spec.md) gets at most fecNarrowBlock and
	// fecNarrowParities, which its parser takes. At 1 % loss 54 + 3 is
	// 5.6 % of parities, where 32 + 3 was 9.4 %; at 2 %, 41 + 4.
	fecMaxBlock       = 64
	fecMaxParities    = 4
	fecNarrowBlock    = 32
	fecNarrowParities = 3
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

// fecSums accumulates the parity rows of shards: at the sender over a
// block's datagrams, at the receiver over the ones received (with the
// parities folded in, what is left are the sums over the missing ones).
// Row j is the XOR of g^(i*j) times shard i: row 0 is RAID-6's P, row 1
// its Q.
type fecSums struct{ rows [fecMaxParities][]byte }

// addShard adds the shard of pkt at index i to the first n rows.
func (s *fecSums) addShard(i int, pkt []byte, n int) {
	var l [2]byte
	binary.BigEndian.PutUint16(l[:], uint16(len(pkt)))
	s.grow(2 + len(pkt))
	for j := range n {
		c := gfExp[i*j%255]
		s.add(j, 0, l[:], c)
		s.add(j, 2, pkt, c)
	}
}

func (s *fecSums) grow(n int) {
	for j := range s.rows {
		for len(s.rows[j]) < n {
			s.rows[j] = append(s.rows[j], 0)
		}
	}
}

// reset empties the rows, keeping their memory.
func (s *fecSums) reset() {
	for j := range s.rows {
		s.rows[j] = s.rows[j][:0]
	}
}

// size is the rows' memory, in bytes.
func (s *fecSums) size() int {
	n := 0
	for _, r := range s.rows {
		n += cap(r)
	}
	return n
}

func (s *fecSums) add(row, off int, b []byte, c byte) {
	dst := s.rows[row][off:]
	if c == 1 {
		for j, v := range b {
			dst[j] ^= v
		}
		return
	}
	for j, v := range b {
		dst[j] ^= gfMul(c, v)
	}
}

// foldParity folds a received parity (row which) into the sums.
func (s *fecSums) foldParity(which byte, b []byte) {
	s.grow(len(b))
	dst := s.rows[which]
	for j, v := range b {
		dst[j] ^= v
	}
}

// fecRecover rebuilds the missing shards (their indexes, ascending) of a
// block from sums that hold the received parities folded in and every
// received shard added; have has bit j set for each parity row received.
// It solves for as many missing shards as rows were received, over
// GF(2^8), from the lowest rows first: rows 0 to e-1 over any e indexes
// below 255 are a Vandermonde system, never singular; a set with row 3
// in it (a lower parity lost) is singular for about one set of indexes
// in 255, and another set of the received rows is tried. It returns the
// datagrams, nil if the rows are too few, every set of them is
// singular, or a rebuilt length is impossible.
func fecRecover(s *fecSums, have uint8, missing []int) [][]byte {
	e := len(missing)
	if e == 0 || bits.OnesCount8(have&(1<<fecMaxParities-1)) < e {
		return nil
	}
	for set := uint8(1); set < 1<<fecMaxParities; set++ {
		if set&have != set || bits.OnesCount8(set) != e {
			continue
		}
		var rows []int
		for j := range fecMaxParities {
			if set&(1<<j) != 0 {
				rows = append(rows, j)
			}
		}
		if d := fecSolve(s, rows, missing); d != nil {
			return fecShards(d)
		}
	}
	return nil
}

// fecSolve solves a·d = sums for the shards d, a[r][c] =
// g^(rows[r]*missing[c]); nil if the system is singular.
func fecSolve(s *fecSums, rows, missing []int) [][]byte {
	e := len(missing)
	a := make([][]byte, e)
	d := make([][]byte, e)
	for r, j := range rows {
		a[r] = make([]byte, e)
		for c, i := range missing {
			a[r][c] = gfExp[j*i%255]
		}
		d[r] = slices.Clone(s.rows[j])
	}
	for c := range e {
		pivot := -1
		for r := c; r < e; r++ {
			if a[r][c] != 0 {
				pivot = r
				break
			}
		}
		if pivot < 0 {
			return nil
		}
		a[c], a[pivot] = a[pivot], a[c]
		d[c], d[pivot] = d[pivot], d[c]
		if f := a[c][c]; f != 1 {
			for k := range a[c] {
				a[c][k] = gfDiv(a[c][k], f)
			}
			for k := range d[c] {
				d[c][k] = gfDiv(d[c][k], f)
			}
		}
		for r := range e {
			f := a[r][c]
			if r == c || f == 0 {
				continue
			}
			for k := range a[r] {
				a[r][k] ^= gfMul(f, a[c][k])
			}
			for k := range d[r] {
				d[r][k] ^= gfMul(f, d[c][k])
			}
		}
	}
	return d
}

// fecShards takes the datagrams out of rebuilt shards; nil if a length
// is impossible.
func fecShards(d [][]byte) [][]byte {
	e := len(d)
	pkts := make([][]byte, e)
	for i, sh := range d {
		if len(sh) < 3 {
			return nil
		}
		n := int(binary.BigEndian.Uint16(sh))
		if n == 0 || n > len(sh)-2 {
			return nil
		}
		pkts[i] = sh[2 : 2+n]
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
	which    byte   // parity: its row, 0 (P), 1 (Q) or 2
	parities byte   // parity: the block's parities, 1 to fecMaxParities
	mask     uint64 // resend: bit i asks for datagram seq+i (bit 0 always set)
}

var errFecFrame = errors.New("malformed repaired-flow frame")

func appendFecData(b []byte, flow, seq uint32, index int, pkt []byte) []byte {
	return appendFecFrame(b, fecData, flow, seq, index, pkt)
}

// appendFecFrame appends a datagram frame of type typ (fecData, or
// fecCompact with a compact body) with body.
func appendFecFrame(b []byte, typ byte, flow, seq uint32, index int, body []byte) []byte {
	b = append(b, typ)
	b = binary.BigEndian.AppendUint32(b, flow)
	b = binary.BigEndian.AppendUint32(b, seq)
	b = append(b, byte(index))
	return append(b, body...)
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
		if int(h.index) >= fecMaxBlock {
			return h, nil, errFecFrame
		}
		body = b[fecDataHeader:]
	case fecCompact:
		if len(b) < fecCompactHeader4 {
			return h, nil, errFecFrame
		}
		h.index = b[9]
		if int(h.index) >= fecMaxBlock {
			return h, nil, errFecFrame
		}
		body = b[fecDataHeader:] // expandCompact reads it
	case fecParity:
		if len(b) < fecParityHeader+3 {
			return h, nil, errFecFrame
		}
		h.count, h.parities, h.which = b[9], b[10]>>4, b[10]&0x0f
		if h.count == 0 || h.count > fecMaxBlock || h.parities == 0 || h.parities > fecMaxParities || h.which >= h.parities {
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

// fecResidual is the share of datagrams a block's parities may leave
// unrepaired: each costs the flow a resend's round trip of holding.
const fecResidual = 5e-5

// fecShape chooses a block's datagrams (k, at most maxK) and parities
// (m, at most maxM) for the forward loss p the association measures: the
// least overhead m/k that leaves at most one datagram in 1/fecResidual
// unrepaired (a block fails when more than m of its k+m frames are
// lost). At 1 % loss, 54 + 3 (5.6 %) where at most 32 datagrams gave
// 32 + 3 (9.4 %).
func fecShape(p float64, maxK, maxM int) (k, m int) {
	p = fecLoss(p)
	bestK, bestM, best := 4, maxM, math.Inf(1)
	for m := 1; m <= maxM; m++ {
		for k := 4; k <= maxK; k++ {
			if fecFail(k, m, p)/float64(k) > fecResidual {
				continue
			}
			if o := float64(m) / float64(k); o < best {
				bestK, bestM, best = k, m, o
			}
		}
	}
	return bestK, bestM
}

// fecParities is how many parities a block closed with n datagrams
// needs at loss p: the fewest, up to m (its shape's), that meet
// fecResidual. A block the span closed short (a slow flow) needs fewer.
func fecParities(p float64, n, m int) int {
	p = fecLoss(p)
	for j := 1; j < m; j++ {
		if fecFail(n, j, p)/float64(n) <= fecResidual {
			return j
		}
	}
	return m
}

func fecLoss(p float64) float64 { return min(max(p, 1e-4), 0.2) }

// fecFail is the chance that more than m of a block's k+m frames are
// lost at loss p.
func fecFail(k, m int, p float64) float64 {
	n := k + m
	fail := 0.0
	for j := m + 1; j <= n; j++ {
		fail += binom(n, j) * math.Pow(p, float64(j)) * math.Pow(1-p, float64(n-j))
	}
	return fail
}

func binom(n, k int) float64 {
	r := 1.0
	for i := range k {
		r = r * float64(n-i) / float64(i+1)
	}
	return r
}
