// Package varint is the variable-length integer of scpsvpn's wire formats,
// QUIC's (RFC 9000 section 16): the two most significant bits of the first
// byte give the length (1, 2, 4 or 8 bytes), the rest is the value in
// network byte order. The association's packets and frames
// (scps/spec.md) and the tunnel's handshake parameters (tunnel/spec.md)
// both use it.
package varint

// Max is the largest value a varint can carry (2^62-1).
const Max = 1<<62 - 1

// Len is the encoded size of v; v must be <= Max.
func Len(v uint64) int {
	switch {
	case v < 1<<6:
		return 1
	case v < 1<<14:
		return 2
	case v < 1<<30:
		return 4
	default:
		return 8
	}
}

// Append appends v in the shortest form (v must be <= Max; larger values
// are clamped so a caller bug can never produce undecodable bytes).
func Append(b []byte, v uint64) []byte {
	if v > Max {
		v = Max
	}
	switch {
	case v < 1<<6:
		return append(b, byte(v))
	case v < 1<<14:
		return append(b, byte(v>>8)|0x40, byte(v))
	case v < 1<<30:
		return append(b, byte(v>>24)|0x80, byte(v>>16), byte(v>>8), byte(v))
	default:
		return append(b, byte(v>>56)|0xc0, byte(v>>48), byte(v>>40), byte(v>>32),
			byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
}

// Read decodes a varint from the start of b and returns it with its
// length; n == 0 means b was too short. Any form is accepted: a caller that
// needs the shortest compares n with Len(v).
func Read(b []byte) (v uint64, n int) {
	if len(b) == 0 {
		return 0, 0
	}
	l := 1 << (b[0] >> 6)
	if len(b) < l {
		return 0, 0
	}
	v = uint64(b[0] & 0x3f)
	for i := 1; i < l; i++ {
		v = v<<8 | uint64(b[i])
	}
	return v, l
}
