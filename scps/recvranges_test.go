package scps

import (
	"errors"
	"testing"

	"scpsvpn/scps/internal/streams"
	"scpsvpn/scps/internal/wire"
)

// sparsePacket is a packet with one 1-byte STREAM frame on stream id at
// each offset (the first frame of stream id carries its metadata).
func sparsePacket(id uint64, offsets ...uint64) []byte {
	var p []byte
	for _, off := range offsets {
		meta := off == 0
		p = wire.AppendStreamHeader(p, id, off, []byte("m"), meta, false, true, 1)
		p = append(p, 'x')
	}
	return p
}

// TestSparseFramesBounded: a peer that sends 1-byte frames two bytes apart
// fills a stream with holes. The stream holds at most streams.MaxStreamRanges
// ranges, the association at most streams.MaxAssocRanges; a packet that would
// exceed them is dropped unacknowledged, a packet that repairs holes is
// taken, and a peer that keeps at it is cut off.
func TestSparseFramesBounded(t *testing.T) {
	link := linkParams{}
	s := newSim(t, 1, DefaultConfig(), DefaultConfig(), link, link)
	b := s.a[1]
	pn := uint64(0)
	recv := func(p []byte) error {
		pn++
		return b.Receive(s.clock(), pn-1, p)
	}
	// Stream 0: holes up to the stream bound, 64 per packet.
	off := uint64(0)
	for b.streams.ByID[0] == nil || b.streams.ByID[0].Ranges() < streams.MaxStreamRanges {
		var offs []uint64
		for range 64 {
			offs = append(offs, off)
			off += 2
		}
		if err := recv(sparsePacket(0, offs...)); err != nil {
			t.Fatalf("packet %d (stream at %d ranges): %v", pn, b.streams.ByID[0].Ranges(), err)
		}
	}
	st := b.streams.ByID[0]
	if st.Ranges() != streams.MaxStreamRanges || b.streams.RecvRanges != streams.MaxStreamRanges {
		t.Fatalf("stream holds %d ranges, association counts %d, want %d", st.Ranges(), b.streams.RecvRanges, streams.MaxStreamRanges)
	}
	// One more hole: dropped, and not acknowledged.
	acked := b.ack.ReceivedTotal()
	if err := recv(sparsePacket(0, off)); !errors.Is(err, ErrRangesFull) {
		t.Fatalf("a packet past the stream bound: %v", err)
	}
	if b.ack.ReceivedTotal() != acked || b.Stats().RecvRangeDrops != 1 || st.Ranges() != streams.MaxStreamRanges {
		t.Fatalf("the refused packet was recorded: acked %d -> %d, drops %d, ranges %d", acked, b.ack.ReceivedTotal(), b.Stats().RecvRangeDrops, st.Ranges())
	}
	// Data that fills holes is always taken: [1, 2) merges two ranges.
	if err := recv(sparsePacket(0, 1)); err != nil {
		t.Fatalf("a repair: %v", err)
	}
	if st.Ranges() != streams.MaxStreamRanges-1 || b.streams.RecvRanges != streams.MaxStreamRanges-1 {
		t.Fatalf("after a repair: %d ranges (association %d)", st.Ranges(), b.streams.RecvRanges)
	}
	// Reading returns the ranges below the read offset.
	buf := make([]byte, 3)
	if n, err := b.StreamRead(0, buf); n != 3 || err != nil {
		t.Fatalf("read: %d %v", n, err)
	}
	if st.Ranges() != streams.MaxStreamRanges-2 || b.streams.RecvRanges != streams.MaxStreamRanges-2 {
		t.Fatalf("after reading 3 bytes: %d ranges (association %d)", st.Ranges(), b.streams.RecvRanges)
	}

	// Other streams up to the association bound, each below its own.
	id := uint64(4) // more of the peer's streams
	for b.streams.RecvRanges < streams.MaxAssocRanges-64 {
		var offs []uint64
		for i := range uint64(64) {
			offs = append(offs, i*2)
		}
		if err := recv(sparsePacket(id, offs...)); err != nil {
			t.Fatalf("stream %d at %d association ranges: %v", id, b.streams.RecvRanges, err)
		}
		id += 2
	}
	var offs []uint64
	for i := range uint64(65) {
		offs = append(offs, i*2)
	}
	if err := recv(sparsePacket(id, offs...)); !errors.Is(err, ErrRangesFull) {
		t.Fatalf("a packet past the association bound (%d ranges): %v", b.streams.RecvRanges, err)
	}
	if b.streams.RecvRanges > streams.MaxAssocRanges {
		t.Fatalf("the association holds %d ranges", b.streams.RecvRanges)
	}
	// Keeping at it closes the association.
	for i := 0; !b.Closed(); i++ {
		if i > streams.MaxRangeStrikes {
			t.Fatalf("still open after %d refused packets", i)
		}
		recv(sparsePacket(0, off+uint64(2*i)))
	}
	if !errors.Is(b.Err(), ErrProtocol) || b.Stats().RangeAbuseCloses != 1 {
		t.Fatalf("closed with %v, abuse closes %d", b.Err(), b.Stats().RangeAbuseCloses)
	}
}

// BenchmarkHostileSparseFrames: the cost of a packet of 64 one-byte frames
// placed two bytes apart, each packet below the one before (every insert
// lands in front of all the ranges held), on one stream.
func BenchmarkHostileSparseFrames(b *testing.B) {
	link := linkParams{}
	s := newSim(b, 1, DefaultConfig(), DefaultConfig(), link, link)
	r := s.a[1]
	top := r.cfg.initialStreamWindow() - 2
	if err := r.Receive(s.clock(), 0, sparsePacket(0, 0)); err != nil {
		b.Fatal(err)
	}
	most := 0
	b.ResetTimer()
	for i := 0; i < b.N && !r.Closed(); i++ {
		offs := make([]uint64, 64)
		for j := range offs {
			offs[j] = top - 2*uint64(j)
		}
		top -= 128
		if top < 256 {
			top = r.cfg.initialStreamWindow() - 3 // an odd lattice, as fresh
		}
		r.Receive(s.clock(), uint64(i+1), sparsePacket(0, offs...))
		most = max(most, r.streams.RecvRanges)
	}
	b.ReportMetric(float64(most), "max-ranges")
}
