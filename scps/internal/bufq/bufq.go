// Package bufq owns Buffer, the byte store behind every stream direction:
// a window of the stream's byte space, addressed by absolute stream offset,
// held in fixed-size chunks from a shared pool. Send buffers append at the
// top, are read at random (retransmissions) and released from the bottom as
// data is acknowledged; receive buffers are written at random (reordered
// frames) and released from the bottom as the application reads. Memory is
// taken chunk by chunk as data arrives and returned as soon as it is
// released, so an idle stream holds nothing.
package bufq

import "sync"

// ChunkSize is the unit of allocation.
const ChunkSize = 8 << 10

type chunk = [ChunkSize]byte

var pool = sync.Pool{New: func() any { return new(chunk) }}

// Buffer stores bytes at absolute offsets >= Base(). The zero value is
// empty with base 0.
type Buffer struct {
	base   uint64   // offset of the first byte of ring[head]; a multiple of ChunkSize
	ring   []*chunk // power-of-two ring of chunk pointers; nil = not yet written
	head   int
	count  int // chunks in use from head
	chunks int // non-nil chunks held (for accounting)
}

// Base is the lowest offset still held (rounded down to a chunk).
func (b *Buffer) Base() uint64 { return b.base }

// Bytes is the memory currently held.
func (b *Buffer) Bytes() int { return b.chunks * ChunkSize }

func (b *Buffer) slot(i int) **chunk { return &b.ring[(b.head+i)&(len(b.ring)-1)] }

func (b *Buffer) grow(need int) {
	n := len(b.ring)
	if n == 0 {
		n = 4
	}
	for n < need {
		n *= 2
	}
	nr := make([]*chunk, n)
	for i := 0; i < b.count; i++ {
		nr[i] = *b.slot(i)
	}
	b.ring, b.head = nr, 0
}

// Write stores p at offset off; off must be >= Base(). Bytes below Base()
// are silently skipped (they were already released).
func (b *Buffer) Write(off uint64, p []byte) {
	if off < b.base {
		skip := b.base - off
		if skip >= uint64(len(p)) {
			return
		}
		p, off = p[skip:], b.base
	}
	for len(p) > 0 {
		rel := off - b.base
		ci := int(rel / ChunkSize)
		co := int(rel % ChunkSize)
		if ci >= b.count {
			if ci >= len(b.ring) {
				b.grow(ci + 1)
			}
			b.count = ci + 1
		}
		s := b.slot(ci)
		if *s == nil {
			*s = pool.Get().(*chunk)
			b.chunks++
		}
		n := copy((*s)[co:], p)
		p = p[n:]
		off += uint64(n)
	}
}

// Read copies len(p) bytes starting at off into p. The range must have been
// written and not released.
func (b *Buffer) Read(off uint64, p []byte) {
	for len(p) > 0 {
		rel := off - b.base
		ci := int(rel / ChunkSize)
		co := int(rel % ChunkSize)
		c := *b.slot(ci)
		n := copy(p, c[co:])
		p = p[n:]
		off += uint64(n)
	}
}

// Release frees every chunk that lies wholly below off.
func (b *Buffer) Release(off uint64) {
	for b.count > 0 && off >= b.base+ChunkSize {
		s := b.slot(0)
		if *s != nil {
			pool.Put(*s)
			*s = nil
			b.chunks--
		}
		b.head = (b.head + 1) & (len(b.ring) - 1)
		b.count--
		b.base += ChunkSize
	}
	if b.count == 0 && off > b.base {
		b.base = off - off%ChunkSize
	}
}

// Free returns all memory to the pool; the buffer must not be used again
// except through Reset semantics (it becomes empty at its current base).
func (b *Buffer) Free() {
	for i := 0; i < b.count; i++ {
		s := b.slot(i)
		if *s != nil {
			pool.Put(*s)
			*s = nil
		}
	}
	b.count, b.chunks, b.head = 0, 0, 0
	b.ring = nil
}
