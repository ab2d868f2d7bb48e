package varint

import "testing"

func TestVarint(t *testing.T) {
	for _, v := range []uint64{0, 1, 63, 64, 16383, 16384, 1<<30 - 1, 1 << 30, Max} {
		b := Append(nil, v)
		if len(b) != Len(v) {
			t.Errorf("%d: len %d, Len %d", v, len(b), Len(v))
		}
		got, n := Read(b)
		if got != v || n != len(b) {
			t.Errorf("%d: read %d (%d bytes)", v, got, n)
		}
		if _, n := Read(b[:len(b)-1]); n != 0 {
			t.Errorf("%d: truncated input decoded", v)
		}
	}
	if b := Append(nil, Max+5); len(b) != 8 {
		t.Errorf("oversize value not clamped: %x", b)
	}
}
