package tunnel

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPeerRxIsolation: a peer whose receive work is stuck fills only its
// own queue: the reader never waits on it, its overflow is dropped and
// counted, another peer's packets keep flowing, and a handshake queued
// behind the backlog is kept, after everything it displaced.
func TestPeerRxIsolation(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var dropsA, dropsB atomic.Uint64
	slow, fast := newPeerRx(&dropsA, rxQueueMax), newPeerRx(&dropsB, rxQueueMax)
	release := make(chan struct{})
	var mu sync.Mutex
	var gotA []rxItem
	var gotB int
	wg.Add(2)
	go func() {
		defer wg.Done()
		slow.run(ctx, func(it rxItem) {
			<-release
			mu.Lock()
			gotA = append(gotA, rxItem{established: it.established, n: it.n})
			mu.Unlock()
		})
	}()
	go func() {
		defer wg.Done()
		fast.run(ctx, func(rxItem) {
			mu.Lock()
			gotB++
			mu.Unlock()
		})
	}()

	pushed := make(chan struct{})
	go func() {
		for i := 0; i < 3*rxQueueLen; i++ {
			slow.push(1, uint64(i), rxBuf(1+i%1400), 1+i%1400, netip.AddrPort{}, -1, time.Time{})
		}
		slow.pushEstablished(2, nil, []byte("params"), 0, false)
		close(pushed)
	}()
	select {
	case <-pushed:
	case <-time.After(waitTime):
		t.Fatal("pushing to a stuck peer's queue blocked")
	}
	for range 100 {
		fast.push(1, 0, rxBuf(5), 5, netip.AddrPort{}, -1, time.Time{})
	}
	if !waitFor(waitTime, func() bool { mu.Lock(); defer mu.Unlock(); return gotB == 100 }) {
		t.Fatalf("the other peer got %d of 100 packets while one peer was stuck", gotB)
	}
	close(release)
	if !waitFor(waitTime, func() bool { mu.Lock(); defer mu.Unlock(); return len(gotA) > 0 && gotA[len(gotA)-1].established }) {
		t.Fatal("the stuck peer's handshake was lost")
	}
	mu.Lock()
	handled := len(gotA)
	mu.Unlock()
	// Everything pushed was handled (at most one in the handler and a
	// queue's worth) or counted as dropped.
	if total := uint64(handled) + dropsA.Load(); total != 3*rxQueueLen+1 {
		t.Errorf("stuck peer: %d handled + %d dropped, pushed %d", handled, dropsA.Load(), 3*rxQueueLen+1)
	}
	if handled > rxQueueLen+1 || dropsB.Load() != 0 {
		t.Errorf("stuck peer handled %d (queue %d); other peer dropped %d", handled, rxQueueLen, dropsB.Load())
	}
}

// TestPeerRxBoundedInBytes: a peer's queue holds no more bytes of packet
// buffers than its limit, whatever the packets' size: a stuck peer whose
// path carries 64 KB datagrams fills it with a few of them, not 1024
// (64 MB); the rest is dropped and counted, and the bytes held go back to
// zero as the queue drains.
func TestPeerRxBoundedInBytes(t *testing.T) {
	const limit = 1 << 20
	var drops atomic.Uint64
	r := newPeerRx(&drops, limit)
	for i := range rxQueueLen {
		r.push(1, uint64(i), rxBuf(65535), 65535, netip.AddrPort{}, -1, time.Time{})
		if h := r.held.Load(); h > limit {
			t.Fatalf("after %d packets of 64 KB the queue holds %d bytes, limit %d", i+1, h, limit)
		}
	}
	queued := len(r.q)
	t.Logf("%d packets of 64 KB: %d queued (%d bytes), %d dropped", rxQueueLen, queued, r.held.Load(), drops.Load())
	if queued == 0 || queued > limit/65535 || uint64(queued)+drops.Load() != rxQueueLen {
		t.Errorf("%d queued and %d dropped of %d, want at most %d queued and the rest dropped", queued, drops.Load(), rxQueueLen, limit/65535)
	}
	// A smaller limit (a reload with more peers) holds from the next push.
	r.limit.Store(limit / 4)
	r.push(1, 0, rxBuf(65535), 65535, netip.AddrPort{}, -1, time.Time{})
	if drops.Load() != rxQueueLen-uint64(queued)+1 {
		t.Errorf("a push over the lowered limit was queued")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.run(ctx, func(rxItem) {})
	}()
	if !waitFor(waitTime, func() bool { return r.held.Load() == 0 }) {
		t.Errorf("the drained queue still counts %d bytes held", r.held.Load())
	}
	cancel()
	<-done
}

// TestRxBufFitsPacket: the UDP reader decrypts into rxBuf's buffer, so it
// must hold the whole packet, of a 1500-byte path or a jumbo one, and be
// handed over at full length whatever its last user sliced it to.
func TestRxBufFitsPacket(t *testing.T) {
	for _, n := range []int{1, 1500, 9000, 65535} {
		bp := rxBuf(n)
		if len(*bp) < n || len(*bp) != cap(*bp) {
			t.Errorf("rxBuf(%d): len %d cap %d", n, len(*bp), cap(*bp))
		}
		*bp = (*bp)[:0]
		rxBufs.Put(bp)
	}
}
