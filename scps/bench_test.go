package scps

// This file benchmarks a bulk transfer between two Sessions.

import (
	"io"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkSessionBulk moves bytes over one stream between two Sessions
// joined by an in-memory pipe that hands each packet straight to the
// peer's Input (no network, no loss): the cost of the transport itself.
func BenchmarkSessionBulk(b *testing.B) {
	// The peers are set once both exist; packets sent before that are
	// lost, as on a network.
	var pa, pb atomic.Pointer[Session]
	cfg := DefaultConfig()
	cfg.MaxPacketSize = 1400
	cfg.InitialRTT = time.Millisecond
	ca, cb := cfg, cfg
	ca.EvenStreams = true
	to := func(peer *atomic.Pointer[Session]) func([]Packet) {
		return func(p []Packet) {
			if s := peer.Load(); s != nil {
				for _, pkt := range p {
					s.Input(pkt.Number, pkt.Data)
				}
			}
		}
	}
	sa, err := NewSession(SessionConfig{Config: ca, Transmit: to(&pb)})
	if err != nil {
		b.Fatal(err)
	}
	sb, err := NewSession(SessionConfig{Config: cb, Transmit: to(&pa)})
	if err != nil {
		b.Fatal(err)
	}
	pa.Store(sa)
	pb.Store(sb)
	defer sa.Close()
	defer sb.Close()

	const chunk = 64 << 10
	buf := make([]byte, chunk)
	st, err := sa.OpenStream([]byte("bench"))
	if err != nil {
		b.Fatal(err)
	}
	got := make(chan int64, 1)
	go func() {
		ps, err := sb.AcceptStream(b.Context())
		if err != nil {
			got <- -1
			return
		}
		n, _ := io.Copy(io.Discard, ps)
		got <- n
	}()
	b.SetBytes(chunk)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := st.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	st.CloseWrite()
	n := <-got
	b.StopTimer()
	if n != int64(b.N)*chunk {
		b.Fatalf("received %d of %d", n, int64(b.N)*chunk)
	}
	s := sa.Stats()
	b.ReportMetric(float64(s.PacketsSent)/float64(b.N), "pkts/op")
	b.ReportMetric(float64(s.PacketsLost), "lost")
}
