// This file owns the in-memory test network: two Stacks back to back, each
// one's Output feeding the other's Inject through a goroutine, with optional
// packet filters for fault injection.

package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

var (
	client4 = netip.MustParseAddrPort("10.1.0.7:5555")
	server4 = netip.MustParseAddrPort("10.2.0.5:80")
	client6 = netip.MustParseAddrPort("[fd00:1::7]:5555")
	server6 = netip.MustParseAddrPort("[fd00:2::5]:80")
)

var errStopped = errors.New("test pipe stopped")

// traceStderr prints every packet crossing the test network (debugging aid).
var traceStderr = os.Getenv("STACK_TEST_TRACE") != ""

func tracePacket(p []byte) {
	src, dst, flags, ok := parseTCP(p)
	if !ok {
		fmt.Fprintf(os.Stderr, "pkt %d bytes (not TCP)\n", len(p))
		return
	}
	var payload []byte
	if header.IPVersion(p) == 4 {
		payload = header.IPv4(p).Payload()
	} else {
		payload = header.IPv6(p).Payload()
	}
	tcp := header.TCP(payload)
	fmt.Fprintf(os.Stderr, "%s %v > %v %v seq=%d ack=%d win=%d len=%d\n", time.Now().Format("15:04:05.000000"),
		src, dst, flags, tcp.SequenceNumber(), tcp.AckNumber(), tcp.WindowSize(), len(tcp.Payload()))
}

func testLogger() *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("STACK_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// pipe carries one direction of the test network.
type pipe struct {
	ch   chan []byte
	drop atomic.Pointer[func(pkt []byte) bool]
	sent atomic.Uint64
}

// testNet joins stack a (the "server side", which accepts) and stack b (the
// "client side", which dials from spoofed addresses).
type testNet struct {
	a, b   *Stack
	ab, ba *pipe
	stop   chan struct{}
	wg     sync.WaitGroup
	closed sync.Once
}

// output returns an Output func that copies packets into p.
func (n *testNet) output(p *pipe) func([][]byte, int) error {
	return func(bufs [][]byte, off int) error {
		for _, b := range bufs {
			pkt := append([]byte(nil), b[off:]...)
			if traceStderr {
				tracePacket(pkt)
			}
			if f := p.drop.Load(); f != nil && (*f)(pkt) {
				continue
			}
			select {
			case p.ch <- pkt:
				p.sent.Add(1)
			case <-n.stop:
				return errStopped
			}
		}
		return nil
	}
}

func (n *testNet) deliver(p *pipe, dst *Stack) {
	defer n.wg.Done()
	for {
		select {
		case pkt := <-p.ch:
			dst.Inject(pkt)
		case <-n.stop:
			return
		}
	}
}

// newTestNet builds the pair; cfgA/cfgB may leave MTU, Output and Logger
// unset. Everything is torn down at test cleanup.
func newTestNet(t testing.TB, cfgA, cfgB Config) *testNet {
	t.Helper()
	n := &testNet{
		ab:   &pipe{ch: make(chan []byte, 4096)},
		ba:   &pipe{ch: make(chan []byte, 4096)},
		stop: make(chan struct{}),
	}
	fill := func(c *Config, p *pipe) {
		if c.MTU == 0 {
			c.MTU = 1400
		}
		c.Output = n.output(p)
		if c.Logger == nil {
			c.Logger = testLogger()
		}
	}
	fill(&cfgA, n.ab)
	fill(&cfgB, n.ba)
	var err error
	if n.a, err = New(cfgA); err != nil {
		t.Fatalf("New(a): %v", err)
	}
	if n.b, err = New(cfgB); err != nil {
		n.a.Close()
		t.Fatalf("New(b): %v", err)
	}
	n.wg.Add(2)
	go n.deliver(n.ab, n.b)
	go n.deliver(n.ba, n.a)
	t.Cleanup(n.Close)
	return n
}

// Close closes both stacks, then the pipes.
func (n *testNet) Close() {
	n.closed.Do(func() {
		n.a.Close()
		n.b.Close()
		close(n.stop)
		n.wg.Wait()
	})
}

// accepted is what an accepting HandleTCP reports.
type accepted struct {
	req  *TCPRequest
	conn *Conn
	err  error
}

// acceptAll returns a HandleTCP that accepts every request on its own
// goroutine (as the tunnel does) and reports it on the channel.
func acceptAll() (func(*TCPRequest), chan accepted) {
	ch := make(chan accepted, 4096)
	return func(r *TCPRequest) {
		go func() {
			c, err := r.Accept()
			ch <- accepted{r, c, err}
		}()
	}, ch
}

func recvAccepted(t testing.TB, ch chan accepted) accepted {
	t.Helper()
	select {
	case a := <-ch:
		if a.err != nil {
			t.Fatalf("Accept: %v", a.err)
		}
		return a
	case <-time.After(hangGuard):
		t.Fatalf("no connection accepted within %v", hangGuard)
	}
	return accepted{}
}

func dial(t testing.TB, s *Stack, src, dst netip.AddrPort) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	c, err := s.DialTCP(ctx, src, dst)
	if err != nil {
		t.Fatalf("DialTCP(%v -> %v): %v", src, dst, err)
	}
	return c
}

// hangGuard bounds a wait that only a hang would exceed: long enough for
// a loaded machine under the race detector, not a measure of speed.
const hangGuard = 2 * time.Minute

// readAllTimeout reads r to EOF, or fails the test (t.Errorf, so it may be
// called off the test goroutine) and returns nil after hangGuard.
func readAllTimeout(t testing.TB, r io.Reader) []byte {
	t.Helper()
	type res struct {
		b   []byte
		err error
	}
	ch := make(chan res, 1)
	go func() {
		b, err := io.ReadAll(r)
		ch <- res{b, err}
	}()
	select {
	case x := <-ch:
		if x.err != nil {
			t.Errorf("read: %v", x.err)
		}
		return x.b
	case <-time.After(hangGuard):
		t.Errorf("read did not finish within %v", hangGuard)
	}
	return nil
}

// waitFor polls cond until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// goroutinesSettle waits until the goroutine count is at most base.
func goroutinesSettle(base int, d time.Duration) (int, bool) {
	var n int
	ok := waitFor(d, func() bool {
		runtime.GC()
		n = runtime.NumGoroutine()
		return n <= base
	})
	return n, ok
}
