package e2e

// Benchmarks, not tests: single-flow throughput through the tunnel over an
// unthrottled veth in each direction, with the endpoints' CPU seconds per
// GB, beside kernel TCP over the same veth. Run as root:
//
//	go test -run '^$' -bench Veth -benchtime 1x ./cmd/internal/e2e/

import (
	"io"
	"net"
	"os"
	"testing"
	"time"

	"scpsvpn/cmd/internal/testbed"
	"scpsvpn/cmd/internal/testenv"
)

// cpuSeconds is both endpoints' CPU time (user and system), 0 if unknown.
func cpuSeconds(tb *testbed.Testbed) float64 {
	a, _ := tb.CPUSeconds(testbed.A)
	b, _ := tb.CPUSeconds(testbed.B)
	return a + b
}

// pushFor sends from client to server for d and returns bytes/second.
func pushFor(b *testing.B, tb *testbed.Testbed, from, to testbed.Side, srvAddr string, d time.Duration) float64 {
	ln, err := tb.Listen(to, "tcp", srvAddr)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- 0
			return
		}
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		got <- n
	}()
	c, err := tb.Dial(from, "tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 256<<10)
	start := time.Now()
	for time.Since(start) < d {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	closeWrite(c)
	n := <-got
	c.Close()
	return float64(n) / time.Since(start).Seconds()
}

func BenchmarkVethThroughput(b *testing.B) {
	testenv.RequireRoot(b, "network namespaces, TUN")
	cfg := testbed.Config{Endpoints: testbed.Endpoints{Binary: binary, LogLevel: "info"}}
	if cc := os.Getenv("SCPSVPN_BENCH_CC"); cc != "" { // compare controllers
		cfg.PeerLinkA = "congestion = \"" + cc + "\""
		cfg.PeerLinkB = cfg.PeerLinkA
	}
	tb, err := testbed.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer tb.Close()
	for _, s := range []testbed.Side{testbed.A, testbed.B} {
		if err := tb.StartEndpoint(s); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(time.Second)
	const d = 10 * time.Second
	for i := 0; i < b.N; i++ {
		for _, dir := range []struct {
			name     string
			from, to testbed.Side
		}{{"A-to-B", testbed.A, testbed.B}, {"B-to-A", testbed.B, testbed.A}} {
			// Kernel TCP straight over the veth underlay.
			kr := pushFor(b, tb, dir.from, dir.to, net.JoinHostPort(tb.Site(dir.to).Underlay.Addr().String(), "0"), d)
			// Through both endpoints.
			c0 := cpuSeconds(tb)
			t0 := time.Now()
			sr := pushFor(b, tb, dir.from, dir.to, hostPort(tb.Site(dir.to).TUN4, 0), d)
			c1 := cpuSeconds(tb)
			gb := sr * time.Since(t0).Seconds() / 1e9
			b.Logf("%s: kernel TCP %.0f Mbit/s; scpsvpn %.0f Mbit/s (%.2fx), endpoints %.1f CPU-s/GB",
				dir.name, kr*8/1e6, sr*8/1e6, sr/kr, (c1-c0)/gb)
			b.ReportMetric(sr*8/1e6, dir.name+"-Mbit/s")
		}
	}
}
