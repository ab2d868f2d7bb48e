//go:build linux

// This file owns the root-only test over a real TUN: a fresh network
// namespace of our own, a wireguard tun.Device with a subnet routed into it,
// a tiny reader/writer loop between the device and the Stack, and a kernel
// TCP client that must be accepted by the Stack. The matching benchmark
// measures a kernel-client -> Stack bulk transfer through the TUN.
//
// The namespace is anonymous: one OS thread unshares it and never returns to
// the Go scheduler, so the namespace dies with that thread and the TUN fd,
// whatever the test outcome; nothing is left in the host's namespaces.

package stack

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/tun"
)

const tunName = "scpsst0"

var (
	tunAddr4   = netip.MustParsePrefix("10.77.0.1/24")
	tunRoute4  = netip.MustParsePrefix("10.78.0.0/24")
	tunServer4 = netip.MustParseAddrPort("10.78.0.5:80")
	tunAddr6   = netip.MustParsePrefix("fd77::1/64")
	tunRoute6  = netip.MustParsePrefix("fd78::/64")
	tunServer6 = netip.MustParseAddrPort("[fd78::5]:80")
)

// requireRoot skips unless root; under CI=true the test must not skip.
func requireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		tb.Fatal("CI=true: the TUN test needs root and must not be skipped")
	}
	tb.Skip("needs root (network namespace and TUN device)")
}

// nsThread runs functions on one OS thread inside a fresh network namespace.
type nsThread struct {
	fns  chan func()
	done chan struct{}
}

func newNSThread(tb testing.TB) *nsThread {
	tb.Helper()
	w := &nsThread{fns: make(chan func()), done: make(chan struct{})}
	errc := make(chan error, 1)
	go func() {
		defer close(w.done)
		// The thread goes back to the process's namespace before it is
		// unlocked. Left locked in the new one, it would end with this
		// goroutine, unless it is the process's main thread, which Go
		// never ends but parks: the namespace and its TUN would live on,
		// and /proc/self/net (the main thread's) would show them to every
		// later test (as tunnel's TestSendNowOnLinkARP once did).
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("the process's namespace: %w", err)
			return
		}
		defer unix.Close(orig)
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare(CLONE_NEWNET): %w", err)
			return
		}
		defer func() {
			if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
				runtime.UnlockOSThread()
			} // else it stays locked: the thread ends with the goroutine
		}()
		errc <- nil
		for fn := range w.fns {
			fn()
		}
	}()
	if err := <-errc; err != nil {
		tb.Fatal(err)
	}
	return w
}

// run executes fn in the namespace and returns its error.
func (w *nsThread) run(fn func() error) error {
	errc := make(chan error, 1)
	w.fns <- func() { errc <- fn() }
	return <-errc
}

func (w *nsThread) close() {
	close(w.fns)
	<-w.done
}

// tunHarness is a Stack attached to a real TUN inside a namespace.
type tunHarness struct {
	ns     *nsThread
	dev    tun.Device
	stack  *Stack
	accept chan accepted
	loopWG sync.WaitGroup
}

// newTUNHarness attaches a Stack to a new TUN. With gsoMax > 0 the stack
// sends segments of up to gsoMax bytes, written with their virtio-net
// headers straight to the TUN (as the tunnel does), for the kernel to cut.
func newTUNHarness(tb testing.TB, mtu, gsoMax int) *tunHarness {
	tb.Helper()
	requireRoot(tb)
	h := &tunHarness{ns: newNSThread(tb)}
	ok := false
	defer func() {
		if !ok {
			h.close()
		}
	}()
	err := h.ns.run(func() error {
		nl, err := netlink.NewHandle()
		if err != nil {
			return fmt.Errorf("netlink handle: %w", err)
		}
		defer nl.Close()
		lo, err := nl.LinkByName("lo")
		if err != nil {
			return fmt.Errorf("lo: %w", err)
		}
		if err := nl.LinkSetUp(lo); err != nil {
			return fmt.Errorf("lo up: %w", err)
		}
		h.dev, err = tun.CreateTUN(tunName, mtu)
		if err != nil {
			return fmt.Errorf("CreateTUN: %w", err)
		}
		link, err := nl.LinkByName(tunName)
		if err != nil {
			return fmt.Errorf("link %s: %w", tunName, err)
		}
		for _, a := range []netip.Prefix{tunAddr4, tunAddr6} {
			addr := &netlink.Addr{IPNet: prefixNet(a), Flags: unix.IFA_F_NODAD}
			if err := nl.AddrAdd(link, addr); err != nil {
				return fmt.Errorf("addr %v: %w", a, err)
			}
		}
		if err := nl.LinkSetUp(link); err != nil {
			return fmt.Errorf("link up: %w", err)
		}
		for _, r := range []netip.Prefix{tunRoute4, tunRoute6} {
			if err := nl.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: prefixNet(r)}); err != nil {
				return fmt.Errorf("route %v: %w", r, err)
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}

	handle, acc := acceptAll()
	h.accept = acc
	cfg := Config{
		MTU:              mtu,
		HandleTCP:        handle,
		Logger:           testLogger(),
		TrustRXChecksums: true, // every packet comes from the local kernel
		Output: func(bufs [][]byte, offset int) error {
			_, err := h.dev.Write(bufs, offset)
			return err
		},
		GSOMaxSize: gsoMax,
	}
	if gsoMax > 0 {
		f := h.dev.(*tun.NativeTun).File()
		cfg.Output = func(bufs [][]byte, offset int) error {
			for _, b := range bufs {
				if _, err := f.Write(b[offset-VirtioNetHdrLen:]); err != nil {
					return err
				}
			}
			return nil
		}
	}
	h.stack, err = New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	h.loopWG.Add(1)
	go h.readLoop()
	ok = true
	tb.Cleanup(h.close)
	return h
}

// readLoop moves packet batches from the TUN into the Stack.
func (h *tunHarness) readLoop() {
	defer h.loopWG.Done()
	n := h.dev.BatchSize()
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, Headroom+65535)
	}
	sizes := make([]int, n)
	pkts := make([][]byte, 0, n)
	for {
		k, err := h.dev.Read(bufs, sizes, Headroom)
		pkts = pkts[:0]
		for i := range k {
			pkts = append(pkts, bufs[i][Headroom:Headroom+sizes[i]])
		}
		h.stack.InjectBatch(pkts)
		if err != nil {
			if errors.Is(err, tun.ErrTooManySegments) {
				continue
			}
			return
		}
	}
}

func (h *tunHarness) close() {
	if h.stack != nil {
		h.stack.Close()
	}
	if h.dev != nil {
		h.dev.Close()
	}
	h.loopWG.Wait()
	h.ns.close()
}

// dial connects a kernel TCP socket from inside the namespace.
func (h *tunHarness) dial(tb testing.TB, dst netip.AddrPort) net.Conn {
	tb.Helper()
	var c net.Conn
	err := h.ns.run(func() error {
		var err error
		c, err = net.DialTimeout("tcp", dst.String(), 5*time.Second)
		return err
	})
	if err != nil {
		tb.Fatalf("kernel dial %v: %v", dst, err)
	}
	return c
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func TestTUNKernelClient(t *testing.T) {
	h := newTUNHarness(t, 1500, 0)
	testTUNKernelClient(t, h)
}

// TestTUNKernelClientGSO: the same with the stack's large segments, which
// the kernel must cut and checksum from their virtio-net headers: every
// byte arrives, in far fewer packets than MSS-sized ones would take.
func TestTUNKernelClientGSO(t *testing.T) {
	h := newTUNHarness(t, 1500, 32<<10)
	testTUNKernelClient(t, h)
	// 8 MiB toward the kernel alone is 5,746 packets of 1,460 bytes.
	if st := h.stack.Stats(); st.PacketsOut >= 5746 {
		t.Errorf("%d packets out for 8 MiB each way over IPv4 and IPv6: no large segments", st.PacketsOut)
	}
}

func testTUNKernelClient(t *testing.T, h *tunHarness) {
	for _, dst := range []netip.AddrPort{tunServer4, tunServer6} {
		t.Run(fmt.Sprintf("IPv%d", map[bool]int{true: 4, false: 6}[dst.Addr().Is4()]), func(t *testing.T) {
			kc := h.dial(t, dst)
			defer kc.Close()
			a := recvAccepted(t, h.accept)
			defer a.conn.Close()
			local := netip.MustParseAddrPort(kc.LocalAddr().String())
			if a.req.Src != local || a.req.Dst != dst {
				t.Fatalf("stack saw %v -> %v, kernel client is %v -> %v", a.req.Src, a.req.Dst, local, dst)
			}
			// Bytes both ways through the real TUN (GSO on read, GRO on write).
			up, down := randBytes(8<<20, 3), randBytes(8<<20, 4)
			go func() {
				io.Copy(kc, bytes.NewReader(up))
				kc.(*net.TCPConn).CloseWrite()
			}()
			go func() {
				io.Copy(a.conn, bytes.NewReader(down))
				a.conn.CloseWrite()
			}()
			// 8 MiB each way takes about 15 s under -race on a loaded 2-core
			// machine; the deadline catches a hang, not a slow run.
			var gotUp [32]byte
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				gotUp = sha256.Sum256(readAllTimeout(t, a.conn))
			}()
			gotDown := sha256.Sum256(readAllTimeout(t, kc))
			wg.Wait()
			if gotUp != sha256.Sum256(up) || gotDown != sha256.Sum256(down) {
				t.Fatal("bytes differ through the TUN")
			}
		})
	}
	st := h.stack.Stats()
	t.Logf("stats: in=%d out=%d batches=%d blocks=%d drops=%d outErr=%d malformed=%d",
		st.PacketsIn, st.PacketsOut, st.OutputBatches, st.QueueBlocks, st.QueueDrops, st.OutputErrors, st.MalformedIn)
	if st.OutputErrors != 0 {
		t.Errorf("%d Output errors", st.OutputErrors)
	}
}

// BenchmarkTUNKernelToStack measures a bulk transfer from a kernel TCP
// client through the TUN into the Stack (the upload direction of a site).
// Run it alone: go test -run XXX -bench TUNKernelToStack -benchtime 1x
// (1 GB per iteration; STACK_TUN_BENCH_MB overrides the size;
// STACK_TUN_BENCH_GSO=1 lets the stack send large segments).
func BenchmarkTUNKernelToStack(b *testing.B) {
	benchTUN(b, true)
}

// BenchmarkTUNStackToKernel measures the reverse: Stack -> TUN -> kernel.
func BenchmarkTUNStackToKernel(b *testing.B) {
	benchTUN(b, false)
}

func benchTUN(b *testing.B, upload bool) {
	size := int64(1 << 30)
	if v := os.Getenv("STACK_TUN_BENCH_MB"); v != "" {
		var mb int64
		fmt.Sscan(v, &mb)
		size = mb << 20
	}
	gsoMax := 0
	if os.Getenv("STACK_TUN_BENCH_GSO") != "" {
		gsoMax = 32 << 10
	}
	h := newTUNHarness(b, 1500, gsoMax)
	chunk := make([]byte, 256<<10)
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		kc := h.dial(b, tunServer4)
		a := recvAccepted(b, h.accept)
		var src io.Writer = kc
		var dst io.Reader = a.conn
		closeSrc := func() { kc.(*net.TCPConn).CloseWrite() }
		if !upload {
			src, dst = a.conn, kc
			closeSrc = func() { a.conn.CloseWrite() }
		}
		var ru0, ru1 unix.Rusage
		unix.Getrusage(unix.RUSAGE_SELF, &ru0)
		start := time.Now()
		go func() {
			for left := size; left > 0; {
				n := min(left, int64(len(chunk)))
				if _, err := src.Write(chunk[:n]); err != nil {
					b.Errorf("write: %v", err)
					return
				}
				left -= n
			}
			closeSrc()
		}()
		got, err := io.Copy(io.Discard, dst)
		elapsed := time.Since(start)
		unix.Getrusage(unix.RUSAGE_SELF, &ru1)
		if err != nil || got != size {
			b.Fatalf("received %d of %d: %v", got, size, err)
		}
		cpu := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) * time.Nanosecond
		gb := float64(size) / 1e9
		b.ReportMetric(float64(size)*8/elapsed.Seconds()/1e9, "Gbit/s")
		b.ReportMetric(cpu.Seconds()/gb, "CPU-s/GB")
		kc.Close()
		a.conn.Close()
	}
	st := h.stack.Stats()
	b.Logf("stats: in=%d out=%d batches=%d blocks=%d drops=%d outErr=%d", st.PacketsIn, st.PacketsOut,
		st.OutputBatches, st.QueueBlocks, st.QueueDrops, st.OutputErrors)
}
