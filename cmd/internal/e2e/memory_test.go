package e2e

// The memory budget through the real binary (docs/reliability.md, "A
// memory budget").

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"scpsvpn/cmd/internal/linkemu"
	"scpsvpn/cmd/internal/testbed"
	"scpsvpn/configs"
)

var (
	stalledUploads = flag.Int("stalled-uploads", 200, "uploads TestMemoryBudget keeps open (the target is measured with 2000)")
	memoryBudget   = flag.String("memory", "64MiB", "[interface] memory of both sites in TestMemoryBudget (the target is measured with 256MiB)")
)

// TestMemoryBudget: over GEO 10/2 Mbit/s, uploads from site A toward a
// server that never reads; the clients write as fast as they are let.
// Each site's RSS must stay within its [interface] memory plus 64 MiB for
// the program itself, and a new download must still start (first byte)
// within 2 RTTs: twice the link's RTT, or twice a download's first byte
// before the uploads if that is longer (a loaded machine's own delay,
// measured in the same run). Before the budget, 2,000 such uploads drove
// site A to 1.4 GiB.
func TestMemoryBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("about 40 s over an emulated GEO link")
	}
	budget, err := configs.ParseSize(*memoryBudget)
	if err != nil {
		t.Fatal(err)
	}
	const rtt = 600 * time.Millisecond
	n := *stalledUploads
	iface := `memory = "` + *memoryBudget + `"`
	tb := twoSites(t, testbed.Config{
		Kind: testbed.Emulated,
		Link: linkemu.Options{
			Fwd:  linkemu.Dir{Rate: 2_000_000, Delay: rtt / 2, Queue: 2_000_000 / 8 * 6 / 10},
			Ret:  linkemu.Dir{Rate: 10_000_000, Delay: rtt / 2, Queue: 10_000_000 / 8 * 6 / 10},
			Seed: 1,
		},
		InterfaceA: iface,
		InterfaceB: iface,
		Endpoints: testbed.Endpoints{
			LogLevel: "info",
		},
	})
	// A new download's first byte, first on the idle link.
	ln := listenZeros(t, tb)
	firstByte := func(what string) time.Duration {
		t0 := time.Now()
		c, err := tb.Dial(testbed.A, "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			t.Fatalf("new download %s: %v", what, err)
		}
		return time.Since(t0)
	}
	idle := firstByte("on the idle link")

	// The server accepts and never reads.
	sink, err := tb.Listen(testbed.B, "tcp", hostPort(tb.B.TUN4, 0))
	if err != nil {
		t.Fatal(err)
	}
	var held sync.Mutex
	var servers []net.Conn
	go serveEach(sink, func(c net.Conn) {
		held.Lock()
		servers = append(servers, c)
		held.Unlock()
	})
	defer func() {
		sink.Close()
		held.Lock()
		for _, c := range servers {
			c.Close()
		}
		held.Unlock()
	}()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	for i := range n {
		c, err := tb.Dial(testbed.A, "tcp", sink.Addr().String())
		if err != nil {
			t.Fatalf("upload %d: %v", i, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			buf := make([]byte, 64<<10)
			for {
				select {
				case <-stop:
					return
				default:
				}
				c.SetWriteDeadline(time.Now().Add(time.Second))
				if _, err := c.Write(buf); err != nil {
					var ne net.Error
					if errors.As(err, &ne) && ne.Timeout() {
						continue
					}
					return
				}
			}
		}()
	}
	// The uploads fill what they may: sample both sites' RSS meanwhile.
	var peakA, peakB int64
	sample := func() {
		peakA, peakB = max(peakA, mustRSS(t, tb, testbed.A)), max(peakB, mustRSS(t, tb, testbed.B))
	}
	for start := time.Now(); time.Since(start) < 20*time.Second; {
		time.Sleep(time.Second)
		sample()
	}
	st := assocStats(t, tb, testbed.A)
	t.Logf("%d stalled uploads: streams open %d, buffered at A %d MiB; peak RSS A %d MiB, B %d MiB (budget %d MiB)",
		n, st.StreamsOpen, st.BufferedBytes>>20, peakA>>20, peakB>>20, budget>>20)

	first := firstByte(fmt.Sprintf("beside %d stalled uploads", n))
	sample()
	t.Logf("new download's first byte after %v (%.1f RTT; %v on the idle link); peak RSS A %d MiB, B %d MiB",
		first.Round(time.Millisecond), first.Seconds()/rtt.Seconds(), idle.Round(time.Millisecond), peakA>>20, peakB>>20)
	if bound := 2 * max(rtt, idle); first > bound {
		t.Errorf("new download's first byte after %v, want within 2 RTTs (%v)", first, bound)
	}
	if limit := budget + 64<<20; peakA > limit || peakB > limit {
		t.Errorf("peak RSS A %d MiB, B %d MiB: over the budget plus 64 MiB (%d MiB)", peakA>>20, peakB>>20, limit>>20)
	}
}
