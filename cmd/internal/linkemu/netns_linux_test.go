package linkemu

// Root-only tests: two network namespaces joined by the emulator, measured
// with real sockets: RTT, rate, loss, outages, the command itself and device
// removal (and a benchmark of unthrottled throughput). They skip without root, except under
// CI=true where a skip would hide a broken set-up, so they fail instead.

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"scpsvpn/cmd/internal/namespace"
	"scpsvpn/cmd/internal/testenv"

	"github.com/urfave/cli/v2"
	"github.com/vishvananda/netlink"
)

var nsSeq atomic.Uint64

// newNamespace creates a named network namespace removed at cleanup.
func newNamespace(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("lemutest-%d-%d", os.Getpid(), nsSeq.Add(1))
	if err := namespace.Create(name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := namespace.Delete(name); err != nil {
			t.Error(err)
		}
	})
	return name
}

var (
	addrA = netip.MustParsePrefix("10.200.0.1/24")
	addrB = netip.MustParsePrefix("10.200.0.2/24")
)

// link builds two namespaces joined by an emulator with opts' models.
func link(t testing.TB, opts Options) (*Emulator, Options) {
	t.Helper()
	testenv.RequireRoot(t, "network namespaces and TUN devices")
	opts.NSA, opts.NSB = newNamespace(t), newNamespace(t)
	opts.DevA, opts.DevB = "emua", "emub"
	opts.AddrA = []netip.Prefix{addrA, netip.MustParsePrefix("fd00:200::1/64")}
	opts.AddrB = []netip.Prefix{addrB, netip.MustParsePrefix("fd00:200::2/64")}
	e, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	e.Start()
	t.Cleanup(func() {
		c, err := e.Stop()
		if err != nil {
			t.Errorf("stop: %v", err)
		}
		t.Logf("counters: fwd %+v ret %+v", c.Fwd, c.Ret)
	})
	return e, opts
}

// receive calls got with every datagram c receives, in a goroutine, until
// none has come for idle after the first; the channel is closed then.
func receive(c *net.UDPConn, idle time.Duration, got func([]byte)) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		// The first packet may take as long as a loaded machine makes
		// it (over 2 s at load 30): until then the wait is a hang guard.
		wait := firstPacketGuard
		for {
			c.SetReadDeadline(time.Now().Add(wait))
			wait = idle
			n, _, err := c.ReadFromUDP(buf)
			if err != nil {
				return
			}
			got(buf[:n])
		}
	}()
	return done
}

func udpIn(t testing.TB, ns, laddr, raddr string) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := namespace.Do(ns, func() error {
		la, err := net.ResolveUDPAddr("udp", laddr)
		if err != nil {
			return err
		}
		if raddr == "" {
			c, err = net.ListenUDP("udp", la)
			return err
		}
		ra, err := net.ResolveUDPAddr("udp", raddr)
		if err != nil {
			return err
		}
		c, err = net.DialUDP("udp", la, ra)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// firstPacketGuard bounds the wait for a test's first packet through the
// emulator: a hang guard, not a figure.
const firstPacketGuard = 15 * time.Second

// echo answers every datagram on c until c is closed.
func echo(c *net.UDPConn) {
	buf := make([]byte, 2048)
	for {
		n, from, err := c.ReadFromUDP(buf)
		if err != nil {
			return
		}
		c.WriteToUDP(buf[:n], from)
	}
}

// measureRTT sends n probes spaced by gap and returns the sorted RTTs.
func measureRTT(t testing.TB, opts Options, n int, gap time.Duration) []time.Duration {
	t.Helper()
	srv := udpIn(t, opts.NSB, "10.200.0.2:7000", "")
	go echo(srv)
	cli := udpIn(t, opts.NSA, "10.200.0.1:0", "10.200.0.2:7000")
	base := time.Now()
	var rtts []time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64)
		for len(rtts) < n {
			cli.SetReadDeadline(time.Now().Add(firstPacketGuard))
			m, err := cli.Read(buf)
			if err != nil || m < 8 {
				return
			}
			rtts = append(rtts, time.Since(base)-time.Duration(binary.BigEndian.Uint64(buf)))
		}
	}()
	msg := make([]byte, 64)
	for range n {
		binary.BigEndian.PutUint64(msg, uint64(time.Since(base)))
		if _, err := cli.Write(msg); err != nil {
			t.Fatal(err)
		}
		time.Sleep(gap)
	}
	<-done
	if len(rtts) != n {
		t.Fatalf("got %d of %d echoes", len(rtts), n)
	}
	slices.Sort(rtts)
	return rtts
}

// rttCases are the delays TestNetnsRTT and BenchmarkNetnsRTT configure.
var rttCases = []struct{ fwd, ret time.Duration }{
	{25 * time.Millisecond, 25 * time.Millisecond},
	{100 * time.Millisecond, 200 * time.Millisecond}, // asymmetric, 300 ms round trip
}

// TestNetnsRTT: no echo comes back faster than the delay configured each
// way. How little later they come is the machine's wake-ups (of the
// emulator, the kernel, this test): at load 28 the median of a link
// with no delay was 17 ms, and 178 ms over the configured 50 in the next
// second. That figure is BenchmarkNetnsRTT's; the delay's exactness is
// checked in virtual time (model_test.go).
func TestNetnsRTT(t *testing.T) {
	for _, c := range rttCases {
		t.Run(fmt.Sprint(c.fwd+c.ret), func(t *testing.T) {
			_, opts := link(t, Options{Fwd: Dir{Delay: c.fwd}, Ret: Dir{Delay: c.ret}})
			rtts := measureRTT(t, opts, 30, 20*time.Millisecond)
			want := c.fwd + c.ret
			t.Logf("configured %v: min %v median %v max %v", want, rtts[0], rtts[len(rtts)/2], rtts[len(rtts)-1])
			if rtts[0] < want {
				t.Errorf("an echo came back in %v, faster than the configured %v", rtts[0], want)
			}
		})
	}
}

// BenchmarkNetnsRTT reports by how much the median round trip through
// the emulator exceeds the configured delays plus the median through a
// link with no delay (ms-late; on the project's 2-core VM, idle, under
// 10 ms). Run it with -bench on an otherwise idle machine.
func BenchmarkNetnsRTT(b *testing.B) {
	var late time.Duration
	for range b.N {
		_, opts := link(b, Options{})
		idle := measureRTT(b, opts, 30, 20*time.Millisecond)
		overhead := idle[len(idle)/2]
		for _, c := range rttCases {
			_, opts := link(b, Options{Fwd: Dir{Delay: c.fwd}, Ret: Dir{Delay: c.ret}})
			rtts := measureRTT(b, opts, 30, 20*time.Millisecond)
			late = max(late, rtts[len(rtts)/2]-(c.fwd+c.ret)-overhead)
		}
	}
	b.ReportMetric(float64(late)/float64(time.Millisecond), "ms-late")
}

// rateRun is what measureRate saw.
type rateRun struct {
	rate     float64 // configured, bit/s
	got      float64 // measured between packets read on time, bit/s
	sent     int     // packets offered
	arrived  int
	counters DirCounters   // at the end
	busy     DirCounters   // when the sender stopped, the queue full
	elapsed  time.Duration // the emulator's time when busy was read
}

// measureRate offers twice a 10 Mbit/s link's rate for 3 s and measures
// what the receiver gets. Half a second of queue, kept full: a stall of
// the sender or of the emulator's reader (a loaded machine stops them
// for tens of milliseconds) leaves the model a backlog to serialize
// meanwhile, so the link never idles and what the receiver measures is
// the emulator's pacing. With the default queue (64 KiB, 52 ms here) it
// idled and fell 10% short.
func measureRate(tb testing.TB) rateRun {
	tb.Helper()
	const rate = 10_000_000
	const queue = rate / 8 / 2
	e, opts := link(tb, Options{Fwd: Dir{Rate: rate, Delay: 10 * time.Millisecond, Queue: queue}})
	srv := udpIn(tb, opts.NSB, "10.200.0.2:7001", "")
	srv.SetReadBuffer(4 << 20)
	cli := udpIn(tb, opts.NSA, "10.200.0.1:0", "10.200.0.2:7001")
	const payload = 1372 // 1400-byte IP packets
	const ipSize = payload + 28
	const dur = 3 * time.Second

	var arrivals []time.Time
	done := receive(srv, 2*time.Second, func([]byte) { arrivals = append(arrivals, time.Now()) })
	// Offer 20 Mbit/s in 5 ms bursts: the queue fills within the first
	// half second and stays full.
	msg := make([]byte, payload)
	start := time.Now()
	sent := 0
	for time.Since(start) < dur {
		due := int(time.Since(start).Seconds() * 20e6 / 8 / ipSize)
		for ; sent < due; sent++ {
			cli.Write(msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
	elapsed, busy := e.Elapsed(), e.Counters().Fwd
	<-done
	r := rateRun{rate: rate, sent: sent, arrived: len(arrivals), counters: e.Counters().Fwd, busy: busy, elapsed: elapsed}
	if len(arrivals) < 100 {
		return r
	}
	// Skip the first quarter (the queue filling) and measure over the
	// rest, between two packets the receiver read on time: with the link
	// busy, packet i leaves tx after packet i-1, and the receiver can only
	// be late, so in each fifth at the ends the packet that came earliest
	// against that grid is the one read nearest its delivery. A single
	// packet at each end, read late, skewed the figure by a few percent.
	tx := time.Duration(ipSize * 8 * float64(time.Second) / rate)
	onTime := func(from, to int) int {
		best := from
		for i := from; i < to; i++ {
			if arrivals[i].Sub(arrivals[best]) < time.Duration(i-best)*tx {
				best = i
			}
		}
		return best
	}
	n := len(arrivals) - len(arrivals)/4
	a := onTime(len(arrivals)/4, len(arrivals)/4+n/5)
	b := onTime(len(arrivals)-n/5, len(arrivals))
	r.got = float64((b-a)*ipSize*8) / arrivals[b].Sub(arrivals[a]).Seconds()
	tb.Logf("offered %d packets, %d arrived, measured %.3f Mbit/s (configured %.3f); emulator: in %d, queue drops %d, delivered %d, errors %d",
		sent, len(arrivals), r.got/1e6, rate/1e6, r.counters.InPackets, r.counters.DropQueue, r.counters.Packets, r.counters.Errors)
	return r
}

// TestNetnsRate: with the link kept busy, the emulator never delivers
// more than its rate allows since it started, by its own counters. How
// near the rate it comes, and what a receiver measures, is the machine's:
// a loaded one starves the emulator's writer (3.8 of 10 Mbit/s at load
// 28) or the receiver (whose stalls read as 13.9), so that figure is
// BenchmarkNetnsRate's, and exact pacing is checked in virtual time
// (model_test.go).
func TestNetnsRate(t *testing.T) {
	r := measureRate(t)
	c := r.counters
	if r.arrived < 100 {
		t.Fatalf("only %d packets arrived (emulator %+v)", r.arrived, c)
	}
	if c.DropQueue == 0 {
		if c.InPackets < uint64(r.sent) {
			// Twice the rate was offered, but the host dropped what the
			// emulator could not read in time: the machine, too busy
			// now to keep the link busy, is what this run measured.
			t.Skipf("the queue never overflowed and the emulator read %d of %d packets offered: too busy a machine to measure the rate", c.InPackets, r.sent)
		}
		t.Errorf("the queue never overflowed: the link was not kept busy")
	}
	// A packet leaves once its serialization at the rate ends, and its
	// delay after: what it delivered by now took at least its bits at the
	// rate (one packet's worth of rounding).
	most := r.rate*(r.elapsed-10*time.Millisecond).Seconds()/8 + 1400
	t.Logf("by %v the emulator delivered %d bytes, %.0f%% of what the rate allows", r.elapsed, r.busy.Bytes, 100*float64(r.busy.Bytes)/most)
	if float64(r.busy.Bytes) > most {
		t.Errorf("the emulator delivered %d bytes in %v, more than %.0f at %.0f bit/s", r.busy.Bytes, r.elapsed, most, r.rate)
	}
	if c.Packets+c.DropQueue+c.Errors != c.InPackets {
		t.Errorf("counters do not add up: %+v", c)
	}
}

// BenchmarkNetnsRate reports how near its configured 10 Mbit/s the
// emulator delivers in real time (the share, %-of-rate): on the project's
// 2-core VM, idle, within -10%..+5%. A speed of the machine as much as
// the emulator's: run it with -bench on an otherwise idle machine.
func BenchmarkNetnsRate(b *testing.B) {
	var sum float64
	for range b.N {
		r := measureRate(b)
		sum += r.got / r.rate
	}
	b.ReportMetric(100*sum/float64(b.N), "%-of-rate")
}

func TestNetnsLoss(t *testing.T) {
	e, opts := link(t, Options{Fwd: Dir{Loss: 0.10}, Seed: 1234})
	srv := udpIn(t, opts.NSB, "10.200.0.2:7002", "")
	srv.SetReadBuffer(4 << 20)
	cli := udpIn(t, opts.NSA, "10.200.0.1:0", "10.200.0.2:7002")
	const n = 3000
	received := 0
	done := receive(srv, 2*time.Second, func([]byte) { received++ })
	msg := make([]byte, 200)
	for i := range n {
		cli.Write(msg)
		if i%10 == 0 {
			time.Sleep(time.Millisecond) // gentle: host drops would blur the figure
		}
	}
	<-done
	c := e.Counters().Fwd
	loss := 1 - float64(received)/n
	t.Logf("sent %d, received %d (loss %.2f%%); emulator: in %d, lost %d, delivered %d", n, received, 100*loss, c.InPackets, c.DropLoss, c.Packets)
	if c.InPackets < n || uint64(received) < c.Packets-(c.InPackets-n) {
		t.Skipf("the host dropped packets outside the emulator (busy machine): in %d of %d, received %d of %d delivered",
			c.InPackets, n, received, c.Packets)
	}
	// sigma = sqrt(0.1*0.9/3000) = 0.55%: allow 4 sigma.
	if loss < 0.078 || loss > 0.122 {
		t.Errorf("loss %.2f%%, want about 10%%", 100*loss)
	}
	if c.DropLoss+uint64(received) < n || c.DropQueue != 0 || c.DropOutage != 0 {
		t.Errorf("counters do not add up: %+v, received %d of %d", c, received, n)
	}
}

func TestNetnsOutage(t *testing.T) {
	const delay = 10 * time.Millisecond
	window := Outage{Start: 400 * time.Millisecond, Duration: 300 * time.Millisecond}
	e, opts := link(t, Options{Fwd: Dir{Delay: delay}, Ret: Dir{Delay: delay}, Outages: []Outage{window}})
	srv := udpIn(t, opts.NSB, "10.200.0.2:7003", "")
	cli := udpIn(t, opts.NSA, "10.200.0.1:0", "10.200.0.2:7003")
	type rx struct{ sent, at time.Duration }
	var got []rx
	// The receiver waits out the outage and a loaded machine's stalls: a
	// 500 ms pause ended it early in a CI run, before the packets sent
	// after the outage arrived.
	done := receive(srv, 2*time.Second, func(p []byte) {
		if len(p) >= 8 {
			got = append(got, rx{time.Duration(binary.BigEndian.Uint64(p)), e.Elapsed()})
		}
	})
	msg := make([]byte, 64)
	var sent []time.Duration
	for e.Elapsed() < 1100*time.Millisecond {
		now := e.Elapsed()
		binary.BigEndian.PutUint64(msg, uint64(now))
		cli.Write(msg)
		sent = append(sent, now)
		time.Sleep(2 * time.Millisecond)
	}
	<-done
	// Times are taken by this test's goroutines, which a loaded machine
	// wakes late (by seconds at load 30): a packet stamped at sent is
	// read by the emulator at some time in [sent, at-delay] and delivered
	// in [sent+delay, at], where at is when this test read it. The model
	// drops a packet read or delivered inside the window. Each check
	// below holds whatever the lateness: it judges a packet only where
	// those spans settle it, and for a lost packet sent before the window,
	// by the largest lateness the arrived ones show in this run (late),
	// plus slack.
	const slack = 30 * time.Millisecond
	end := window.Start + window.Duration
	inWindow := func(from, to time.Duration) bool { return from >= window.Start && to < end }
	arrived := map[time.Duration]bool{}
	var late time.Duration
	for _, r := range got {
		arrived[r.sent] = true
		late = max(late, r.at-delay-r.sent)
		if inWindow(r.sent, r.at-delay) || inWindow(r.sent+delay, r.at) {
			t.Errorf("a packet sent at %v and read at %v crossed the outage", r.sent, r.at)
		}
	}
	inside := 0 // surely read inside the window: each one an outage drop
	for _, s := range sent {
		switch {
		case arrived[s]:
		case s >= end:
			t.Errorf("the packet sent at %v, after the outage, was lost", s)
		case s+delay+late+slack < window.Start:
			t.Errorf("the packet sent at %v, before the outage (lateness in this run up to %v), was lost", s, late)
		case s >= window.Start && s+late+slack < end:
			inside++
		}
	}
	c := e.Counters().Fwd
	t.Logf("sent %d, arrived %d, outage drops %d; lateness up to %v", len(sent), len(got), c.DropOutage, late)
	// The kernel's own packets (IPv6 solicitations) may cross too.
	if c.DropOutage+uint64(len(got)) < uint64(len(sent)) || c.DropLoss+c.DropQueue != 0 {
		t.Errorf("of %d packets %d arrived and %d were outage drops (counters %+v): every one must be one or the other", len(sent), len(got), c.DropOutage, c)
	}
	if inside == 0 {
		t.Skipf("no packet was sent well inside the outage on this machine now (%d sent, lateness up to %v)", len(sent), late)
	}
	if c.DropOutage < uint64(inside) {
		t.Errorf("%d outage drops for %d packets sent inside the outage", c.DropOutage, inside)
	}
}

// BenchmarkNetnsThroughput measures kernel TCP through the unthrottled
// emulator, which must never be the bottleneck of a benchmark (more than
// 500 Mbit/s on the project's 2-core VM). A speed, so a benchmark: run it
// with -bench on an otherwise idle machine.
func BenchmarkNetnsThroughput(b *testing.B) {
	_, opts := link(b, Options{})
	ln, err := namespace.Listen(opts.NSB, "tcp", "10.200.0.2:7004")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	var total atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		total.Store(n)
	}()
	conn, err := namespace.DialContext(context.Background(), opts.NSA, "tcp", "10.200.0.2:7004")
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 256<<10)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if _, err := conn.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	conn.Close()
	wg.Wait()
	b.StopTimer()
	if total.Load() != int64(b.N*len(buf)) {
		b.Fatalf("received %d of %d bytes", total.Load(), b.N*len(buf))
	}
	b.ReportMetric(float64(total.Load())*8/time.Since(start).Seconds()/1e6, "Mbit/s")
}

func TestNetnsCommand(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces and TUN devices")
	nsA, nsB := newNamespace(t), newNamespace(t)
	app := &cli.App{Name: "scpsvpn", Commands: []*cli.Command{Command()}}
	var out strings.Builder
	app.Writer = &out
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- app.RunContext(ctx, []string{"scpsvpn", "linkemu", "--ns-a", nsA, "--ns-b", nsB,
			"--dev-a", "cmda", "--dev-b", "cmdb", "--addr-a", "10.200.0.1/24", "--addr-b", "10.200.0.2/24",
			"--rate", "2Mbit", "--fwd-delay", "20ms", "--ret-delay", "30ms", "--ret-loss", "1%",
			"--burst", "p=1%,r=50%", "--queue", "128KiB", "--outage", "10s:1s", "--outage-every", "20s:50ms", "--seed", "7"})
	}()
	// Wait until both devices exist, up and addressed, in their namespaces.
	for _, side := range []struct{ ns, dev, addr string }{{nsA, "cmda", "10.200.0.1"}, {nsB, "cmdb", "10.200.0.2"}} {
		h, err := namespace.Netlink(side.ns)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		var link netlink.Link
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if link, err = h.LinkByName(side.dev); err == nil && link.Attrs().Flags&net.FlagUp != 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not come up in %s: %v", side.dev, side.ns, err)
			}
		}
		addrs, err := h.AddrList(link, netlink.FAMILY_V4)
		if err != nil || len(addrs) != 1 || addrs[0].IP.String() != side.addr {
			t.Fatalf("%s addresses %v, %v", side.dev, addrs, err)
		}
	}
	opts := Options{NSA: nsA, NSB: nsB}
	rtts := measureRTT(t, opts, 5, 10*time.Millisecond)
	if rtts[0] < 50*time.Millisecond {
		t.Errorf("RTT %v below the configured 20ms+30ms", rtts[0])
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("linkemu: %v", err)
	}
	for _, want := range []string{"seed 7", "forward (A->B): in ", "return  (B->A): in ", "drops: loss"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	for _, side := range []struct{ ns, dev string }{{nsA, "cmda"}, {nsB, "cmdb"}} {
		h, _ := namespace.Netlink(side.ns)
		if _, err := h.LinkByName(side.dev); err == nil {
			t.Errorf("%s still exists in %s after exit", side.dev, side.ns)
		}
		h.Close()
	}
}
