package e2e

// TCP carried transparently from TUN to TUN, over a veth.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"scpsvpn/cmd/internal/testbed"
)

// family picks the IPv4 or IPv6 addresses of the sites.
type family struct {
	name string
	addr func(*testbed.Site) netip.Addr
}

var families = []family{
	{"ipv4", func(s *testbed.Site) netip.Addr { return s.TUN4 }},
	{"ipv6", func(s *testbed.Site) netip.Addr { return s.TUN6 }},
}

// serveOnce accepts one connection and runs f on it in the background.
func serveOnce(t *testing.T, ln net.Listener, f func(net.Conn) error) <-chan error {
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		done <- f(c)
	}()
	return done
}

func TestBulkBothWays(t *testing.T) {
	tb := twoSites(t, testbed.Config{})
	const size = 50 << 20
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			for _, dir := range []struct {
				name           string
				client, server testbed.Side
			}{{"A-to-B", testbed.A, testbed.B}, {"B-to-A", testbed.B, testbed.A}} {
				t.Run(dir.name, func(t *testing.T) {
					data, _ := randomData(t, size)
					start := time.Now()
					if err := sendChecked(tb, dir.client, dir.server, fam.addr(tb.Site(dir.server)), data); err != nil {
						t.Fatal(err)
					}
					el := time.Since(start)
					t.Logf("%d MB in %v: %.0f Mbit/s", size>>20, el.Round(time.Millisecond), float64(size)*8/el.Seconds()/1e6)
				})
			}
		})
	}
}

func TestManyConnections(t *testing.T) {
	tb := twoSites(t, testbed.Config{})
	for _, side := range []testbed.Side{testbed.A, testbed.B} {
		// The kernel's 500 packets overflowed under many LAN senders.
		if q, err := tb.TUNQueue(side); err != nil || q.Len < 4096 {
			t.Errorf("%s: TUN transmit queue %+v, %v: want at least 4096 packets", side, q, err)
		}
	}
	const conns, size = 200, 1 << 20
	srv := tb.B.TUN4
	ln, err := tb.Listen(testbed.B, "tcp", hostPort(srv, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go serveEach(ln, func(c net.Conn) { // read to EOF, reply with the hash
		defer c.Close()
		s, _, err := hashAll(c)
		if err == nil {
			c.Write(s[:])
		}
	})
	addr := ln.Addr().String()
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			data, sum := randomData(t, size)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			c, err := tb.DialContext(ctx, testbed.A, "tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(120 * time.Second))
			if _, err := c.Write(data); err != nil {
				errs <- err
				return
			}
			closeWrite(c)
			reply, err := io.ReadAll(c)
			if err != nil || len(reply) != 32 || [32]byte(reply) != sum {
				errs <- fmt.Errorf("reply %x, %v", reply, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		n++
		if n <= 5 {
			t.Error(err)
		}
	}
	if n > 0 {
		t.Fatalf("%d of %d connections failed", n, conns)
	}
}

func TestRefusedPort(t *testing.T) {
	tb := twoSites(t, testbed.Config{})
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			// A port with no listener at B: the client sees refused or
			// reset (B's kernel refuses, B's endpoint passes it on), not a
			// timeout.
			start := time.Now()
			c, err := tb.Dial(testbed.A, "tcp", hostPort(fam.addr(tb.B), 9))
			if err == nil {
				c.SetDeadline(time.Now().Add(10 * time.Second))
				_, err = c.Read(make([]byte, 1))
				c.Close()
			}
			if !isReset(err) {
				t.Fatalf("client got %v after %v, want refused or reset", err, time.Since(start))
			}
			// The endpoint carries on: a real connection still works.
			ln, err := tb.Listen(testbed.B, "tcp", hostPort(fam.addr(tb.B), 0))
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			done := serveOnce(t, ln, func(c net.Conn) error { _, err := c.Write([]byte("still here")); return err })
			c2, err := tb.Dial(testbed.A, "tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Close()
			b, err := io.ReadAll(c2)
			if err != nil || string(b) != "still here" {
				t.Fatalf("after refusal: %q, %v", b, err)
			}
			<-done
		})
	}
}

func TestHalfClose(t *testing.T) {
	tb := twoSites(t, testbed.Config{})
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			srv := fam.addr(tb.B)
			ln, err := tb.Listen(testbed.B, "tcp", hostPort(srv, 0))
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			data, sum := randomData(t, 1<<20)
			done := serveOnce(t, ln, func(c net.Conn) error {
				req, err := io.ReadAll(c) // ends at the client's FIN
				if err != nil || string(req) != "request" {
					return fmt.Errorf("server read %q, %v", req, err)
				}
				if _, err := c.Write(data); err != nil {
					return fmt.Errorf("server write after client FIN: %w", err)
				}
				return closeWrite(c)
			})
			c, err := tb.Dial(testbed.A, "tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Write([]byte("request"))
			if err := closeWrite(c); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			got, n, err := hashAll(c)
			if err != nil {
				t.Fatalf("client read after %d bytes: %v", n, err)
			}
			mustEqual(t, "reply after half-close", got, sum)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestPingAndUDP(t *testing.T) {
	if _, err := exec.LookPath("ping"); err != nil {
		t.Fatal("ping is not installed (Debian: iputils-ping); .ci/run installs it")
	}
	tb := twoSites(t, testbed.Config{})
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			dst := fam.addr(tb.B).String()
			out, err := tb.Exec(testbed.A, "ping", "-c", "3", "-i", "0.2", "-W", "2", dst)
			if err != nil || !strings.Contains(string(out), " 0% packet loss") {
				t.Fatalf("ping %s: %v\n%s", dst, err, out)
			}
			pc, err := tb.ListenPacket(testbed.B, "udp", hostPort(fam.addr(tb.B), 0))
			if err != nil {
				t.Fatal(err)
			}
			defer pc.Close()
			go func() { // echo, upper-cased
				buf := make([]byte, 2048)
				for {
					n, from, err := pc.ReadFrom(buf)
					if err != nil {
						return
					}
					pc.WriteTo([]byte(strings.ToUpper(string(buf[:n]))), from)
				}
			}()
			c, err := tb.Dial(testbed.A, "udp", pc.LocalAddr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			buf := make([]byte, 2048)
			for try := 0; ; try++ {
				c.Write([]byte("hello over udp"))
				c.SetReadDeadline(time.Now().Add(time.Second))
				n, err := c.Read(buf)
				if err == nil {
					if got := string(buf[:n]); got != "HELLO OVER UDP" {
						t.Fatalf("UDP reply %q", got)
					}
					break
				}
				if try == 2 {
					t.Fatalf("no UDP reply: %v", err)
				}
			}
		})
	}
}

var leftoverRE = regexp.MustCompile(`leftover_goroutines=(-?\d+)`)

func TestStopCleansUpAndResets(t *testing.T) {
	tb := twoSites(t, testbed.Config{})
	ln, err := tb.Listen(testbed.B, "tcp", hostPort(tb.B.TUN4, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go serveEach(ln, func(c net.Conn) { // send forever
		defer c.Close()
		buf := make([]byte, 32<<10)
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	})
	c, err := tb.Dial(testbed.A, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.ReadFull(c, make([]byte, 1<<20)); err != nil {
		t.Fatalf("transfer before stop: %v", err)
	}
	readErr := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, c)
		readErr <- err
	}()

	code, err := tb.StopEndpoint(testbed.A, syscall.SIGTERM)
	if err != nil || code != 0 {
		t.Fatalf("stop: exit code %d, %v", code, err)
	}
	select {
	case err := <-readErr:
		if !isReset(err) {
			t.Errorf("client connection ended with %v, want a reset", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("client connection left hanging after the endpoint stopped")
	}
	// No TUN device or route is left in site A.
	err = tb.Do(testbed.A, func() error {
		if _, err := netlink.LinkByName(tb.A.TUNName); err == nil {
			return fmt.Errorf("TUN %s still exists", tb.A.TUNName)
		}
		routes, err := netlink.RouteList(nil, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, r := range routes {
			if r.Dst != nil && (r.Dst.String() == tb.B.LAN4.String() || r.Dst.String() == tb.B.LAN6.String()) {
				return fmt.Errorf("route %s still exists", r.Dst)
			}
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	// No goroutine is left behind when Run returns.
	m := leftoverRE.FindStringSubmatch(logOf(tb, testbed.A))
	if m == nil {
		t.Fatal("the endpoint did not report its goroutines on exit")
	}
	if n, _ := strconv.Atoi(m[1]); n > 0 {
		t.Errorf("%d goroutines left after the endpoint stopped", n)
	}
	// Site B carried on and stops cleanly too.
	if code, err := tb.StopEndpoint(testbed.B, syscall.SIGTERM); err != nil || code != 0 {
		t.Errorf("stop B: exit code %d, %v", code, err)
	}
}

// rssLimit is the bound on an endpoint's resident memory.
const rssLimit = 128 << 20

func TestMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("20 s")
	}
	tb := twoSites(t, testbed.Config{})
	ln, err := tb.Listen(testbed.B, "tcp", hostPort(tb.B.TUN4, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const rate = 1 << 20 // the server reads 1 MB/s
	var read int64
	var mu sync.Mutex
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 64<<10)
		tick := time.NewTicker(62500 * time.Microsecond) // 16 reads of 64 KiB a second
		defer tick.Stop()
		for range tick.C {
			n, err := io.ReadFull(c, buf)
			mu.Lock()
			read += int64(n)
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	c, err := tb.Dial(testbed.A, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const dur = 20 * time.Second
	end := time.Now().Add(dur)
	buf := make([]byte, 64<<10)
	var written int64
	var blocked time.Duration
	var peakA, peakB int64
	for time.Now().Before(end) {
		c.SetWriteDeadline(time.Now().Add(500 * time.Millisecond))
		t0 := time.Now()
		n, err := c.Write(buf)
		written += int64(n)
		if err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("client write: %v", err)
			}
			blocked += time.Since(t0)
		}
		for _, s := range []struct {
			side testbed.Side
			peak *int64
		}{{testbed.A, &peakA}, {testbed.B, &peakB}} {
			// Both endpoints run throughout: a failed read is a failure,
			// not a sample to skip (with every read failing, the peaks
			// would stay 0 and pass).
			r, err := tb.RSS(s.side)
			if err != nil {
				t.Fatalf("RSS of %s: %v", s.side, err)
			}
			*s.peak = max(*s.peak, r)
		}
	}
	mu.Lock()
	got := read
	mu.Unlock()
	t.Logf("client wrote %d MB in %v (blocked %v), server read %d MB; peak RSS A %d MiB, B %d MiB",
		written>>20, dur, blocked.Round(time.Millisecond), got>>20, peakA>>20, peakB>>20)
	// The client's writes must block: what it wrote is what the server read
	// plus bounded buffers (socket buffers, stacks and stream windows), far
	// below what 20 s of an unthrottled veth would carry.
	if blocked < dur/2 {
		t.Errorf("client writes blocked for only %v of %v", blocked, dur)
	}
	if inFlight := written - got; inFlight > 96<<20 {
		t.Errorf("%d MiB written but not read: buffers are not bounded", inFlight>>20)
	}
	if peakA > rssLimit || peakB > rssLimit {
		t.Errorf("peak RSS A %d MiB, B %d MiB: over %d MiB", peakA>>20, peakB>>20, rssLimit>>20)
	}
}

// TestPeerRestart: when a site's endpoint dies and comes back, the other
// site notices the new association instance, resets the flows that were
// carried by the old one, and carries new flows.
func TestPeerRestart(t *testing.T) {
	tb := twoSites(t, testbed.Config{})
	ln, err := tb.Listen(testbed.B, "tcp", hostPort(tb.B.TUN4, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go serveEach(ln, func(c net.Conn) { defer c.Close(); io.Copy(c, c) }) // echo
	old, err := tb.Dial(testbed.A, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if _, err := old.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(old, make([]byte, 4)); err != nil {
		t.Fatalf("echo before restart: %v", err)
	}
	if code, _ := tb.StopEndpoint(testbed.B, syscall.SIGKILL); code == 0 {
		t.Fatal("SIGKILL reported a clean exit")
	}
	if err := tb.StartEndpoint(testbed.B); err != nil {
		t.Fatal(err)
	}
	waitLog(t, tb, testbed.A, "peer restarted", 10*time.Second)
	old.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := old.Read(make([]byte, 1)); !isReset(err) {
		t.Errorf("a flow of the old association ended with %v, want a reset", err)
	}
	c, err := tb.Dial(testbed.A, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("again")); err != nil {
		t.Fatal(err)
	}
	if b := make([]byte, 5); func() error { _, err := io.ReadFull(c, b); return err }() != nil || string(b) != "again" {
		t.Fatalf("echo after restart failed")
	}
}

// TestNoPeerUnreachable: traffic routed into the TUN for a subnet no peer
// owns is refused at once (RST for TCP, ICMP unreachable otherwise), not
// black-holed.
func TestNoPeerUnreachable(t *testing.T) {
	tb := twoSites(t, testbed.Config{})
	for _, r := range []string{"10.3.0.0/24", "fd00:3::/64"} {
		if out, err := tb.Exec(testbed.A, "ip", "route", "add", r, "dev", tb.A.TUNName); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	for _, dst := range []string{"10.3.0.1", "fd00:3::1"} {
		start := time.Now()
		c, err := tb.Dial(testbed.A, "tcp", net.JoinHostPort(dst, "80"))
		if err == nil {
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err = c.Read(make([]byte, 1))
			c.Close()
		}
		// Refused, not held: a black hole would meet the read deadline
		// (a hang guard; the refusal comes in milliseconds).
		if !isReset(err) {
			t.Errorf("TCP to %s: %v after %v, want refused at once", dst, err, time.Since(start))
		}
		out, _ := tb.Exec(testbed.A, "ping", "-c", "1", "-W", "2", dst)
		if !strings.Contains(string(out), "nreachable") {
			t.Errorf("ping %s: no unreachable error:\n%s", dst, out)
		}
	}
}
