package tunnel

import (
	"testing"

	"scpsvpn/scps"
)

// TestMemorySplit: the netstack takes a quarter of the budget, each
// configured peer's association an even part of the rest but never less
// than the transport needs; no budget stays no budget.
func TestMemorySplit(t *testing.T) {
	const mib = 1 << 20
	cases := []struct {
		total int64
		peers int
		want  uint64
	}{
		{256 * mib, 1, 192 * mib},
		{256 * mib, 4, 48 * mib},
		{256 * mib, 1000, scps.MinMemory},
		{0, 3, 0},
	}
	for _, c := range cases {
		if got := assocMemory(c.total, c.peers); got != c.want {
			t.Errorf("assocMemory(%d MiB, %d peers) = %d, want %d", c.total/mib, c.peers, got, c.want)
		}
	}
	if got := stackMemory(256 * mib); got != 64*mib {
		t.Errorf("stackMemory(256 MiB) = %d", got)
	}
	if copyBufPool(256*mib, 16384) != &smallCopyBufs || copyBufPool(4<<30, 16384) != &largeCopyBufs || copyBufPool(0, 16384) != &largeCopyBufs {
		t.Error("copy buffers: small ones for a small budget per flow, large ones otherwise")
	}
}

// TestPeerStreams: a peer may open as many streams as the endpoint
// carries flows, never fewer than the transport's default nor more than
// it accepts.
func TestPeerStreams(t *testing.T) {
	for _, c := range []struct{ flows, want int }{
		{16384, 16384},
		{100, scps.DefaultMaxStreams},
		{1 << 20, 1 << 20},
	} {
		got := peerStreams(c.flows)
		if got != c.want {
			t.Errorf("peerStreams(%d) = %d, want %d", c.flows, got, c.want)
		}
		cfg := scps.DefaultConfig()
		cfg.MaxStreams = got
		if err := cfg.Validate(); err != nil {
			t.Errorf("max_flows %d: %v", c.flows, err)
		}
	}
}
