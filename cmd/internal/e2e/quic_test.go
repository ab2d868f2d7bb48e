package e2e

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"scpsvpn/cmd/internal/testbed"
)

// TestQuicFallback: with the default quic policy a client's UDP datagram
// to port 443 at the far site is refused at once (ECONNREFUSED, from the
// endpoint's ICMP port unreachable), so a browser goes over to TCP without
// a timeout; nothing reaches the server. A datagram to another port
// (DNS-like) still crosses and is answered.
func TestQuicFallback(t *testing.T) {
	tb := twoSites(t, testbed.Config{})
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			srv := fam.addr(tb.B)
			quic, err := tb.ListenPacket(testbed.B, "udp", hostPort(srv, 443))
			if err != nil {
				t.Fatal(err)
			}
			defer quic.Close()
			got := make(chan struct{}, 1)
			go func() {
				buf := make([]byte, 2048)
				if _, _, err := quic.ReadFrom(buf); err == nil {
					got <- struct{}{}
				}
			}()
			c, err := tb.Dial(testbed.A, "udp", hostPort(srv, 443))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			if _, err := c.Write([]byte("quic initial")); err != nil {
				t.Fatal(err)
			}
			// A lost datagram is never refused: only the endpoint's answer
			// makes this read fail with ECONNREFUSED.
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err = c.Read(make([]byte, 64))
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("read after a datagram to port 443: %v, want ECONNREFUSED", err)
			}
			t.Logf("refused after %v", time.Since(start))
			select {
			case <-got:
				t.Fatal("the datagram to port 443 reached the server")
			case <-time.After(200 * time.Millisecond):
			}
			udpCrosses(t, tb, srv)
		})
	}
	if k := countersOf(t, tb, testbed.A); k.QuicRefused != 2 {
		t.Errorf("site A refused %d QUIC datagrams, want 2", k.QuicRefused)
	}
}

// udpCrosses checks that a datagram from site A to a port of srv other
// than QUIC's crosses and is answered.
func udpCrosses(t *testing.T, tb *testbed.Testbed, srv netip.Addr) {
	t.Helper()
	pc, err := tb.ListenPacket(testbed.B, "udp", hostPort(srv, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go udpEcho(pc)
	c, err := tb.Dial(testbed.A, "udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 64)
	for try := 0; ; try++ {
		c.Write([]byte("dns query"))
		c.SetReadDeadline(time.Now().Add(time.Second))
		n, err := c.Read(buf)
		if err == nil && string(buf[:n]) == "DNS QUERY" {
			return
		}
		if try == 2 {
			t.Fatalf("no answer to a datagram to %v: %v", pc.LocalAddr(), err)
		}
	}
}
