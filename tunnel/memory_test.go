package tunnel

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"scpsvpn/configs"
	"scpsvpn/peers"
	"scpsvpn/scps"
)

// TestMemorySplit: the netstack takes a quarter of the budget, each
// configured peer an even part of the rest, its receive queue what the
// association does not need (up to rxQueueMax); the parts add up to no
// more than the budget; no budget stays no budget.
func TestMemorySplit(t *testing.T) {
	const mib = 1 << 20
	cases := []struct {
		total int64
		peers int
		want  peerMemory
	}{
		{256 * mib, 1, peerMemory{192*mib - rxQueueMax, rxQueueMax}},
		{256 * mib, 4, peerMemory{48*mib - rxQueueMax, rxQueueMax}},
		// The least budget 20 peers take: associations get what the
		// transport needs, receive queues the rest of each part.
		{configs.MemoryFor(20), 20, peerMemory{scps.MinMemory, configs.PeerMemory(configs.MemoryFor(20), 20) - scps.MinMemory}},
		{0, 3, peerMemory{0, rxQueueMax}},
	}
	for _, c := range cases {
		got := splitPeerMemory(c.total, c.peers)
		if got != c.want {
			t.Errorf("splitPeerMemory(%d MiB, %d peers) = %+v, want %+v", c.total/mib, c.peers, got, c.want)
		}
		if c.total == 0 {
			continue
		}
		if sum := stackMemory(c.total) + int64(c.peers)*(int64(got.assoc)+got.rxQueue); sum > c.total {
			t.Errorf("%d MiB, %d peers: the parts add up to %d", c.total/mib, c.peers, sum)
		}
		if got.assoc < scps.MinMemory {
			t.Errorf("%d MiB, %d peers: an association gets %d, less than the transport needs", c.total/mib, c.peers, got.assoc)
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

// TestReloadSplitsMemory: a reload from 1 peer to 10 splits the budget
// anew for every peer, the one kept included, whose running association
// takes its smaller part; the parts then add up to no more than
// [interface] memory (before, the kept peer kept its 1-peer part: 1.4
// times the budget in all). A reload to more peers than the budget holds
// is refused, naming the key.
func TestReloadSplitsMemory(t *testing.T) {
	const total = 256 << 20
	_, a, b := twoSitesWith(t, "memory = \"256MiB\"\n")
	b.echo(7)
	cfg := a.config(a.peer(b))
	if got, want := a.assoc(b).memory.Load(), splitPeerMemory(total, 1).assoc; got != want {
		t.Fatalf("one peer: its association has %d, want %d", got, want)
	}
	withPeers := func(n int) *configs.Config {
		c := *cfg
		c.Peers = append([]configs.PeerConfig(nil), cfg.Peers...)
		for i := len(c.Peers); i < n; i++ {
			k, err := peers.GeneratePrivateKey()
			if err != nil {
				t.Fatal(err)
			}
			c.Peers = append(c.Peers, configs.PeerConfig{Name: fmt.Sprintf("extra%d", i), PublicKey: k.PublicKey(),
				Subnets: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 100, byte(i), 0}), 24)}, Link: cfg.Peers[0].Link})
		}
		return &c
	}
	if err := a.ep.Reload(withPeers(10)); err != nil {
		t.Fatalf("reload to 10 peers: %v", err)
	}
	want := splitPeerMemory(total, 10)
	sum := stackMemory(total)
	a.ep.mu.Lock()
	for name, as := range a.ep.assocs {
		got := peerMemory{as.memory.Load(), as.rx.limit.Load()}
		if got != want {
			t.Errorf("peer %s after the reload: %+v, want %+v", name, got, want)
		}
		sum += int64(got.assoc) + got.rxQueue
	}
	a.ep.mu.Unlock()
	if sum > total {
		t.Errorf("the parts add up to %d, over the budget %d", sum, total)
	}
	if got := a.assoc(b).cur.Load().sess.Config().Memory; got != want.assoc {
		t.Errorf("b's running association has a budget of %d, want %d", got, want.assoc)
	}
	echoFrom(t, a, "10.1.0.7:0", "10.2.0.5:7")

	err := a.ep.Reload(withPeers(19))
	if err == nil || !strings.Contains(err.Error(), "interface.memory") {
		t.Errorf("reload to 19 peers with 256 MiB: %v, want a refusal naming interface.memory", err)
	}
	t.Logf("reload to 19 peers: %v", err)
}
