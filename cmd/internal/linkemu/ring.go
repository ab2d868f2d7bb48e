package linkemu

// This file owns the packet ring of one direction: a single-producer
// (the reader of the sending TUN) single-consumer (the writer to the
// receiving TUN) FIFO of packets with their delivery times. Delivery times
// never decrease within a direction (serialization is FIFO and the delay is
// constant), so a FIFO is the ordered queue and the head is always the next
// packet due. Slots own their buffers, allocated on first use and reused;
// the ring starts small and doubles when the producer finds it full (up to
// a bound), so memory follows the packets actually in flight and the steady
// state allocates nothing.
//
// Only the producer writes the slot array (filling reserved slots without
// the lock; growing under it); the consumer reads slots under the lock.

import (
	"sync"
	"time"
)

type slot struct {
	buf []byte
	n   int
	at  time.Duration // delivery time since start
}

type ring struct {
	mu       sync.Mutex
	head     uint64 // next slot to deliver
	tail     uint64 // next free slot
	slots    []slot // length is a power of two
	mask     uint64
	maxSlots int
	bufCap   int
	notify   chan struct{} // wakes the consumer when packets are published
}

const initialSlots = 256

func newRing(maxSlots, bufCap int) *ring {
	n := min(initialSlots, maxSlots)
	return &ring{
		slots:    make([]slot, n),
		mask:     uint64(n - 1),
		maxSlots: maxSlots,
		bufCap:   bufCap,
		notify:   make(chan struct{}, 1),
	}
}

// reserve returns the first free slot's sequence number and how many slots
// (up to want) the producer may fill before publishing, growing the ring if
// it is too full. Only the producer calls it.
func (r *ring) reserve(want int) (uint64, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	used := int(r.tail - r.head)
	for len(r.slots)-used < want && len(r.slots) < r.maxSlots {
		r.grow()
	}
	return r.tail, min(want, len(r.slots)-used)
}

// grow doubles the slot array, keeping every slot (and buffer) at the
// position its sequence number maps to.
func (r *ring) grow() {
	n := len(r.slots) * 2
	slots := make([]slot, n)
	mask := uint64(n - 1)
	for seq := r.head; seq < r.head+uint64(len(r.slots)); seq++ {
		slots[seq&mask] = r.slots[seq&r.mask]
	}
	r.slots, r.mask = slots, mask
}

// fill copies pkt into the slot at seq, which the producer reserved.
func (r *ring) fill(seq uint64, pkt []byte, at time.Duration) {
	s := &r.slots[seq&r.mask]
	if cap(s.buf) < len(pkt) {
		s.buf = make([]byte, max(len(pkt), r.bufCap))
	}
	s.n = copy(s.buf[:cap(s.buf)], pkt)
	s.at = at
}

// publish hands k filled slots to the consumer.
func (r *ring) publish(k int) {
	if k == 0 {
		return
	}
	r.mu.Lock()
	r.tail += uint64(k)
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// next reports whether a packet is queued and when the first one is due.
func (r *ring) next() (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.head == r.tail {
		return 0, false
	}
	return r.slots[r.head&r.mask].at, true
}

// take copies the packets due by now (at most len(dst)) into dst's buffers
// after off bytes of headroom, frees their slots, and returns how many it
// took and their total size.
func (r *ring) take(now time.Duration, dst [][]byte, off int) (int, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k, bytes := 0, uint64(0)
	for seq := r.head; seq < r.tail && k < len(dst); seq++ {
		s := &r.slots[seq&r.mask]
		if s.at > now {
			break
		}
		dst[k] = dst[k][:off+s.n]
		copy(dst[k][off:], s.buf[:s.n])
		bytes += uint64(s.n)
		k++
	}
	r.head += uint64(k)
	return k, bytes
}

// batch is the producer's reservation in a ring for one read: up to free
// slots from seq on, k of them filled so far. The zero batch (no ring)
// holds nothing.
type batch struct {
	r    *ring
	seq  uint64
	free int
	k    int
}

// batch reserves room for up to want packets (see reserve).
func (r *ring) batch(want int) batch {
	seq, free := r.reserve(want)
	return batch{r: r, seq: seq, free: free}
}

// add fills the next reserved slot; false if none is left.
func (b *batch) add(pkt []byte, at time.Duration) bool {
	if b.k == b.free {
		return false
	}
	b.r.fill(b.seq+uint64(b.k), pkt, at)
	b.k++
	return true
}

// publish hands the filled slots to the consumer.
func (b *batch) publish() {
	if b.r != nil {
		b.r.publish(b.k)
	}
}
