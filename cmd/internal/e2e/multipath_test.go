package e2e

// One association over two links (docs/multipath.md), through the real
// binary: A is told of both links as paths, B learns them from A's
// packets. A download from B to A goes on while the link in use is cut:
// the flow is not reset, the data moves to the other link, and the bytes
// arrive intact (SHA-256). How long the data waited is measured and logged
// (docs/multipath.md's figure), checked only against a generous guard:
// the machine may be busy.

import (
	"crypto/sha256"
	"encoding/json"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"scpsvpn/cmd/internal/testbed"
	"scpsvpn/tunnel"
)

// multipathSites is a two-path testbed, both endpoints up, every path
// known at both ends. B's [peer.link] says up = 20 Mbit/s, but B learns
// its paths from A's packets, and an association of learned paths drops
// told rates (tunnel untoldRates): B would send at whatever the veths
// take (24 MiB in about 3 s at load 15). So the download's server paces
// itself at downloadRate (startDownload): a download lasts long enough
// to be cut in the middle, and loads the machine lightly.
func multipathSites(t *testing.T, backup bool) *testbed.Testbed {
	t.Helper()
	tb := twoSites(t, testbed.Config{
		TwoPaths:   true,
		BackupPath: backup,
		PathLink:   `rtt = "10ms"`,
		PeerLinkA:  `rtt = "10ms"`,
		PeerLinkB: `rtt = "10ms"
up = "20Mbit"`,
	})
	waitPaths(t, tb, func(a, b []tunnel.PathStatus) bool {
		return len(a) == 2 && len(b) == 2 && a[0].Up && a[1].Up && b[0].Up && b[1].Up
	}, 10*time.Second)
	return tb
}

// pathsAt returns side's paths to its one peer (`scpsvpn status --json`).
func pathsAt(t *testing.T, tb *testbed.Testbed, side testbed.Side) []tunnel.PathStatus {
	t.Helper()
	out, err := tb.Command(side, binary, "status", "--json", "--interface", tb.Site(side).TUNName).Output()
	if err != nil {
		t.Fatalf("status at %s: %v", side, err)
	}
	var st tunnel.Status
	if err := json.Unmarshal(out, &st); err != nil || len(st.Peers) != 1 {
		t.Fatalf("status at %s: %v\n%s", side, err, out)
	}
	return st.Peers[0].Paths
}

func waitPaths(t *testing.T, tb *testbed.Testbed, ok func(a, b []tunnel.PathStatus) bool, within time.Duration) (a, b []tunnel.PathStatus) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		a, b = pathsAt(t, tb, testbed.A), pathsAt(t, tb, testbed.B)
		if ok(a, b) {
			return a, b
		}
		if time.Now().After(deadline) {
			t.Fatalf("paths within %v:\nA %+v\nB %+v", within, a, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// onLink returns the path of side's list that runs over link i (0: the
// first underlay, 1: the second), found by its endpoint's address.
func onLink(t *testing.T, tb *testbed.Testbed, side testbed.Side, paths []tunnel.PathStatus, i int) tunnel.PathStatus {
	t.Helper()
	far := tb.B
	if side == testbed.B {
		far = tb.A
	}
	addr := []string{far.Underlay.Addr().String(), far.Underlay2.Addr().String()}[i]
	for _, p := range paths {
		if strings.HasPrefix(p.Endpoint, addr+":") {
			return p
		}
	}
	t.Fatalf("%s: no path to %s in %+v", side, addr, paths)
	return tunnel.PathStatus{}
}

// pathDownload serves size random bytes from B and reads them at A, noting
// when each read came; it returns at once, the result on the channel.
type pathDownload struct {
	mu    sync.Mutex
	reads []time.Time
	got   int64
	done  chan error
	want  [32]byte
}

// downloadRate is the pace of startDownload's server, in bits/s.
const downloadRate = 20_000_000

func startDownload(t *testing.T, tb *testbed.Testbed, size int) *pathDownload {
	t.Helper()
	data, want := randomData(t, size)
	ln, err := tb.Listen(testbed.B, "tcp", hostPort(tb.B.TUN4, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go serveEach(ln, func(c net.Conn) { writePaced(c, data, downloadRate); c.Close() })
	c, err := tb.Dial(testbed.A, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	d := &pathDownload{done: make(chan error, 1), want: want}
	go func() {
		h := sha256.New()
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			h.Write(buf[:n])
			d.mu.Lock()
			d.got += int64(n)
			if n > 0 {
				d.reads = append(d.reads, time.Now())
			}
			d.mu.Unlock()
			if err == io.EOF && d.got == int64(size) {
				var sum [32]byte
				copy(sum[:], h.Sum(nil))
				if sum != want {
					d.done <- errSum
					return
				}
				d.done <- nil
				return
			}
			if err != nil {
				d.done <- err
				return
			}
		}
	}()
	return d
}

// writePaced writes data to c at rate bits/s on average, in 64 KiB
// writes, each no earlier than its share of the time (a late one is
// caught up on).
func writePaced(c net.Conn, data []byte, rate float64) error {
	const chunk = 64 << 10
	start := time.Now()
	for off := 0; off < len(data); off += chunk {
		time.Sleep(time.Until(start.Add(time.Duration(float64(off*8) / rate * float64(time.Second)))))
		if _, err := c.Write(data[off:min(off+chunk, len(data))]); err != nil {
			return err
		}
	}
	return nil
}

var errSum = &sumError{}

type sumError struct{}

func (*sumError) Error() string { return "SHA-256 of the download differs" }

// bytes is how much has arrived.
func (d *pathDownload) bytes() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.got
}

// stallAfter is the longest time without a read after t0.
func (d *pathDownload) stallAfter(t0 time.Time) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	var gap time.Duration
	last := t0
	for _, at := range d.reads {
		if at.Before(t0) {
			continue
		}
		gap = max(gap, at.Sub(last))
		last = at
	}
	return gap
}

// wait waits for the download's end, within guard.
func (d *pathDownload) wait(t *testing.T, guard time.Duration) {
	t.Helper()
	select {
	case err := <-d.done:
		if err != nil {
			t.Fatalf("download after %d bytes: %v", d.bytes(), err)
		}
	case <-time.After(guard):
		t.Fatalf("download hangs: %d bytes after %v", d.bytes(), guard)
	}
}

// waitBytes waits until n bytes have arrived.
func (d *pathDownload) waitBytes(t *testing.T, n int64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for d.bytes() < n {
		if time.Now().After(deadline) {
			t.Fatalf("download: %d bytes after %v, want %d", d.bytes(), within, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stallGuard bounds the wait after a cut: the design moves the data within
// 1 s (measured and logged); far more means it did not move at all.
const stallGuard = 5 * time.Second

// TestMultipathFailover: cutting the link a download runs on (of two
// primaries, both carry it) moves it to the other link: no reset, the bytes intact, both ends see the path down
// and the other carrying the data.
func TestMultipathFailover(t *testing.T) {
	tb := multipathSites(t, false)
	const size = 24 << 20 // 10 s at downloadRate
	d := startDownload(t, tb, size)
	d.waitBytes(t, 4<<20, 20*time.Second)
	// Both links are primaries, so the data is bonded across them: cut
	// the one B has sent the more data on.
	b := pathsAt(t, tb, testbed.B)
	used := 0
	if onLink(t, tb, testbed.B, b, 1).DataBytesSent > onLink(t, tb, testbed.B, b, 0).DataBytesSent {
		used = 1
	}
	if d.bytes() == size {
		t.Fatal("the download ended before the cut")
	}
	cut := time.Now()
	if err := tb.SetPathUp(used, false); err != nil {
		t.Fatal(err)
	}
	d.wait(t, 60*time.Second)
	stall := d.stallAfter(cut)
	t.Logf("link %d cut mid-download: the data waited %v at most", used, stall.Round(time.Millisecond))
	if stall > stallGuard {
		t.Errorf("the download stalled %v after the cut (design: within 1 s)", stall)
	}
	// The download may end before the cut path is judged down (300 ms
	// of silence): wait for both ends to see it, within the guard.
	var a []tunnel.PathStatus
	for deadline := time.Now().Add(stallGuard); ; time.Sleep(100 * time.Millisecond) {
		a, b = pathsAt(t, tb, testbed.A), pathsAt(t, tb, testbed.B)
		if !onLink(t, tb, testbed.A, a, used).Up && !onLink(t, tb, testbed.B, b, used).Up || time.Now().After(deadline) {
			break
		}
	}
	for _, side := range []struct {
		side  testbed.Side
		paths []tunnel.PathStatus
	}{{testbed.A, a}, {testbed.B, b}} {
		dead, other := onLink(t, tb, side.side, side.paths, used), onLink(t, tb, side.side, side.paths, 1-used)
		if dead.Up || dead.Downs == 0 || !other.Up || !other.Active {
			t.Errorf("%s after the cut: cut path %+v, other %+v: want the cut one down, the other up and carrying the data", side.side, dead, other)
		}
	}
	if p := onLink(t, tb, testbed.B, b, 1-used); p.DataBytesSent < size/4 {
		t.Errorf("B sent %d data bytes on the other link: want a good part of the %d", p.DataBytesSent, size)
	}
	// status prints the paths.
	out, err := tb.Command(testbed.A, binary, "status", "--interface", tb.A.TUNName).Output()
	if err != nil || !strings.Contains(string(out), "PATH") || !strings.Contains(string(out), testbed.PathNames[1-used]) {
		t.Errorf("status at A: %v\n%s", err, out)
	}
	t.Logf("status at A after the cut:\n%s", out)
	// Datagrams follow: ping crosses on the link left.
	if out, err := tb.Exec(testbed.A, "ping", "-c", "3", "-i", "0.2", "-W", "2", tb.B.TUN4.String()); err != nil {
		t.Errorf("ping over the link left: %v\n%s", err, out)
	}
}

// TestMultipathBackup: a backup link carries probes only while the primary
// works, takes the download when the primary is cut, and hands it back
// when the primary returns.
func TestMultipathBackup(t *testing.T) {
	tb := multipathSites(t, true)
	const size = 40 << 20 // 17 s at downloadRate
	d := startDownload(t, tb, size)
	d.waitBytes(t, 4<<20, 20*time.Second)
	a, b := pathsAt(t, tb, testbed.A), pathsAt(t, tb, testbed.B)
	for _, side := range []struct {
		side  testbed.Side
		paths []tunnel.PathStatus
	}{{testbed.A, a}, {testbed.B, b}} {
		if p := onLink(t, tb, side.side, side.paths, 1); p.DataBytesSent != 0 || p.Active || p.ProbesSent == 0 {
			t.Errorf("%s: backup while the primary works: %+v: want probes only", side.side, p)
		}
	}
	if d.bytes() == size {
		t.Fatal("the download ended before the cut")
	}
	cut := time.Now()
	if err := tb.SetPathUp(0, false); err != nil {
		t.Fatal(err)
	}
	// The download goes on over the backup. (Before B's server paced
	// itself, B sent at the veths' pace, not 20 Mbit/s, and the download
	// had ended before the cut twice in ten loaded runs.) A download
	// started after the cut goes on the backup too.
	at := d.bytes()
	d.waitBytes(t, min(at+4<<20, size), 30*time.Second)
	d3 := startDownload(t, tb, 4<<20)
	d3.wait(t, 60*time.Second)
	stall := d.stallAfter(cut)
	t.Logf("primary cut mid-download: the data waited %v at most", stall.Round(time.Millisecond))
	if stall > stallGuard {
		t.Errorf("the download stalled %v after the primary was cut (design: within 1 s)", stall)
	}
	if p := onLink(t, tb, testbed.B, pathsAt(t, tb, testbed.B), 1); p.DataBytesSent == 0 || !p.Active {
		t.Errorf("B's backup after the cut: %+v: want it carrying the data", p)
	}
	if err := tb.SetPathUp(0, true); err != nil {
		t.Fatal(err)
	}
	// Back on the primary once it is up again at both ends.
	waitPaths(t, tb, func(a, b []tunnel.PathStatus) bool {
		return onLink(t, tb, testbed.A, a, 0).Active && onLink(t, tb, testbed.B, b, 0).Active
	}, 10*time.Second)
	// The first download may have ended meanwhile (on a loaded machine
	// both ends take seconds to see the primary back): a second one,
	// started now, is what the hand-back must carry on the primary.
	before := onLink(t, tb, testbed.B, pathsAt(t, tb, testbed.B), 1)
	d2 := startDownload(t, tb, 4<<20)
	d2.wait(t, 60*time.Second)
	after := onLink(t, tb, testbed.B, pathsAt(t, tb, testbed.B), 1)
	if after.DataBytesSent != before.DataBytesSent {
		t.Errorf("the backup carried %d data bytes after the primary returned", after.DataBytesSent-before.DataBytesSent)
	}
	d.wait(t, 90*time.Second)
}
