package wire

// This file tests and fuzzes the frame codecs.

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

func parseAll(t *testing.T, b []byte) []Frame {
	t.Helper()
	var out []Frame
	for p := 0; p < len(b); {
		var f Frame
		n, err := ParseFrame(b[p:], &f)
		if err != nil {
			t.Fatalf("at %d: %v", p, err)
		}
		out = append(out, f)
		p += n
	}
	return out
}

func TestFramesRoundTrip(t *testing.T) {
	var b []byte
	b = append(b, FramePing, FramePadding)
	ranges := []AckRange{{Smallest: 90, Largest: 100}, {Smallest: 50, Largest: 80}, {Smallest: 0, Largest: 10}}
	b = AppendAck(b, 1234, ranges)
	if l := AckFrameLen(1234, ranges); l != len(b)-2 {
		t.Errorf("AckFrameLen %d, encoded %d", l, len(b)-2)
	}
	b = AppendResetStream(b, 5, 42, 1<<33)
	b = AppendMaxData(b, FrameMaxData, 1<<40)
	b = AppendMaxData(b, FrameMaxStreams, 4096)
	b = AppendMaxStreamData(b, 7, 1<<20)
	b = AppendDatagram(b, []byte("dgram"))
	b = AppendClose(b, 9, "bye")
	b = AppendPathRole(b, true)
	b = AppendPathRole(b, false)
	b = AppendStreamHeader(b, 3, 0, []byte("meta"), true, false, true, 4)
	b = append(b, "data"...)
	b = AppendStreamHeader(b, 3, 4, nil, false, true, false, 5)
	b = append(b, "tail!"...)
	fs := parseAll(t, b)
	if len(fs) != 13 {
		t.Fatalf("%d frames", len(fs))
	}
	ack := fs[2].Ack
	if ack.Largest != 100 || ack.Delay != 1234 || ack.Smallest != 0 || ack.NumRanges != 2 {
		t.Errorf("ack %+v", ack)
	}
	it := ack.Iter()
	for i := 0; ; i++ {
		r, ok := it.Next()
		if !ok {
			if i != 3 {
				t.Errorf("%d ranges", i)
			}
			break
		}
		if r != ranges[i] {
			t.Errorf("range %d: %+v want %+v", i, r, ranges[i])
		}
	}
	if f := fs[3]; f.Type != FrameResetStream || f.StreamID != 5 || f.Code != 42 || f.FinalSize != 1<<33 {
		t.Errorf("reset %+v", f)
	}
	if f := fs[4]; f.Type != FrameMaxData || f.Max != 1<<40 {
		t.Errorf("max data %+v", f)
	}
	if f := fs[5]; f.Type != FrameMaxStreams || f.Max != 4096 {
		t.Errorf("max streams %+v", f)
	}
	if f := fs[6]; f.Type != FrameMaxStreamData || f.StreamID != 7 || f.Max != 1<<20 {
		t.Errorf("max stream data %+v", f)
	}
	if f := fs[7]; f.Type != FrameDatagram || string(f.Data) != "dgram" {
		t.Errorf("datagram %+v", f)
	}
	if f := fs[8]; f.Type != FrameClose || f.Code != 9 || string(f.Data) != "bye" || f.AckEliciting() {
		t.Errorf("close %+v", f)
	}
	if f := fs[9]; f.Type != FramePathRole || !f.Backup || !f.AckEliciting() {
		t.Errorf("path role %+v", f)
	}
	if f := fs[10]; f.Type != FramePathRole || f.Backup {
		t.Errorf("path role %+v", f)
	}
	if f := fs[11]; f.Type != FrameStream || f.StreamID != 3 || f.Offset != 0 || !f.HasMeta ||
		string(f.Meta) != "meta" || string(f.Data) != "data" || f.Fin {
		t.Errorf("stream %+v", f)
	}
	if f := fs[12]; f.Type != FrameStream || f.Offset != 4 || !f.Fin || string(f.Data) != "tail!" || f.HasMeta {
		t.Errorf("stream %+v", f)
	}
	if fs[2].AckEliciting() || !fs[11].AckEliciting() {
		t.Errorf("ack-eliciting wrong")
	}
}

func TestStreamHeaderLen(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 1000; i++ {
		id, off := r.Uint64()>>(2+r.IntN(60)), r.Uint64()>>(2+r.IntN(60))
		meta := make([]byte, r.IntN(20))
		hasMeta := off == 0 && r.IntN(2) == 0
		withLen := r.IntN(2) == 0
		n := r.IntN(2000)
		b := AppendStreamHeader(nil, id, off, meta, hasMeta, r.IntN(2) == 0, withLen, n)
		if l := StreamHeaderLen(id, off, len(meta), hasMeta, withLen, n); l != len(b) {
			t.Fatalf("StreamHeaderLen %d, encoded %d", l, len(b))
		}
	}
}

func TestMalformed(t *testing.T) {
	cases := [][]byte{
		{FrameAck, 5, 0, 0, 6},                  // first range below zero
		{FrameAck, 5, 0, 1, 0, 4, 0},            // gap below zero
		{FrameAck, 5, 0, 1, 0},                  // missing ranges
		{FrameStream | StreamFlagMeta, 0, 1, 0}, // metadata at offset 1
		{FrameStream | StreamFlagLen, 0, 0, 5, 'a'},
		{FrameDatagram, 3, 'a'},
		{FrameClose, 0, 9},
		{FrameResetStream, 1, 2},
		{FramePathRole},    // no role
		{FramePathRole, 2}, // an unknown role
		{0x3f},
		{FrameStream, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 'x'}, // offset + length overflows
	}
	for _, c := range cases {
		var f Frame
		if _, err := ParseFrame(c, &f); !errors.Is(err, ErrMalformed) {
			t.Errorf("%x: %v", c, err)
		}
	}
}

// FuzzParseFrame checks that no input panics the decoder and that what
// decodes re-encodes to a frame that decodes the same way.
func FuzzParseFrame(f *testing.F) {
	f.Add([]byte{FramePing})
	f.Add(AppendAck(nil, 10, []AckRange{{5, 9}, {0, 2}}))
	f.Add(AppendResetStream(nil, 1, 2, 3))
	f.Add(AppendMaxStreamData(nil, 4, 1<<20))
	f.Add(AppendDatagram(nil, []byte("x")))
	f.Add(AppendClose(nil, 1, "r"))
	f.Add(AppendParity(nil, Parity{First: 3, Count: 32, Size: 1300, Offset: 700}, []byte("xor")))
	f.Add(append(AppendStreamHeader(nil, 2, 0, []byte("m"), true, true, true, 2), "ab"...))
	f.Add(AppendPathRole(nil, true))
	f.Add([]byte{FramePathRole, 0x40, 0x01}) // a role in a longer varint
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr Frame
		n, err := ParseFrame(b, &fr)
		if err != nil {
			return
		}
		if n <= 0 || n > len(b) {
			t.Fatalf("length %d of %d", n, len(b))
		}
		var re []byte
		switch fr.Type {
		case FrameAck:
			var rs []AckRange
			it := fr.Ack.Iter()
			for {
				r, ok := it.Next()
				if !ok {
					break
				}
				if r.Smallest > r.Largest || (len(rs) > 0 && r.Largest+1 >= rs[len(rs)-1].Smallest) {
					t.Fatalf("bad range %+v after %+v", r, rs)
				}
				rs = append(rs, r)
			}
			if rs[len(rs)-1].Smallest != fr.Ack.Smallest {
				t.Fatalf("smallest %d, ranges end at %d", fr.Ack.Smallest, rs[len(rs)-1].Smallest)
			}
			re = AppendAck(nil, fr.Ack.Delay, rs)
		case FrameStream:
			re = AppendStreamHeader(nil, fr.StreamID, fr.Offset, fr.Meta, fr.HasMeta, fr.Fin, true, len(fr.Data))
			re = append(re, fr.Data...)
		case FrameDatagram:
			re = AppendDatagram(nil, fr.Data)
		case FrameParity:
			re = AppendParity(nil, fr.Parity, fr.Data)
		case FramePathRole:
			re = AppendPathRole(nil, fr.Backup)
			if len(re) != PathRoleLen {
				t.Fatalf("PATH_ROLE encoded in %d bytes, PathRoleLen %d", len(re), PathRoleLen)
			}
		default:
			return
		}
		var fr2 Frame
		if _, err := ParseFrame(re, &fr2); err != nil {
			t.Fatalf("re-encoded frame does not decode: %v", err)
		}
		if fr2.Type != fr.Type || fr2.StreamID != fr.StreamID || fr2.Offset != fr.Offset ||
			!bytes.Equal(fr2.Data, fr.Data) || fr2.Ack.Largest != fr.Ack.Largest || fr2.Ack.Smallest != fr.Ack.Smallest || fr2.Parity != fr.Parity || fr2.Backup != fr.Backup {
			t.Fatalf("round trip changed the frame: %+v vs %+v", fr, fr2)
		}
	})
}

// randomAckRanges makes n disjoint, non-adjacent ranges, highest first,
// with gaps and lengths of every varint size now and then.
func randomAckRanges(rng *rand.Rand, n int) []AckRange {
	rs := make([]AckRange, n)
	pn := uint64(1) << 40
	for i := range rs {
		size := func() uint64 {
			if rng.IntN(8) == 0 {
				return rng.Uint64N(1 << 20)
			}
			return rng.Uint64N(40)
		}
		rs[i].Largest = pn
		rs[i].Smallest = pn - size()
		pn = rs[i].Smallest - 2 - size()
	}
	return rs
}

// TestAckRangesFit: AckRangesFit is the most ranges whose frame fits,
// as measuring the frame for each count finds it.
func TestAckRangesFit(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		rs := randomAckRanges(rng, rng.IntN(300))
		delay := rng.Uint64N(1 << uint(rng.IntN(40)+1))
		room := rng.IntN(1500) - 10
		want := len(rs)
		for want > 0 && AckFrameLen(delay, rs[:want]) > room {
			want--
		}
		if got := AckRangesFit(delay, rs, room); got != want {
			t.Fatalf("%d ranges, delay %d, room %d: %d fit, want %d", len(rs), delay, room, got, want)
		}
	}
}

// BenchmarkAckRangesFit: the ranges of an ACK after a batch with several
// paths (maxUnsentRanges and more) cut to what a packet has room for.
func BenchmarkAckRangesFit(b *testing.B) {
	rs := randomAckRanges(rand.New(rand.NewPCG(3, 4)), 600)
	for _, room := range []int{1200, 300} {
		b.Run(fmt.Sprintf("room=%d", room), func(b *testing.B) {
			for b.Loop() {
				if AckRangesFit(7, rs, room) == 0 {
					b.Fatal("nothing fits")
				}
			}
		})
	}
}
