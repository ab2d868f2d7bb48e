package tunneltest

import (
	"os"
	"sync"
)

// TUNBatch is the most packets one TUN.Read returns.
const TUNBatch = 8

// tunQueue is how many injected packets wait for the endpoint to read
// them before Inject blocks.
const tunQueue = 4096

// TUN is a TUN device. Packets the kernel would route into it are given
// to Inject; packets the endpoint writes go to the deliver function (a
// copy each).
type TUN struct {
	in      chan []byte
	deliver func(pkt []byte)
	closed  chan struct{}
	once    sync.Once
}

// NewTUN returns a TUN that hands each packet the endpoint writes to
// deliver, which may keep it.
func NewTUN(deliver func(pkt []byte)) *TUN {
	return &TUN{in: make(chan []byte, tunQueue), deliver: deliver, closed: make(chan struct{})}
}

// Inject queues a copy of pkt for the endpoint to read, as the kernel
// routing it into the TUN; it waits while the queue is full, and returns
// false once the TUN is closed.
func (t *TUN) Inject(pkt []byte) bool {
	if t.Closed() {
		return false // the select below may pick a free queue slot over closed
	}
	select {
	case t.in <- append([]byte(nil), pkt...):
		return true
	case <-t.closed:
		return false
	}
}

// Read waits for a packet, then returns it with whatever else is queued,
// up to len(bufs); after Close it returns os.ErrClosed.
func (t *TUN) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	n := 0
	put := func(p []byte) {
		sizes[n] = copy(bufs[n][offset:], p)
		n++
	}
	select {
	case p := <-t.in:
		put(p)
	case <-t.closed:
		return 0, os.ErrClosed
	}
	for n < len(bufs) {
		select {
		case p := <-t.in:
			put(p)
		default:
			return n, nil
		}
	}
	return n, nil
}

// Write delivers a copy of each bufs[i][offset:].
func (t *TUN) Write(bufs [][]byte, offset int) (int, error) {
	if t.Closed() {
		return 0, os.ErrClosed
	}
	for _, b := range bufs {
		t.deliver(append([]byte(nil), b[offset:]...))
	}
	return len(bufs), nil
}

// Closed reports whether Close was called.
func (t *TUN) Closed() bool { return isDone(t.closed) }

// BatchSize is TUNBatch.
func (t *TUN) BatchSize() int { return TUNBatch }

// Close ends pending and later reads; it may be called more than once.
func (t *TUN) Close() error {
	t.once.Do(func() { close(t.closed) })
	return nil
}
