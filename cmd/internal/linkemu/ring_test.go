package linkemu

// Tests of the packet ring: FIFO order and contents across wrap-around and
// growth, the bound on its size, and take's due-time cut.

import (
	"bytes"
	"testing"
	"time"
)

func TestRingGrowsKeepingOrder(t *testing.T) {
	r := newRing(1024, 64)
	var next, want int // next sequence to fill, next expected out
	dst := make([][]byte, 300)
	for i := range dst {
		dst[i] = make([]byte, 16+200)
	}
	produce := func(n int) int {
		seq, free := r.reserve(n)
		k := min(n, free)
		for i := range k {
			r.fill(seq+uint64(i), packet(next, 20+next%100), time.Duration(next))
			next++
		}
		r.publish(k)
		return k
	}
	consume := func(upTo int) {
		k, _ := r.take(time.Duration(upTo), dst, 16)
		for i := range k {
			if !bytes.Equal(dst[i][16:], packet(want, 20+want%100)) {
				t.Fatalf("packet %d out of order or corrupted", want)
			}
			want++
		}
	}
	// Wrap the initial ring a few times, then grow while wrapped.
	for range 10 {
		produce(200)
		consume(next - 50) // leave 49 queued across the wrap
	}
	if len(r.slots) != initialSlots {
		t.Fatalf("grew to %d without need", len(r.slots))
	}
	if got := produce(700); got != 700 || len(r.slots) != 1024 {
		t.Fatalf("reserved %d, ring %d slots", got, len(r.slots))
	}
	// At the bound only what is free can be reserved.
	free := 1024 - (next - want)
	if got := produce(300); got != free || free >= 300 {
		t.Fatalf("reserved %d at the bound, want %d", got, free)
	}
	for want < next {
		consume(next)
	}
	if at, ok := r.next(); ok {
		t.Fatalf("ring not empty: head due at %v", at)
	}
}

func TestRingTakeStopsAtDueTime(t *testing.T) {
	r := newRing(16, 64)
	seq, _ := r.reserve(3)
	for i := range 3 {
		r.fill(seq+uint64(i), []byte{byte(i)}, time.Duration(i+1)*time.Millisecond)
	}
	r.publish(3)
	dst := [][]byte{make([]byte, 32), make([]byte, 32), make([]byte, 32)}
	if at, ok := r.next(); !ok || at != time.Millisecond {
		t.Fatalf("next = %v, %v", at, ok)
	}
	if k, n := r.take(2*time.Millisecond, dst, 10); k != 2 || n != 2 || dst[1][10] != 1 {
		t.Fatalf("took %d packets, %d bytes", k, n)
	}
	if k, _ := r.take(2*time.Millisecond, dst, 10); k != 0 {
		t.Fatalf("took %d packets not yet due", k)
	}
	if at, ok := r.next(); !ok || at != 3*time.Millisecond {
		t.Fatalf("next = %v, %v", at, ok)
	}
}
