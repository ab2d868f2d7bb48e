// Package wire owns the byte layout of SCPS association packets: every
// frame (integers are varints, scps/varint). A packet is frames only: its
// packet number travels beside it, in the layer below (the peers header,
// where it also makes the seal's nonce). It encodes into caller-provided
// buffers and decodes without allocating, so the per-packet path of the
// association stays allocation free. spec.md in the parent directory is
// the normative description of these bytes.
package wire

// This file owns the frame codecs. Every frame starts with one type byte;
// all integers are varints; values are absolute, so a packet decodes on
// its own whatever was lost before it.

import (
	"errors"
	"fmt"

	"scpsvpn/scps/varint"
)

// Frame types. STREAM occupies 0x10..0x17; its low three bits are flags.
const (
	FramePadding       = 0x00
	FramePing          = 0x01
	FrameAck           = 0x02
	FrameResetStream   = 0x03
	FrameMaxData       = 0x04
	FrameMaxStreamData = 0x05
	FrameMaxStreams    = 0x06
	FrameDatagram      = 0x07
	FrameClose         = 0x08
	FrameParity        = 0x09
	FramePathRole      = 0x0a
	FrameStream        = 0x10

	StreamFlagFin  = 0x01 // the frame ends the stream's data
	StreamFlagLen  = 0x02 // an explicit length follows; else data runs to the packet's end
	StreamFlagMeta = 0x04 // the stream's open metadata follows (offset 0 only)
)

// Limits a decoder enforces so a hostile packet cannot make us do or keep
// much.
const (
	MaxMetaLen   = 512 // bytes of stream-open metadata
	MaxReasonLen = 256 // bytes of CLOSE reason

	// MaxParityCount is the most packets one PARITY block covers.
	MaxParityCount = 64
	// MaxParityBlock is the largest PARITY block: a 2-byte length and
	// the largest packet a Config allows (65000 bytes).
	MaxParityBlock = 2 + 65000
)

// ErrMalformed is wrapped by every decoding error.
var ErrMalformed = errors.New("malformed")

func malformed(what string) error { return fmt.Errorf("%w: %s", ErrMalformed, what) }

// AckRange is an inclusive range of packet numbers.
type AckRange struct{ Smallest, Largest uint64 }

// Ack is a decoded ACK frame. Ranges are kept encoded and walked with Iter,
// so decoding allocates nothing.
type Ack struct {
	Largest    uint64 // largest packet number acknowledged
	Delay      uint64 // microseconds between receiving Largest and sending the ACK
	FirstRange uint64 // packets acknowledged below Largest in the first range
	NumRanges  uint64 // further ranges after the first
	Smallest   uint64 // smallest packet number acknowledged (computed)
	rest       []byte
}

// AckIter walks the ranges of an Ack from the highest down.
type AckIter struct {
	next     int // 0: the first range not yet returned
	left     uint64
	smallest uint64
	rest     []byte
	ack      *Ack
}

// Iter returns an iterator over the ranges of a validated Ack.
func (a *Ack) Iter() AckIter { return AckIter{ack: a, left: a.NumRanges, rest: a.rest} }

// Next returns the next lower range; ok is false when done.
func (it *AckIter) Next() (r AckRange, ok bool) {
	if it.next == 0 {
		it.next = 1
		it.smallest = it.ack.Largest - it.ack.FirstRange
		return AckRange{it.smallest, it.ack.Largest}, true
	}
	if it.left == 0 {
		return AckRange{}, false
	}
	gap, n1 := varint.Read(it.rest)
	length, n2 := varint.Read(it.rest[n1:])
	it.rest = it.rest[n1+n2:]
	it.left--
	largest := it.smallest - gap - 2
	it.smallest = largest - length
	return AckRange{it.smallest, largest}, true
}

// AckFrameLen is the encoded size of an ACK frame for ranges (highest
// first, disjoint, non-adjacent).
func AckFrameLen(delay uint64, ranges []AckRange) int {
	if len(ranges) == 0 {
		return 0
	}
	n := 1 + varint.Len(ranges[0].Largest) + varint.Len(delay) + varint.Len(uint64(len(ranges)-1)) +
		varint.Len(ranges[0].Largest-ranges[0].Smallest)
	for i := 1; i < len(ranges); i++ {
		n += varint.Len(ranges[i-1].Smallest-ranges[i].Largest-2) + varint.Len(ranges[i].Largest-ranges[i].Smallest)
	}
	return n
}

// AckRangesFit returns how many of ranges, the highest first, an ACK
// frame can carry in room bytes: the largest k with AckFrameLen(delay,
// ranges[:k]) <= room (0 if not even the first fits). One pass: the
// frame's length grows by each range's two varints and by its count's
// varint, so the count of a few hundred ranges is not found by measuring
// the frame anew for each one dropped, as it once was (quadratic).
func AckRangesFit(delay uint64, ranges []AckRange, room int) int {
	if len(ranges) == 0 {
		return 0
	}
	// Without the count's varint; added for each k tried.
	n := 1 + varint.Len(ranges[0].Largest) + varint.Len(delay) + varint.Len(ranges[0].Largest-ranges[0].Smallest)
	if n+varint.Len(0) > room {
		return 0
	}
	k := 1
	for ; k < len(ranges); k++ {
		m := n + varint.Len(ranges[k-1].Smallest-ranges[k].Largest-2) + varint.Len(ranges[k].Largest-ranges[k].Smallest)
		if m+varint.Len(uint64(k)) > room {
			break
		}
		n = m
	}
	return k
}

// AppendAck appends an ACK frame; ranges are highest first, disjoint and
// non-adjacent (at least one missing packet between two ranges).
func AppendAck(b []byte, delay uint64, ranges []AckRange) []byte {
	if len(ranges) == 0 {
		return b
	}
	b = append(b, FrameAck)
	b = varint.Append(b, ranges[0].Largest)
	b = varint.Append(b, delay)
	b = varint.Append(b, uint64(len(ranges)-1))
	b = varint.Append(b, ranges[0].Largest-ranges[0].Smallest)
	for i := 1; i < len(ranges); i++ {
		b = varint.Append(b, ranges[i-1].Smallest-ranges[i].Largest-2)
		b = varint.Append(b, ranges[i].Largest-ranges[i].Smallest)
	}
	return b
}

// Frame is one decoded frame. Only the fields of its Type are set; byte
// slices alias the packet.
type Frame struct {
	Type      byte   // frame type; for STREAM, FrameStream (flags are decoded)
	StreamID  uint64 // STREAM, RESET_STREAM, MAX_STREAM_DATA
	Offset    uint64 // STREAM
	Data      []byte // STREAM data, DATAGRAM payload, CLOSE reason
	Meta      []byte // STREAM with HasMeta
	HasMeta   bool
	Fin       bool
	Code      uint64 // RESET_STREAM, CLOSE
	FinalSize uint64 // RESET_STREAM
	Max       uint64 // MAX_DATA, MAX_STREAM_DATA, MAX_STREAMS
	Ack       Ack
	Parity    Parity // PARITY (its bytes in Data)
	Backup    bool   // PATH_ROLE: the path is the sender's backup
}

// Parity is a decoded PARITY frame's header: the slice [Offset, Offset +
// len(Data)) of the block that XORs packets First .. First+Count-1, each
// as its 2-byte big-endian length and its payload, zero-padded to Size.
type Parity struct {
	First, Count, Size, Offset uint64
}

// AckEliciting reports whether receiving this frame obliges the peer to
// acknowledge the packet.
func (f *Frame) AckEliciting() bool {
	return f.Type != FrameAck && f.Type != FramePadding && f.Type != FrameClose
}

// ParseFrame decodes the frame at the start of b into f and returns its
// length. Every field is range-checked so the caller may use it directly.
func ParseFrame(b []byte, f *Frame) (int, error) {
	if len(b) == 0 {
		return 0, malformed("empty frame")
	}
	t := b[0]
	p := 1
	var ok bool
	next := func() uint64 {
		v, n := varint.Read(b[p:])
		if n == 0 {
			ok = false
			return 0
		}
		p += n
		return v
	}
	ok = true
	*f = Frame{Type: t}
	switch {
	case t == FramePadding, t == FramePing:
		return 1, nil
	case t == FrameAck:
		a := &f.Ack
		a.Largest = next()
		a.Delay = next()
		a.NumRanges = next()
		a.FirstRange = next()
		if !ok {
			return 0, malformed("ACK: truncated")
		}
		if a.FirstRange > a.Largest {
			return 0, malformed("ACK: first range below zero")
		}
		smallest := a.Largest - a.FirstRange
		start := p
		for i := uint64(0); i < a.NumRanges; i++ {
			gap := next()
			length := next()
			if !ok {
				return 0, malformed("ACK: truncated ranges")
			}
			if smallest < gap+2 || smallest-gap-2 < length {
				return 0, malformed("ACK: range below zero")
			}
			smallest = smallest - gap - 2 - length
		}
		a.rest = b[start:p]
		a.Smallest = smallest
		return p, nil
	case t == FrameResetStream:
		f.StreamID = next()
		f.Code = next()
		f.FinalSize = next()
		if !ok {
			return 0, malformed("RESET_STREAM: truncated")
		}
		return p, nil
	case t == FrameMaxData, t == FrameMaxStreams:
		f.Max = next()
		if !ok {
			return 0, malformed("MAX_DATA/MAX_STREAMS: truncated")
		}
		return p, nil
	case t == FrameMaxStreamData:
		f.StreamID = next()
		f.Max = next()
		if !ok {
			return 0, malformed("MAX_STREAM_DATA: truncated")
		}
		return p, nil
	case t == FrameDatagram:
		l := next()
		if !ok || l > uint64(len(b)-p) {
			return 0, malformed("DATAGRAM: truncated")
		}
		f.Data = b[p : p+int(l)]
		return p + int(l), nil
	case t == FrameClose:
		f.Code = next()
		l := next()
		if !ok || l > uint64(len(b)-p) {
			return 0, malformed("CLOSE: truncated")
		}
		if l > MaxReasonLen {
			return 0, malformed("CLOSE: reason too long")
		}
		f.Data = b[p : p+int(l)]
		return p + int(l), nil
	case t == FrameParity:
		q := &f.Parity
		q.First = next()
		q.Count = next()
		q.Size = next()
		q.Offset = next()
		l := next()
		if !ok || l > uint64(len(b)-p) {
			return 0, malformed("PARITY: truncated")
		}
		if q.Count == 0 || q.Count > MaxParityCount || q.First > varint.Max-q.Count {
			return 0, malformed("PARITY: bad packet range")
		}
		if q.Size < 3 || q.Size > MaxParityBlock || l == 0 || q.Offset > q.Size || l > q.Size-q.Offset {
			return 0, malformed("PARITY: bad block slice")
		}
		f.Data = b[p : p+int(l)]
		return p + int(l), nil
	case t == FramePathRole:
		role := next()
		if !ok {
			return 0, malformed("PATH_ROLE: truncated")
		}
		if role > PathRoleBackup {
			return 0, malformed("PATH_ROLE: unknown role")
		}
		f.Backup = role == PathRoleBackup
		return p, nil
	case t&^0x07 == FrameStream:
		f.Type = FrameStream
		f.Fin = t&StreamFlagFin != 0
		f.StreamID = next()
		f.Offset = next()
		if !ok {
			return 0, malformed("STREAM: truncated")
		}
		if t&StreamFlagMeta != 0 {
			if f.Offset != 0 {
				return 0, malformed("STREAM: metadata at non-zero offset")
			}
			l := next()
			if !ok || l > uint64(len(b)-p) {
				return 0, malformed("STREAM: truncated metadata")
			}
			if l > MaxMetaLen {
				return 0, malformed("STREAM: metadata too long")
			}
			f.HasMeta = true
			f.Meta = b[p : p+int(l)]
			p += int(l)
		}
		l := uint64(len(b) - p)
		if t&StreamFlagLen != 0 {
			l = next()
			if !ok || l > uint64(len(b)-p) {
				return 0, malformed("STREAM: truncated data")
			}
		}
		if f.Offset+l > varint.Max {
			return 0, malformed("STREAM: offset overflow")
		}
		f.Data = b[p : p+int(l)]
		return p + int(l), nil
	}
	return 0, fmt.Errorf("%w: unknown frame type %#x", ErrMalformed, t)
}

// StreamHeaderLen is the size of a STREAM frame's header (everything but
// the data). meta is only sent when hasMeta.
func StreamHeaderLen(id, off uint64, metaLen int, hasMeta, withLen bool, dataLen int) int {
	n := 1 + varint.Len(id) + varint.Len(off)
	if hasMeta {
		n += varint.Len(uint64(metaLen)) + metaLen
	}
	if withLen {
		n += varint.Len(uint64(dataLen))
	}
	return n
}

// AppendStreamHeader appends a STREAM frame header; the caller appends
// dataLen bytes of data after it. Without withLen the data must run to the
// end of the packet.
func AppendStreamHeader(b []byte, id, off uint64, meta []byte, hasMeta, fin, withLen bool, dataLen int) []byte {
	t := byte(FrameStream)
	if fin {
		t |= StreamFlagFin
	}
	if withLen {
		t |= StreamFlagLen
	}
	if hasMeta {
		t |= StreamFlagMeta
	}
	b = append(b, t)
	b = varint.Append(b, id)
	b = varint.Append(b, off)
	if hasMeta {
		b = varint.Append(b, uint64(len(meta)))
		b = append(b, meta...)
	}
	if withLen {
		b = varint.Append(b, uint64(dataLen))
	}
	return b
}

// AppendResetStream appends a RESET_STREAM frame.
func AppendResetStream(b []byte, id, code, finalSize uint64) []byte {
	b = append(b, FrameResetStream)
	b = varint.Append(b, id)
	b = varint.Append(b, code)
	return varint.Append(b, finalSize)
}

// ResetStreamLen is the size of a RESET_STREAM frame.
func ResetStreamLen(id, code, finalSize uint64) int {
	return 1 + varint.Len(id) + varint.Len(code) + varint.Len(finalSize)
}

// AppendMaxData appends a MAX_DATA (or, with t = FrameMaxStreams, a
// MAX_STREAMS) frame.
func AppendMaxData(b []byte, t byte, max uint64) []byte {
	return varint.Append(append(b, t), max)
}

// AppendMaxStreamData appends a MAX_STREAM_DATA frame.
func AppendMaxStreamData(b []byte, id, max uint64) []byte {
	b = append(b, FrameMaxStreamData)
	b = varint.Append(b, id)
	return varint.Append(b, max)
}

// AppendDatagram appends a DATAGRAM frame.
func AppendDatagram(b []byte, p []byte) []byte {
	b = varint.Append(append(b, FrameDatagram), uint64(len(p)))
	return append(b, p...)
}

// AppendParity appends a PARITY frame carrying data, the slice of the
// block q describes from q.Offset.
func AppendParity(b []byte, q Parity, data []byte) []byte {
	b = append(b, FrameParity)
	for _, v := range [...]uint64{q.First, q.Count, q.Size, q.Offset, uint64(len(data))} {
		b = varint.Append(b, v)
	}
	return append(b, data...)
}

// ParityHeaderLen is the size of a PARITY frame's header (everything but
// its bytes) carrying n bytes.
func ParityHeaderLen(q Parity, n int) int {
	return 1 + varint.Len(q.First) + varint.Len(q.Count) + varint.Len(q.Size) + varint.Len(q.Offset) + varint.Len(uint64(n))
}

// PATH_ROLE's roles.
const (
	PathRolePrimary = 0
	PathRoleBackup  = 1
)

// PathRoleLen is the size of a PATH_ROLE frame.
const PathRoleLen = 2

// AppendPathRole appends a PATH_ROLE frame: the path the packet goes on
// is the sender's backup, or a primary.
func AppendPathRole(b []byte, backup bool) []byte {
	role := uint64(PathRolePrimary)
	if backup {
		role = PathRoleBackup
	}
	return varint.Append(append(b, FramePathRole), role)
}

// DatagramLen is the size of a DATAGRAM frame carrying n bytes.
func DatagramLen(n int) int { return 1 + varint.Len(uint64(n)) + n }

// AppendClose appends a CLOSE frame; reason is cut to MaxReasonLen.
func AppendClose(b []byte, code uint64, reason string) []byte {
	if len(reason) > MaxReasonLen {
		reason = reason[:MaxReasonLen]
	}
	b = append(b, FrameClose)
	b = varint.Append(b, code)
	b = varint.Append(b, uint64(len(reason)))
	return append(b, reason...)
}
