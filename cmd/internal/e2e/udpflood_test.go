package e2e

// Issue 10.5: a saturating UDP flood from one LAN host beside TCP. TCP must
// keep at least half the link, and its request latency p95 stay within
// twice the figure without the flood.

import (
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"scpsvpn/cmd/internal/linkemu"
	"scpsvpn/cmd/internal/testbed"
)

// udpFlood sends 1200-byte datagrams from side to addr at bps until stop
// is closed.
func udpFlood(t *testing.T, tb *testbed.Testbed, side testbed.Side, addr string, bps int, stop <-chan struct{}) {
	t.Helper()
	c, err := tb.Dial(side, "udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer c.Close()
		p := make([]byte, 1200)
		paced(bps/8/1200, stop, func() { c.Write(p) })
	}()
}

// paced calls send perSecond times a second, in bursts every 5 ms, until
// stop is closed, and returns how many times it did.
func paced(perSecond int, stop <-chan struct{}, send func()) int {
	const tick = 5 * time.Millisecond
	per := perSecond * int(tick) / int(time.Second)
	tk := time.NewTicker(tick)
	defer tk.Stop()
	start, n := time.Now(), 0
	for {
		select {
		case <-stop:
			return n
		case now := <-tk.C:
			// Catch up after a late tick, so the rate holds.
			for due := int(now.Sub(start)/tick+1) * per; n < due; n++ {
				send()
			}
		}
	}
}

// tcpPhase runs a bulk upload from A to sink for d and, beside it, a
// 100-byte request answered by echo every 100 ms; it returns the upload's
// goodput in bit/s and the requests' latencies.
func tcpPhase(t *testing.T, tb *testbed.Testbed, sink, echo string, received *atomic.Int64, d time.Duration) (float64, []time.Duration) {
	t.Helper()
	bulk, err := tb.Dial(testbed.A, "tcp", sink)
	if err != nil {
		t.Fatal(err)
	}
	defer bulk.Close()
	req, err := tb.Dial(testbed.A, "tcp", echo)
	if err != nil {
		t.Fatal(err)
	}
	defer req.Close()
	stop := make(chan struct{})
	go func() {
		b := make([]byte, 32<<10)
		for {
			select {
			case <-stop:
				return
			default:
			}
			bulk.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := bulk.Write(b); err != nil && !isTimeout(err) {
				return
			}
		}
	}()
	defer close(stop)
	time.Sleep(2 * time.Second) // past slow start
	from, start := received.Load(), time.Now()
	var lat []time.Duration
	msg, got := make([]byte, 100), make([]byte, 100)
	for time.Since(start) < d {
		t0 := time.Now()
		req.SetDeadline(t0.Add(10 * time.Second))
		if _, err := req.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(req, got); err != nil {
			t.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		time.Sleep(100 * time.Millisecond)
	}
	return float64(received.Load()-from) * 8 / time.Since(start).Seconds(), lat
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestUDPFloodBesideTCP: over a 10 Mbit/s link (100 ms RTT, rates
// configured), a LAN host at A floods UDP toward B at 20 Mbit/s while a
// bulk upload and requests run from A to B. TCP keeps at least half the
// link, and the requests' p95 latency stays within twice the figure
// without the flood.
//
// Opt-in (SCPSVPN_UDPFLOOD=1): measured at 54% of the link here, too near
// the bound for a loaded CI machine (docs/reliability.md, issue 10.5).
func TestUDPFloodBesideTCP(t *testing.T) {
	if os.Getenv("SCPSVPN_UDPFLOOD") == "" {
		t.Skip("a 20 Mbit/s UDP flood beside TCP: set SCPSVPN_UDPFLOOD=1 to run it")
	}
	const rate = 10_000_000
	dir := linkemu.Dir{Rate: rate, Delay: 50 * time.Millisecond}
	link := "rtt = \"100ms\"\nup = \"10Mbit\"\ndown = \"10Mbit\"\n"
	tb := twoSites(t, testbed.Config{Kind: testbed.Emulated, Link: linkemu.Options{Fwd: dir, Ret: dir}, PeerLinkA: link, PeerLinkB: link})

	var received atomic.Int64
	sink, err := tb.Listen(testbed.B, "tcp", hostPort(tb.B.TUN4, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	go serveEach(sink, func(c net.Conn) {
		defer c.Close()
		b := make([]byte, 64<<10)
		for {
			n, err := c.Read(b)
			received.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	echo := listenEcho(t, tb, testbed.B)
	udp, err := tb.ListenPacket(testbed.B, "udp", hostPort(tb.B.TUN4, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	var udpBytes atomic.Int64
	go func() {
		b := make([]byte, 2048)
		for {
			n, _, err := udp.ReadFrom(b)
			if err != nil {
				return
			}
			udpBytes.Add(int64(n))
		}
	}()

	const d = 8 * time.Second
	tcp0, lat0 := tcpPhase(t, tb, sink.Addr().String(), echo.Addr().String(), &received, d)
	stop := make(chan struct{})
	udpFlood(t, tb, testbed.A, udp.LocalAddr().String(), 2*rate, stop)
	u0, start := udpBytes.Load(), time.Now()
	tcp1, lat1 := tcpPhase(t, tb, sink.Addr().String(), echo.Addr().String(), &received, d)
	udpRate := float64(udpBytes.Load()-u0) * 8 / time.Since(start).Seconds()
	close(stop)

	t.Logf("without the flood: TCP %.2f Mbit/s, request p95 %v (%d requests)", tcp0/1e6, p95(lat0).Round(time.Millisecond), len(lat0))
	t.Logf("with a 20 Mbit/s UDP flood: TCP %.2f Mbit/s (%.0f%% of the link), UDP delivered %.2f Mbit/s, request p95 %v (%d requests)",
		tcp1/1e6, 100*tcp1/rate, udpRate/1e6, p95(lat1).Round(time.Millisecond), len(lat1))
	if tcp1 < rate/2 {
		t.Errorf("TCP got %.2f Mbit/s under the flood, want at least half the %d Mbit/s link", tcp1/1e6, rate/1_000_000)
	}
	if p95(lat1) > 2*p95(lat0) {
		t.Errorf("request p95 %v under the flood, %v without", p95(lat1), p95(lat0))
	}
}
