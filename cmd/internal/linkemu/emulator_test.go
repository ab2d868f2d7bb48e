package linkemu

// Tests of the packet path (reader, ring, writer, counters) over in-memory
// devices, in real time: packets arrive intact, in order, at the configured
// delay and rate; drops are counted; Stop closes both devices.

import (
	"bytes"
	"encoding/binary"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// memDevice is an in-memory TUN: the test pushes packets that Read returns
// ("sent by the kernel") and Write records what is delivered.
type memDevice struct {
	in        chan []byte
	closed    chan struct{}
	closeOnce sync.Once
	batch     int
	discard   bool          // count deliveries without keeping them
	count     atomic.Uint64 // deliveries when discarding

	mu      sync.Mutex
	written []delivery
}

type delivery struct {
	at  time.Time
	pkt []byte
}

func newMemDevice(batch int) *memDevice {
	return &memDevice{in: make(chan []byte, 4096), closed: make(chan struct{}), batch: batch}
}

func (d *memDevice) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	select {
	case p := <-d.in:
		sizes[0] = copy(bufs[0][offset:], p)
	case <-d.closed:
		return 0, os.ErrClosed
	}
	n := 1
	for n < len(bufs) {
		select {
		case p := <-d.in:
			sizes[n] = copy(bufs[n][offset:], p)
			n++
		default:
			return n, nil
		}
	}
	return n, nil
}

func (d *memDevice) Write(bufs [][]byte, offset int) (int, error) {
	select {
	case <-d.closed:
		return 0, os.ErrClosed
	default:
	}
	if d.discard {
		d.count.Add(uint64(len(bufs)))
		return 0, nil
	}
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	total := 0
	for _, b := range bufs {
		d.written = append(d.written, delivery{now, bytes.Clone(b[offset:])})
		total += len(b) - offset
	}
	return total, nil
}

func (d *memDevice) BatchSize() int { return d.batch }

func (d *memDevice) Close() error {
	d.closeOnce.Do(func() { close(d.closed) })
	return nil
}

func (d *memDevice) deliveries() []delivery {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]delivery(nil), d.written...)
}

// waitFor polls until n packets were delivered or the timeout passes.
func (d *memDevice) waitFor(t *testing.T, n int, timeout time.Duration) []delivery {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := d.deliveries()
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(time.Millisecond)
	}
}

func packet(seq, size int) []byte {
	p := make([]byte, size)
	binary.BigEndian.PutUint32(p, uint32(seq))
	for i := 4; i < size; i++ {
		p[i] = byte(seq + i)
	}
	return p
}

func memLink(t *testing.T, opts Options) (*Emulator, *memDevice, *memDevice) {
	t.Helper()
	e, a, b := idleMemLink(t, opts)
	e.Start()
	return e, a, b
}

// idleMemLink is memLink with the emulator not yet started, for a test
// that installs a trace or queues packets first.
func idleMemLink(t *testing.T, opts Options) (*Emulator, *memDevice, *memDevice) {
	t.Helper()
	a, b := newMemDevice(8), newMemDevice(8)
	opts.DevA, opts.DevB = "a", "b"
	if err := opts.Validate(); err != nil {
		t.Fatal(err)
	}
	e := newEmulator(opts, a, b)
	t.Cleanup(func() { e.Stop() })
	return e, a, b
}

// seqStamp is a trace's stamp of packet's packets: the sequence number.
func seqStamp(pkt []byte) (time.Duration, bool) {
	if len(pkt) < 4 {
		return 0, false
	}
	return time.Duration(binary.BigEndian.Uint32(pkt)), true
}

// hangGuard bounds the wait for deliveries. How late a packet leaves the
// in-memory emulator is the machine's (its wake-ups on a loaded 2-core
// machine under the race detector lag by seconds), so the tests check
// each delivery against the time the emulator judged it due, traced:
// never early, and due exactly when the model says.
const hangGuard = 15 * time.Second

// checkDue checks d left no earlier than the emulator judged it due.
func checkDue(t *testing.T, e *Emulator, i int, d delivery, j judged) {
	t.Helper()
	if left := d.at.Sub(e.start); left < j.at {
		t.Errorf("packet %d left at %v, before it was due at %v", i, left, j.at)
	}
}

// warmUp sends one 10-byte packet each way (counted) and forgets it: the
// start-up allocations trigger a few GC cycles, which on a loaded machine can
// hold the first packets for milliseconds; the tests measure the steady state.
func warmUp(t *testing.T, a, b *memDevice) {
	t.Helper()
	for _, d := range []struct{ from, to *memDevice }{{a, b}, {b, a}} {
		d.from.in <- packet(999, 10)
		if w := d.to.waitFor(t, 1, hangGuard); len(w) != 1 {
			t.Fatal("warm-up packet lost")
		}
		d.to.mu.Lock()
		d.to.written = nil
		d.to.mu.Unlock()
	}
}

func TestPathDeliversIntactInOrderAfterDelay(t *testing.T) {
	const delay = 20 * time.Millisecond
	e, a, b := idleMemLink(t, Options{Fwd: Dir{Delay: delay}, Ret: Dir{Delay: 2 * delay}})
	tr := &verdictTrace{stamp: seqStamp}
	tr.on(e)
	e.Start()
	warmUp(t, a, b)
	sent := make([]time.Duration, 50)
	for i := range sent {
		sent[i] = e.Elapsed()
		a.in <- packet(i, 100+i*20)
		time.Sleep(200 * time.Microsecond)
	}
	got := b.waitFor(t, len(sent), hangGuard)
	if len(got) != len(sent) {
		t.Fatalf("delivered %d of %d", len(got), len(sent))
	}
	ours, _ := tr.snapshot()
	ours = ours[1:] // past the warm-up
	for i, d := range got {
		if !bytes.Equal(d.pkt, packet(i, 100+i*20)) {
			t.Fatalf("packet %d corrupted or out of order", i)
		}
		j := ours[i]
		if j.stamp != time.Duration(i) || j.v != deliver || j.read < sent[i] || j.at != j.read+delay {
			t.Errorf("packet %d sent at %v: read at %v, %s at %v; want delivered at read+%v", i, sent[i], j.read, j.v, j.at, delay)
		}
		checkDue(t, e, i, d, j)
	}
	if c := e.Counters().Fwd; c.Packets != uint64(len(sent))+1 { // + the warm-up
		t.Errorf("counted %d delivered packets", c.Packets)
	}
	// The return direction has its own delay.
	start := time.Now()
	b.in <- packet(7, 60)
	back := a.waitFor(t, 1, hangGuard)
	if len(back) != 1 || back[0].at.Sub(start) < 2*delay {
		t.Fatalf("return packet: %v", back)
	}
}

// TestPathReorders checks held-back packets are overtaken and delivered
// intact: every packet arrives once, some after packets sent later, none
// early.
func TestPathReorders(t *testing.T) {
	const delay, extra = 5 * time.Millisecond, 20 * time.Millisecond
	e, a, b := idleMemLink(t, Options{Fwd: Dir{Delay: delay, Reorder: Reorder{P: 0.2, Delay: extra}}, Seed: 5})
	tr := &verdictTrace{stamp: seqStamp}
	tr.on(e)
	// All queued before the start and read in one batch: held-back
	// packets are overtaken however slowly a loaded machine runs this
	// test (sent 0.5 ms apart, a sender late by 20 ms each time would
	// leave none overtaken).
	const n = 200
	a.batch = n
	for i := range n {
		a.in <- packet(i, 100)
	}
	e.Start()
	got := b.waitFor(t, n, hangGuard)
	if len(got) != n {
		t.Fatalf("delivered %d of %d", len(got), n)
	}
	ours, _ := tr.snapshot()
	if len(ours) != n {
		t.Fatalf("traced %d of %d", len(ours), n)
	}
	seen := make([]bool, n)
	overtaken, latest := 0, -1
	for i, d := range got {
		seq := int(binary.BigEndian.Uint32(d.pkt))
		if seq >= n || seen[seq] || !bytes.Equal(d.pkt, packet(seq, 100)) {
			t.Fatalf("delivery %d: packet %d corrupted or twice", i, seq)
		}
		seen[seq] = true
		if seq < latest {
			overtaken++ // a later packet left before it
		}
		latest = max(latest, seq)
		j := ours[seq]
		want := j.read + delay
		if j.v == deliverLate {
			want += extra
		}
		if j.stamp != time.Duration(seq) || (j.v != deliver && j.v != deliverLate) || j.at != want {
			t.Errorf("packet %d read at %v: %s at %v, want due at %v", seq, j.read, j.v, j.at, want)
		}
		checkDue(t, e, seq, d, j)
	}
	c := e.Counters().Fwd
	t.Logf("%d reordered, %d arrived after a later one", c.Reordered, overtaken)
	if c.Reordered == 0 || overtaken == 0 || c.Packets != n {
		t.Errorf("reordered %d, overtaken %d, delivered %d of %d", c.Reordered, overtaken, c.Packets, n)
	}
}

func TestPathPacesAtRate(t *testing.T) {
	// 8 Mbit/s with 1000-byte packets: one per millisecond.
	e, a, b := idleMemLink(t, Options{Fwd: Dir{Rate: 8_000_000, Queue: 1 << 20}})
	tr := &verdictTrace{stamp: seqStamp}
	tr.on(e)
	e.Start()
	warmUp(t, a, b)
	const n = 400
	for i := range n {
		a.in <- packet(i, 1000)
	}
	got := b.waitFor(t, n, hangGuard)
	if len(got) != n {
		t.Fatalf("delivered %d of %d", len(got), n)
	}
	// Each packet is due when its serialization ends: a millisecond
	// after it was read or after the one before was due, whichever is
	// later (the warm-up's 10 bytes take 10 us), by the emulator's clock
	// however late the machine ran it. A rate half as fast would make
	// every one 2 ms.
	ours, _ := tr.snapshot()
	if len(ours) != n+1 {
		t.Fatalf("traced %d packets, want %d and the warm-up", len(ours), n)
	}
	var prev time.Duration
	for k, j := range ours {
		tx := time.Millisecond
		if k == 0 {
			tx = 10 * time.Microsecond
		}
		if want := max(j.read, prev) + tx; j.v != deliver || j.at != want {
			t.Fatalf("packet %d read at %v: %s at %v, want due at %v", j.stamp, j.read, j.v, j.at, want)
		}
		prev = j.at
	}
	for i, d := range got {
		if !bytes.Equal(d.pkt, packet(i, 1000)) {
			t.Fatalf("packet %d corrupted or out of order", i)
		}
		checkDue(t, e, i, d, ours[i+1])
	}
	c := e.Counters().Fwd
	if c.InPackets != n+1 || c.Packets != n+1 || c.Bytes != n*1000+10 || c.InBytes != n*1000+10 { // + the warm-up
		t.Fatalf("counters %+v", c)
	}
}

func TestPathCountsDrops(t *testing.T) {
	e, a, b := idleMemLink(t, Options{
		Fwd:  Dir{Rate: 100_000, Queue: 10_000, Loss: 0.5},
		Seed: 11,
	})
	// 100 KB at once into a 10 KB queue, queued before the start and read
	// in one batch, at one instant: exactly 10 fit however late a loaded
	// machine runs the reader (read 8 at a time, a reader late by a
	// packet's 80 ms between two batches would let an 11th in).
	a.batch = 100
	for i := range 100 {
		a.in <- packet(i, 1000)
	}
	e.Start()
	// The 10 queued packets drain in 800 ms.
	c := e.Counters().Fwd
	for deadline := time.Now().Add(hangGuard); c.InPackets < 100 || c.DropLoss+c.Packets < 10; c = e.Counters().Fwd {
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if c.InPackets != 100 {
		t.Fatalf("read %d packets", c.InPackets)
	}
	if c.DropQueue != 90 {
		t.Errorf("queue drops %d, want 90", c.DropQueue)
	}
	if c.DropLoss+c.Packets != 10 || c.DropLoss == 0 || c.Packets == 0 {
		t.Errorf("of the 10 queued: %d lost, %d delivered", c.DropLoss, c.Packets)
	}
	if got := len(b.deliveries()); uint64(got) != c.Packets {
		t.Errorf("device saw %d, counters say %d", got, c.Packets)
	}
}

func TestStopClosesDevicesAndIsIdempotent(t *testing.T) {
	a, b := newMemDevice(4), newMemDevice(4)
	e := newEmulator(Options{DevA: "a", DevB: "b", Fwd: Dir{Delay: time.Hour}}, a, b)
	e.Start()
	a.in <- packet(1, 100) // stays queued: Stop must not wait for it
	for deadline := time.Now().Add(hangGuard); e.Counters().Fwd.InPackets == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	done := make(chan struct{})
	go func() {
		e.Stop()
		e.Stop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(hangGuard):
		t.Fatal("Stop hung")
	}
	for _, d := range []*memDevice{a, b} {
		select {
		case <-d.closed:
		default:
			t.Fatal("device left open")
		}
	}
	if c, _ := e.Stop(); c.Fwd.InPackets != 1 || c.Fwd.Packets != 0 {
		t.Fatalf("final counters %+v", c.Fwd)
	}
}

func TestSteadyStateAllocatesNothing(t *testing.T) {
	e, a, b := memLink(t, Options{Fwd: Dir{Delay: time.Millisecond, Loss: 0.01}})
	b.discard = true
	pkts := make([][]byte, 64)
	for i := range pkts {
		pkts[i] = packet(i, 1200)
	}
	// Bursts of packets, each delivered before the next: the number in
	// flight is bounded, as on a link in steady state.
	push := func(n, burst int) {
		for sent := 0; sent < n; sent += burst {
			want := b.count.Load() + uint64(burst) - uint64(burst)/20 // allow for the 1% loss
			for i := range burst {
				a.in <- pkts[i%len(pkts)]
			}
			for deadline := time.Now().Add(5 * time.Second); b.count.Load() < want && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
		}
	}
	// The ring grows with the packets in flight, which depends on how
	// promptly the reader and the writer run: a loaded machine or the race
	// detector can leave it a doubling short after any warm-up, and the
	// round that grows it allocates a buffer per new slot. So: warm up,
	// then measure rounds and judge the quietest. An allocation per packet
	// (or per batch) shows in every round.
	push(3000, 1000)
	const rounds, n = 4, 5000
	var fewest uint64
	for r := range rounds {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		push(n, 500)
		runtime.ReadMemStats(&after)
		allocs := after.Mallocs - before.Mallocs
		t.Logf("round %d: %d allocations for %d packets", r, allocs, n)
		if r == 0 || allocs < fewest {
			fewest = allocs
		}
	}
	t.Logf("counters %+v", e.Counters().Fwd)
	// Timers, the test's own polling and the runtime allocate a little.
	if fewest > n/100 {
		t.Errorf("at least %d allocations for %d packets in each of %d rounds: the packet path allocates", fewest, n, rounds)
	}
}
