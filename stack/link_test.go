// Tests of the link endpoint's outbound queue: packet bytes and order,
// batching from one writer, backpressure, bounded blocking with drops, and
// allocations.

package stack

import (
	"bytes"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
)

// testPacket builds an outbound packet with a pushed 20-byte "header" and a
// payload, the way gVisor lays them out (header views before payload).
func testPacket(seq byte, payloadLen int) (*gstack.PacketBuffer, []byte) {
	payload := bytes.Repeat([]byte{seq}, payloadLen)
	pkt := gstack.NewPacketBuffer(gstack.PacketBufferOptions{
		ReserveHeaderBytes: 64,
		Payload:            buffer.MakeWithData(payload),
	})
	hdr := pkt.NetworkHeader().Push(20)
	for i := range hdr {
		hdr[i] = 0x45 + byte(i) + seq
	}
	want := append(append([]byte(nil), hdr...), payload...)
	return pkt, want
}

func writeOne(e *linkEndpoint, pkt *gstack.PacketBuffer) (int, tcpip.Error) {
	var l gstack.PacketBufferList
	l.PushBack(pkt)
	n, err := e.WritePackets(l)
	pkt.DecRef()
	return n, err
}

// recorder is an Output that records packets and can be held shut.
type recorder struct {
	mu       sync.Mutex
	pkts     [][]byte
	batches  []int
	inside   atomic.Int32
	overlap  atomic.Bool
	gate     chan struct{} // nil: open; else Output waits for a receive
	gateOnce sync.Once
	badOff   atomic.Bool
}

// open lets every Output call through from now on.
func (r *recorder) open() {
	if r.gate != nil {
		r.gateOnce.Do(func() { close(r.gate) })
	}
}

func (r *recorder) output(bufs [][]byte, off int) error {
	if r.inside.Add(1) > 1 {
		r.overlap.Store(true)
	}
	defer r.inside.Add(-1)
	if off != Headroom {
		r.badOff.Store(true)
	}
	if r.gate != nil {
		<-r.gate
	}
	r.mu.Lock()
	for _, b := range bufs {
		r.pkts = append(r.pkts, append([]byte(nil), b[off:]...))
	}
	r.batches = append(r.batches, len(bufs))
	r.mu.Unlock()
	return nil
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pkts)
}

func newTestLink(t *testing.T, r *recorder, queueLen int, timeout time.Duration) (*linkEndpoint, *linkCounters) {
	t.Helper()
	cfg := Config{MTU: 1500, Output: r.output, OutQueueLen: queueLen, OutBlockTimeout: timeout}.withDefaults()
	cfg.Logger = testLogger()
	c := &linkCounters{}
	e := newLinkEndpoint(&cfg, c)
	t.Cleanup(func() {
		r.open() // let a blocked Output finish
		e.Close()
		e.Wait()
	})
	return e, c
}

func TestLinkBytesOrderAndBatches(t *testing.T) {
	r := &recorder{}
	e, c := newTestLink(t, r, 256, time.Second)
	const n = 1000
	var wants [][]byte
	for i := range n {
		pkt, want := testPacket(byte(i), 1+i%1400)
		wants = append(wants, want)
		if k, err := writeOne(e, pkt); k != 1 || err != nil {
			t.Fatalf("WritePackets = %d, %v", k, err)
		}
	}
	if !waitFor(10*time.Second, func() bool { return r.count() == n }) {
		t.Fatalf("got %d packets, want %d", r.count(), n)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, p := range r.pkts {
		if !bytes.Equal(p, wants[i]) {
			t.Fatalf("packet %d differs: got %d bytes, want %d", i, len(p), len(wants[i]))
		}
	}
	for _, b := range r.batches {
		if b < 1 || b > MaxBatch {
			t.Fatalf("batch of %d packets", b)
		}
	}
	if r.overlap.Load() || r.badOff.Load() {
		t.Error("Output called concurrently or with the wrong offset")
	}
	if c.packetsOut.Load() != n || c.queueDrops.Load() != 0 {
		t.Errorf("packetsOut=%d drops=%d", c.packetsOut.Load(), c.queueDrops.Load())
	}
}

func TestLinkBackpressure(t *testing.T) {
	r := &recorder{gate: make(chan struct{})}
	e, c := newTestLink(t, r, 4, 5*time.Second)
	for i := range 4 {
		pkt, _ := testPacket(byte(i), 100)
		if k, err := writeOne(e, pkt); k != 1 || err != nil {
			t.Fatalf("write %d = %d, %v", i, k, err)
		}
	}
	// The queue is full (one batch is stuck in Output): the next write
	// must block, not drop.
	done := make(chan error, 1)
	go func() {
		pkt, _ := testPacket(9, 100)
		_, err := writeOne(e, pkt)
		if err != nil {
			done <- errors.New(err.String())
			return
		}
		done <- nil
	}()
	select {
	case err := <-done:
		t.Fatalf("write on a full queue returned early: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if c.queueBlocks.Load() != 1 {
		t.Errorf("queueBlocks = %d, want 1", c.queueBlocks.Load())
	}
	// Let Output run: the blocked write completes without a drop.
	r.open()
	if err := <-done; err != nil {
		t.Fatalf("blocked write: %v", err)
	}
	if !waitFor(10*time.Second, func() bool { return r.count() == 5 }) {
		t.Fatalf("got %d packets, want 5", r.count())
	}
	if c.queueDrops.Load() != 0 {
		t.Errorf("queueDrops = %d, want 0", c.queueDrops.Load())
	}
}

func TestLinkStuckOutputDrops(t *testing.T) {
	r := &recorder{gate: make(chan struct{})}
	const timeout = 50 * time.Millisecond
	e, c := newTestLink(t, r, 2, timeout)
	for i := range 2 {
		pkt, _ := testPacket(byte(i), 100)
		writeOne(e, pkt)
	}
	start := time.Now()
	pkt, _ := testPacket(2, 100)
	if k, err := writeOne(e, pkt); k != 0 || err == nil {
		t.Fatalf("write on stuck queue = %d, %v; want drop", k, err)
	}
	if d := time.Since(start); d < timeout {
		t.Errorf("dropped after %v, want a wait of %v first", d, timeout)
	}
	// Once stuck, further packets drop without waiting again: a write
	// that waits counts a queue block before it starts its timer.
	pkt, _ = testPacket(3, 100)
	writeOne(e, pkt)
	if b := c.queueBlocks.Load(); b != 1 {
		t.Errorf("queueBlocks = %d after the second drop, want 1: it waited again", b)
	}
	if c.queueDrops.Load() != 2 {
		t.Errorf("queueDrops = %d, want 2", c.queueDrops.Load())
	}
	// Progress clears the stuck state.
	r.gate <- struct{}{} // first batch
	r.open()
	if !waitFor(10*time.Second, func() bool { return e.queued() == 0 }) {
		t.Fatal("queue did not drain")
	}
	pkt, _ = testPacket(4, 100)
	if k, err := writeOne(e, pkt); k != 1 || err != nil {
		t.Fatalf("write after recovery = %d, %v", k, err)
	}
}

func TestLinkClosedDrops(t *testing.T) {
	r := &recorder{}
	e, _ := newTestLink(t, r, 8, time.Second)
	e.Close()
	e.Wait()
	pkt, _ := testPacket(1, 10)
	if _, err := writeOne(e, pkt); err == nil {
		t.Fatal("write after Close succeeded")
	} else if _, ok := err.(*tcpip.ErrClosedForSend); !ok {
		t.Fatalf("write after Close = %v, want ErrClosedForSend", err)
	}
}

// TestLinkWriteAllocs checks the outbound path does not allocate per packet
// once buffers are recycled.
func TestLinkWriteAllocs(t *testing.T) {
	cfg := Config{MTU: 1500, OutQueueLen: 64, Output: func([][]byte, int) error { return nil }}.withDefaults()
	cfg.Logger = testLogger()
	e := newLinkEndpoint(&cfg, &linkCounters{})
	defer func() { e.Close(); e.Wait() }()
	pkt, _ := testPacket(1, 1400)
	defer pkt.DecRef()
	var l gstack.PacketBufferList
	l.PushBack(pkt)
	for range 1000 { // warm up the free list
		e.WritePackets(l)
	}
	allocs := testing.AllocsPerRun(2000, func() { e.WritePackets(l) })
	if allocs > 0.05 {
		t.Errorf("%.2f allocations per packet, want ~0", allocs)
	}
}

func BenchmarkLinkWrite(b *testing.B) {
	cfg := Config{MTU: 1500, Output: func([][]byte, int) error { return nil }}.withDefaults()
	cfg.Logger = testLogger()
	e := newLinkEndpoint(&cfg, &linkCounters{})
	defer func() { e.Close(); e.Wait() }()
	pkt, _ := testPacket(1, 1400)
	defer pkt.DecRef()
	var l gstack.PacketBufferList
	l.PushBack(pkt)
	b.SetBytes(int64(pkt.Size()))
	b.ReportAllocs()
	for b.Loop() {
		e.WritePackets(l)
	}
}
