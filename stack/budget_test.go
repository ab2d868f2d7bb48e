package stack

import (
	"net/netip"
	"testing"
	"time"
)

// dialCharged opens connection i and checks that the accepting side
// charged it a sixteenth of free (at least minConnBuffers) and fixed its
// buffers at half of that each, the send buffer at most sndBufMax and the
// receive buffer the rest; it takes the charge off free and returns both
// ends.
func dialCharged(t *testing.T, n *testNet, acc chan accepted, i int, free *int64) []*Conn {
	t.Helper()
	cc := dial(t, n.b, netip.AddrPortFrom(client4.Addr(), uint16(40000+i)), server4)
	sc := recvAccepted(t, acc).conn
	want := max(*free/budgetShareDiv, minConnBuffers)
	if sc.charge != want {
		t.Fatalf("connection %d charged %d, want %d", i, sc.charge, want)
	}
	snd := min(want/2, sndBufMax)
	if got := sc.ep.SocketOptions().GetReceiveBufferSize(); got != want-snd {
		t.Errorf("connection %d: receive buffer %d, want %d", i, got, want-snd)
	}
	if got := sc.ep.SocketOptions().GetSendBufferSize(); got != snd {
		t.Errorf("connection %d: send buffer %d, want %d", i, got, snd)
	}
	*free -= want
	return []*Conn{cc, sc}
}

// TestBufferBudget: connections share Config.BufferMemory: each takes a
// sixteenth of what is free (at least minConnBuffers), its buffers are
// fixed at that size, the total stays within the budget plus the floors,
// and closing gives it all back.
func TestBufferBudget(t *testing.T) {
	const budget = 2 << 20
	h, acc := acceptAll()
	n := newTestNet(t, Config{HandleTCP: h, BufferMemory: budget}, Config{})
	var conns []*Conn
	// A sixteenth is kept for packets held for SYN-cookie connections.
	connBudget := int64(budget - budget/cookieHeldShare)
	free := connBudget
	for i := range 40 {
		conns = append(conns, dialCharged(t, n, acc, i, &free)...)
	}
	if got := n.a.BufferCharged(); got > connBudget+40*minConnBuffers || got != connBudget-free {
		t.Errorf("charged %d for 40 connections, budget %d", got, budget)
	}
	for _, c := range conns {
		c.Close()
	}
	if !waitFor(5*time.Second, func() bool { return n.a.BufferCharged() == 0 }) {
		t.Errorf("after closing every connection %d bytes are still charged", n.a.BufferCharged())
	}
}

// TestBufferBudgetBounded: a large budget (a quarter of a big machine's
// memory) is shared as if it were maxConnBudget, so a thousand
// connections do not open a thousand large receive windows to the LAN.
func TestBufferBudgetBounded(t *testing.T) {
	h, acc := acceptAll()
	n := newTestNet(t, Config{HandleTCP: h, BufferMemory: 1 << 30}, Config{})
	free := int64(maxConnBudget)
	var conns []*Conn
	for i := range 20 {
		conns = append(conns, dialCharged(t, n, acc, i, &free)...)
	}
	for _, c := range conns {
		c.Close()
	}
}
