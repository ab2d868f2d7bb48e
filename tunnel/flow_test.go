package tunnel

import (
	"bytes"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// countingPool is a bufPool that knows how many of its buffers are out.
type countingPool struct {
	mu   sync.Mutex
	out  int
	size int
}

func (p *countingPool) Get() any {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.out++
	b := make([]byte, p.size)
	return &b
}

func (p *countingPool) Put(any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.out--
}

func (p *countingPool) held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out
}

// TestCopyDataIdleHoldsNoPoolBuffer: a flow direction waiting for data
// holds no large buffer, takes one when data streams, gives it back once
// the source drains, and copies every byte in order.
func TestCopyDataIdleHoldsNoPoolBuffer(t *testing.T) {
	pool := &countingPool{size: largeCopyBuf}
	pr, pw := io.Pipe()
	var dst syncBuffer
	done := make(chan error, 1)
	go func() { done <- copyData(pool, &dst, pr) }()

	var sent bytes.Buffer
	send := func(p []byte) {
		t.Helper()
		sent.Write(p)
		if _, err := pw.Write(p); err != nil {
			t.Fatal(err)
		}
		// io.Pipe's Write returns once the reader took every byte; wait
		// for copyData to pass them on.
		deadline := time.Now().Add(10 * time.Second)
		for len(dst.String()) < sent.Len() {
			if time.Now().After(deadline) {
				t.Fatalf("copied %d of %d bytes", len(dst.String()), sent.Len())
			}
			time.Sleep(time.Millisecond)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	chunk := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}

	send(chunk(100)) // a trickle: the small buffer is enough
	if n := pool.held(); n != 0 {
		t.Fatalf("after a small write, %d pool buffers held", n)
	}
	send(chunk(1 << 20)) // a burst: reads fill the small buffer, then the large one
	send(chunk(10))      // a read that leaves the large buffer nearly empty
	if n := pool.held(); n != 0 {
		t.Fatalf("waiting again after a burst, %d pool buffers held", n)
	}
	pw.Close()
	if err := <-done; err != nil {
		t.Fatalf("copyData: %v", err)
	}
	if !bytes.Equal([]byte(dst.String()), sent.Bytes()) {
		t.Fatal("the copy differs from what was sent")
	}
	if n := pool.held(); n != 0 {
		t.Fatalf("after the end, %d pool buffers held", n)
	}
}

// TestCopyDataPassesErrors: a read error other than EOF, and a write
// error, end the copy with that error and return the buffer.
func TestCopyDataPassesErrors(t *testing.T) {
	pool := &countingPool{size: largeCopyBuf}
	pr, pw := io.Pipe()
	go func() {
		pw.Write(make([]byte, 1<<20))
		pw.CloseWithError(io.ErrUnexpectedEOF)
	}()
	if err := copyData(pool, io.Discard, pr); err != io.ErrUnexpectedEOF {
		t.Errorf("read error: got %v", err)
	}
	pr2, pw2 := io.Pipe()
	go pw2.Write(make([]byte, 1<<20))
	if err := copyData(pool, failWriter{}, pr2); err != io.ErrClosedPipe {
		t.Errorf("write error: got %v", err)
	}
	pr2.Close()
	if n := pool.held(); n != 0 {
		t.Errorf("%d pool buffers held after errors", n)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }
