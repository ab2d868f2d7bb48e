package stack

import (
	"net/netip"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// synFloodStack is a stack whose handler accepts every request, with a
// small handshake bound; accepted reports the clients whose handshake
// finished.
func synFloodStack(t *testing.T, out *captured) (*Stack, chan netip.AddrPort) {
	t.Helper()
	accepted := make(chan netip.AddrPort, 16)
	s, err := New(Config{MTU: 1400, MaxInFlight: 64, Output: out.output, Logger: testLogger(),
		HandleTCP: func(r *TCPRequest) {
			go func() {
				if c, err := r.Accept(); err == nil {
					accepted <- r.Src
					c.Close()
				}
			}()
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, accepted
}

// handshake sends from's SYN, waits for the SYN-ACK, sends the ACK and
// waits until the stack accepted the connection.
func handshake(t *testing.T, s *Stack, out *captured, accepted chan netip.AddrPort, from netip.AddrPort, flood func()) {
	t.Helper()
	s.Inject(buildTCP(from, server4, header.TCPFlagSyn, 5000, nil))
	var synAck []byte
	if !waitFor(10*time.Second, func() bool {
		for _, p := range out.all() {
			if src, dst, flags, ok := parseTCP(p); ok && src == server4 && dst == from && flags == header.TCPFlagSyn|header.TCPFlagAck {
				synAck = p
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no SYN-ACK to %v (%+v)", from, s.Stats())
	}
	flood() // the flood goes on while the client's ACK is on its way
	seq := header.TCP(header.IPv4(synAck).Payload()).SequenceNumber()
	s.Inject(buildTCPAck(from, server4, header.TCPFlagAck, 5001, seq+1, nil))
	select {
	case got := <-accepted:
		if got != from {
			t.Fatalf("accepted %v, want %v", got, from)
		}
	case <-time.After(hangGuard):
		t.Fatalf("the handshake of %v did not finish (%+v)", from, s.Stats())
	}
}

// spoofed returns SYNs from n distinct addresses that never answer.
func spoofed(s *Stack, base byte, n int) {
	for i := range n {
		src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, base, byte(i >> 8), byte(i)}), 40000)
		s.Inject(buildTCP(src, server4, header.TCPFlagSyn, uint32(i)*7919, nil))
	}
}

// TestSYNFloodOldestGivesWay: with every handshake slot held by spoofed
// SYNs that will never be answered, a real client's SYN still gets its
// SYN-ACK (a cookie once the guard is full; before that, the oldest
// spoofed handshake gives way, by an RST gVisor takes as the client's),
// and its handshake finishes while the flood goes on. Before the guard,
// gVisor dropped the real SYN silently until the spoofed handshakes timed
// out, two minutes later.
func TestSYNFloodOldestGivesWay(t *testing.T) {
	out := &captured{}
	s, accepted := synFloodStack(t, out)
	spoofed(s, 66, 200)
	// A burst outruns the RSTs, so gVisor drops some of it: every spoofed
	// SYN is either dropped, answered by a cookie or, once more than the
	// bound came, evicted.
	settled := func(n uint64) func() bool {
		return func() bool {
			st := s.Stats()
			return st.SYNEvicted+st.InFlightDrops+st.CookiesSent >= n && st.FlowsActive <= s.guard.limit
		}
	}
	if !waitFor(10*time.Second, settled(200-uint64(s.guard.limit))) {
		t.Fatalf("spoofed handshakes were not evicted: %+v", s.Stats())
	}
	handshake(t, s, out, accepted, client4, func() { spoofed(s, 67, s.guard.limit/2) })
	t.Logf("%+v", s.Stats())
}

// TestSYNFloodOneSourceChurnsOnlyItself: one address flooding SYNs (no
// spoofing) evicts only its own handshakes: another client's handshake in
// progress survives the flood.
func TestSYNFloodOneSourceChurnsOnlyItself(t *testing.T) {
	out := &captured{}
	s, accepted := synFloodStack(t, out)
	flooder := netip.MustParseAddr("10.68.0.9")
	handshake(t, s, out, accepted, client4, func() {
		for i := range 300 {
			s.Inject(buildTCP(netip.AddrPortFrom(flooder, uint16(1024+i)), server4, header.TCPFlagSyn, 1, nil))
		}
		if !waitFor(10*time.Second, func() bool {
			st := s.Stats()
			return st.SYNEvicted+st.InFlightDrops+st.CookiesSent >= 300-uint64(s.guard.perSrc)
		}) {
			t.Fatalf("the flooder's handshakes were not evicted: %+v", s.Stats())
		}
	})
	s.guard.mu.Lock()
	n := s.guard.bySrc[flooder]
	s.guard.mu.Unlock()
	if n > s.guard.perSrc {
		t.Errorf("the flooder holds %d handshakes, its bound is %d", n, s.guard.perSrc)
	}
}

// TestEvictedRequestNotReset: a request the handler has not accepted yet
// (one host's burst of connections outran the endpoint) that gives way to
// a newer SYN of the same host is dropped, not refused: its client sends
// the SYN again and connects, where an RST failed its connect().
func TestEvictedRequestNotReset(t *testing.T) {
	out := &captured{}
	s, err := New(Config{MTU: 1400, MaxInFlight: 64, Output: out.output, Logger: testLogger(),
		HandleTCP: func(r *TCPRequest) {}}) // never accepted in time
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	n := s.guard.perSrc + 4
	for i := range n {
		s.Inject(buildTCP(netip.AddrPortFrom(client4.Addr(), uint16(40000+i)), server4, header.TCPFlagSyn, 5000, nil))
	}
	if !waitFor(10*time.Second, func() bool { return s.Stats().SYNEvicted >= 4 }) {
		t.Fatalf("no handshake gave way: %+v", s.Stats())
	}
	for _, p := range out.all() {
		if src, dst, flags, ok := parseTCP(p); ok && src == server4 && dst.Addr() == client4.Addr() && flags&header.TCPFlagRst != 0 {
			t.Errorf("the client's SYN from port %d was answered by an RST", dst.Port())
		}
	}
}

// TestBurstSparesHandshakesInProgress: one host opens more connections
// at once than its bound while the handshakes of the first are in
// progress (their SYN-ACKs sent, the client's ACKs on their way through a
// loaded endpoint): the newer SYNs give way, not the handshakes the client
// may already hold established, and every one of those finishes. Evicted
// by an RST as if from the client, they failed: the client's connection
// was reset after its ACK (docs/manyflows.md).
func TestBurstSparesHandshakesInProgress(t *testing.T) {
	out := &captured{}
	s, accepted := synFloodStack(t, out)
	n := s.guard.perSrc
	from := func(i int) netip.AddrPort { return netip.AddrPortFrom(client4.Addr(), uint16(40000+i)) }
	for i := range n {
		s.Inject(buildTCP(from(i), server4, header.TCPFlagSyn, 5000, nil))
	}
	synAcks := map[netip.AddrPort]uint32{}
	if !waitFor(10*time.Second, func() bool {
		for _, p := range out.all() {
			if src, dst, flags, ok := parseTCP(p); ok && src == server4 && flags == header.TCPFlagSyn|header.TCPFlagAck {
				synAcks[dst] = header.TCP(header.IPv4(p).Payload()).SequenceNumber()
			}
		}
		return len(synAcks) == n
	}) {
		t.Fatalf("%d SYN-ACKs of %d (%+v)", len(synAcks), n, s.Stats())
	}
	// The burst goes on: more SYNs of the same host than its bound.
	for i := range 4 {
		s.Inject(buildTCP(from(n+i), server4, header.TCPFlagSyn, 5000, nil))
	}
	if !waitFor(10*time.Second, func() bool { return s.Stats().SYNEvicted >= 4 }) {
		t.Fatalf("nothing gave way: %+v", s.Stats())
	}
	for i := range n {
		s.Inject(buildTCPAck(from(i), server4, header.TCPFlagAck, 5001, synAcks[from(i)]+1, nil))
	}
	got := 0
	for got < n {
		select {
		case <-accepted:
			got++
		case <-time.After(hangGuard):
			t.Fatalf("%d of the %d handshakes in progress finished (%+v)", got, n, s.Stats())
		}
	}
	for _, p := range out.all() {
		if src, dst, flags, ok := parseTCP(p); ok && src == server4 && flags&header.TCPFlagRst != 0 && dst.Port() < uint16(40000+n) {
			t.Errorf("the connection from port %d was reset", dst.Port())
		}
	}
}
