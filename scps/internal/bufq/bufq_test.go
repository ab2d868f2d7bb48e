package bufq

// This file checks Buffer against its source bytes and for allocations.

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

func TestBufferRandomWritesReads(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	const size = 200_000
	src := make([]byte, size)
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	var b Buffer
	written := make([]bool, size)
	var released uint64
	for op := 0; op < 5000; op++ {
		switch r.IntN(3) {
		case 0, 1:
			off := released + uint64(r.IntN(50_000))
			n := uint64(r.IntN(3000))
			if off+n > size {
				continue
			}
			b.Write(off, src[off:off+n])
			for i := off; i < off+n; i++ {
				written[i] = true
			}
		case 2:
			// Read a random written run, then maybe release below it.
			off := released + uint64(r.IntN(50_000))
			if off >= size {
				continue
			}
			end := off
			for end < size && written[end] && end-off < 5000 {
				end++
			}
			got := make([]byte, end-off)
			b.Read(off, got)
			if !bytes.Equal(got, src[off:end]) {
				t.Fatalf("read [%d,%d) wrong", off, end)
			}
			if r.IntN(2) == 0 {
				released = off
				b.Release(off)
				if b.Base() > off {
					t.Fatalf("base %d above release point %d", b.Base(), off)
				}
			}
		}
	}
	if b.Bytes() > (50_000+3000)/ChunkSize*ChunkSize+2*ChunkSize {
		t.Errorf("holds %d bytes for a 53 KB window", b.Bytes())
	}
	b.Free()
	if b.Bytes() != 0 {
		t.Errorf("Free left %d bytes", b.Bytes())
	}
}

func TestSteadyStateAllocatesNothing(t *testing.T) {
	var b Buffer
	p := make([]byte, 1400)
	var off uint64
	for i := 0; i < 100; i++ {
		b.Write(off, p)
		off += 1400
	}
	allocs := testing.AllocsPerRun(1000, func() {
		b.Write(off, p)
		b.Read(off-50_000, p)
		b.Release(off - 100_000)
		off += 1400
	})
	if allocs > 0.01 {
		t.Errorf("%v allocations per write/read/release", allocs)
	}
}
