package e2e

// Flow control through the real binary: windows that grow to what an
// unconfigured link carries (issue 11.1).

import (
	"encoding/json"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"scpsvpn/cmd/internal/linkemu"
	"scpsvpn/cmd/internal/testbed"
	"scpsvpn/scps"
	"scpsvpn/tunnel"
)

// assocStats returns side's association with its one peer, as `scpsvpn
// status --json` shows it.
func assocStats(t *testing.T, tb *testbed.Testbed, side testbed.Side) scps.Stats {
	t.Helper()
	out, err := statusIn(t, tb, side, "--interface", tb.Site(side).TUNName)
	if err != nil {
		t.Fatalf("status of %s: %v: %s", side, err, out)
	}
	var st tunnel.Status
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("status of %s: %v: %s", side, err, out)
	}
	if len(st.Peers) != 1 {
		t.Fatalf("status of %s: %d peers", side, len(st.Peers))
	}
	return st.Peers[0].Association
}

// mustRSS returns side's endpoint's resident set size.
func mustRSS(t *testing.T, tb *testbed.Testbed, side testbed.Side) int64 {
	t.Helper()
	r, err := tb.RSS(side)
	if err != nil {
		t.Fatalf("RSS of %s: %v", side, err)
	}
	return r
}

// serveZeros writes zeros to every connection ln accepts until the client
// goes away.
func serveZeros(ln net.Listener) {
	buf := make([]byte, 256<<10)
	serveEach(ln, func(c net.Conn) {
		defer c.Close()
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	})
}

// drain reads from c into n until it fails or stop is closed.
func drain(c net.Conn, n *atomic.Int64, stop <-chan struct{}) {
	buf := make([]byte, 256<<10)
	for {
		select {
		case <-stop:
			return
		default:
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		k, err := c.Read(buf)
		n.Add(int64(k))
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return
		}
	}
}

// TestWindowGrowsUntold: no [peer.link] at either end, and a path whose
// bandwidth-delay product (10 MB) is well past the old fixed windows,
// which held about 3 MB in flight: 40 Mbit/s toward site A, 3 back, 2 s
// round trip. The long delay, not a high rate, makes the product: the
// emulator runs inside this test process, under the race detector, on a
// loaded 2-core machine, and carries tens of Mbit/s there, not hundreds
// (the 250 Mbit/s, 650 ms case of draft-kuhn-quic-4-sat is a bench
// condition). The sender's bytes in flight must grow past 6 MB.
func TestWindowGrowsUntold(t *testing.T) {
	if testing.Short() {
		t.Skip("a 30 s download at 40 Mbit/s")
	}
	const (
		rate = 40_000_000
		rtt  = 2 * time.Second
		bdp  = rate / 8 * 2.0
		dur  = 30 * time.Second
	)
	tb := twoSites(t, testbed.Config{
		Kind: testbed.Emulated,
		Link: linkemu.Options{
			Fwd:  linkemu.Dir{Rate: 3_000_000, Delay: rtt / 2},
			Ret:  linkemu.Dir{Rate: rate, Delay: rtt / 2, Queue: int64(bdp)},
			Seed: 1,
		},
		LogLevel: "info",
	})
	ln, err := tb.Listen(testbed.B, "tcp", hostPort(tb.B.TUN4, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go serveZeros(ln)
	c, err := tb.Dial(testbed.A, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var got atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); drain(c, &got, stop) }()
	start := time.Now()
	var peak int
	var last5, rssA, rssB int64
	for time.Since(start) < dur {
		time.Sleep(500 * time.Millisecond)
		st := assocStats(t, tb, testbed.B)
		peak = max(peak, st.BytesInFlight)
		rssA, rssB = max(rssA, mustRSS(t, tb, testbed.A)), max(rssB, mustRSS(t, tb, testbed.B))
		if time.Since(start) >= dur-5*time.Second && last5 == 0 {
			last5 = got.Load()
		}
	}
	total := got.Load()
	close(stop)
	<-done
	tail := float64(total-last5) * 8 / 5
	limit := float64(rate) * 1460 / 1500
	t.Logf("%d MB in %v; last 5 s %.0f Mbit/s (%.0f%% of the payload limit); peak bytes in flight at B %d (BDP %.0f); peak RSS A %d MiB, B %d MiB",
		total>>20, dur, tail/1e6, 100*tail/limit, peak, bdp, rssA>>20, rssB>>20)
	// 60%, twice what the old caps allowed: room for the host's 2 cores.
	if float64(peak) < 0.6*bdp {
		t.Errorf("bytes in flight peaked at %d, want at least 60%% of the %.0f-byte BDP", peak, bdp)
	}
}
