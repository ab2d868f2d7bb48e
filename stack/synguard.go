// This file owns the SYN guard: local handshakes in progress are bounded,
// in all and per client address, and when a new SYN finds the bound reached
// the oldest handshake gives way (Linux drops the oldest SYN-RECV likewise),
// but for one whose SYN-ACK went out less than handshakeGrace ago: then the
// new SYN gives way, and its client sends it again.
//
// Why: a handshake holds one of gVisor's MaxInFlight slots from the SYN
// until the client's ACK, and gVisor retries its SYN-ACK for about two
// minutes. Spoofed SYNs never send that ACK, so 10,000 of them a second
// filled every slot and gVisor dropped real clients' SYNs silently; they
// retried after a second or more. A real client's ACK follows the SYN-ACK
// within a LAN round trip, far sooner than a flood can push its handshake
// out of the queue, so the real handshakes finish and the spoofed ones are
// the ones that give way. Addresses cannot tell spoofed sources from real
// ones, so the bound per address (half the slots) only stops one unspoofed
// host from churning everyone else's handshakes; a real host opening many
// connections at once stays well inside it.
//
// Once the guard is full, new SYNs are not given to gVisor at all: they are
// answered by SYN cookies (syncookie.go), and the handshakes left in gVisor
// are ended once stale. Eviction remains for the SYNs already on their way
// to the forwarder when the guard filled.

package stack

import (
	"container/list"
	"net/netip"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

// synGuard tracks the TCPRequests whose handshake is in progress.
type synGuard struct {
	mu     sync.Mutex
	limit  int // handshakes at once; below gVisor's MaxInFlight
	perSrc int // of them from one client address
	// isn holds the sequence number of SYNs injected and not yet handed to
	// handleForward: an evicted handshake is ended by an RST from the
	// client's side, which must carry the client's next sequence number.
	isn   map[gstack.TransportEndpointID]uint32
	order list.List // *TCPRequest, oldest first
	bySrc map[netip.Addr]int
}

func newSYNGuard(maxInFlight int) *synGuard {
	// gVisor frees a slot only once the evicted handshake has processed
	// its RST, which under a flood takes a while on a busy machine: keep
	// three quarters of the slots as headroom for evicted handshakes.
	limit := max(1, maxInFlight/4)
	return &synGuard{
		limit:  limit,
		perSrc: max(1, limit/2),
		isn:    map[gstack.TransportEndpointID]uint32{},
		bySrc:  map[netip.Addr]int{},
	}
}

// seen notes an injected SYN's sequence number.
func (g *synGuard) seen(id gstack.TransportEndpointID, seq uint32) {
	g.mu.Lock()
	// SYNs gVisor never forwards (retransmissions of one in progress, drops)
	// leave entries behind: forget them all now and then.
	if len(g.isn) >= max(4096, 16*g.limit) {
		clear(g.isn)
	}
	g.isn[id] = seq
	g.mu.Unlock()
}

// staleHandshake is the age at which, while cookies answer new SYNs, a
// handshake gVisor still holds is ended: a LAN client's ACK comes within
// milliseconds, so what is left is the flood's, holding the guard full
// (and cookies on) until gVisor gives up on it minutes later.
const staleHandshake = 3 * time.Second

// full reports whether the handshakes in progress reached the bound: new
// SYNs then get cookies. SYNs on their way to handleForward are not
// counted yet; admit's eviction covers that overshoot.
func (g *synGuard) full() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.order.Len() >= g.limit
}

// stale stops tracking, and returns, up to n of the oldest handshakes
// admitted before t.
func (g *synGuard) stale(t time.Time, n int) []*TCPRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*TCPRequest
	for len(out) < n {
		e := g.order.Front()
		if e == nil || !e.Value.(*TCPRequest).admitted.Before(t) {
			break
		}
		r := e.Value.(*TCPRequest)
		g.removeLocked(r)
		out = append(out, r)
	}
	return out
}

// handshakeGrace is how long a handshake in Accept's local handshake (its
// SYN-ACK sent) is spared by the guard: its client may have its SYN-ACK
// and have answered, and an RST then fails a connection the client holds
// established. A client's ACK comes within milliseconds on a LAN and
// within this through a loaded host; a flood's never comes, and its
// handshakes give way after it. Evicted at once, the handshakes of one
// host's burst of a thousand connections whose ACKs waited behind the
// burst in a loaded endpoint were reset: 70 of 1,000 downloads failed
// (docs/manyflows.md).
const handshakeGrace = time.Second

// evictable reports whether v may give way at now: not in Accept's local
// handshake yet (dropped, its client sends the SYN again), or in it for
// handshakeGrace.
func (v *TCPRequest) evictable(now time.Time) bool {
	at := v.acceptAt.Load()
	return at == 0 || now.Sub(time.Unix(0, at)) >= handshakeGrace
}

// admit starts tracking r and returns the handshake that must give way
// for it: the oldest evictable one of its own address if that address is
// at its bound, else the oldest evictable one of all if the guard is
// full. If none is evictable, r itself gives way (it is returned and not
// tracked), unless force (a cookie flow's replayed SYN, whose client holds
// its connection already): then the oldest goes.
func (g *synGuard) admit(r *TCPRequest, force bool) (evict *TCPRequest) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r.isn, r.hasISN = g.isn[r.id]
	delete(g.isn, r.id)
	src := r.Src.Addr()
	now := time.Now()
	pick := func(match func(*TCPRequest) bool) *TCPRequest {
		var oldest *TCPRequest
		for e := g.order.Front(); e != nil; e = e.Next() {
			v := e.Value.(*TCPRequest)
			if !match(v) {
				continue
			}
			if oldest == nil {
				oldest = v
			}
			if v.evictable(now) {
				return v
			}
		}
		if force {
			return oldest
		}
		return r
	}
	if g.bySrc[src] >= g.perSrc {
		evict = pick(func(v *TCPRequest) bool { return v.Src.Addr() == src })
	} else if g.order.Len() >= g.limit {
		evict = pick(func(*TCPRequest) bool { return true })
	}
	if evict == r {
		return r
	}
	if evict != nil {
		g.removeLocked(evict)
	}
	r.admitted = now
	r.guardElem = g.order.PushBack(r)
	g.bySrc[src]++
	return evict
}

// done stops tracking r (its handshake is over); a no-op if it was not
// tracked or already evicted.
func (g *synGuard) done(r *TCPRequest) {
	g.mu.Lock()
	g.removeLocked(r)
	g.mu.Unlock()
}

func (g *synGuard) removeLocked(r *TCPRequest) {
	if r.guardElem == nil {
		return
	}
	g.order.Remove(r.guardElem)
	r.guardElem = nil
	src := r.Src.Addr()
	if g.bySrc[src]--; g.bySrc[src] <= 0 {
		delete(g.bySrc, src)
	}
}

// evict ends r's handshake to free its slot: a request not yet accepted
// is dropped without an answer, so its client sends its SYN again a second
// later (a real one, whose connection the endpoint had not got to yet
// among a burst of a thousand from one host, then connects instead of
// being reset); one in its local handshake gets an RST as if from the
// client, which gVisor's handshake takes as the client's refusal. The
// handshake's endpoint may not exist yet (Accept is on its way into
// gVisor): then the RST is tried again a little later, a few times.
func (s *Stack) evict(r *TCPRequest) {
	s.synEvicted.Add(1)
	if r.complete(false) || !r.hasISN {
		return // dropped; or without an ISN the handshake runs out on its own
	}
	if s.resetHandshake(r) {
		return
	}
	// Close waits for the retries.
	s.goBackground(func() {
		for _, d := range []time.Duration{2 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond} {
			time.Sleep(d)
			if r.handshakeOver.Load() || s.closed.Load() || s.resetHandshake(r) {
				return
			}
		}
	})
}

// resetHandshake injects the RST that ends r's handshake, if its endpoint
// is in SYN-RECV; false if there is none (yet).
func (s *Stack) resetHandshake(r *TCPRequest) bool {
	id := r.id
	netProto := header.IPv4ProtocolNumber
	if id.RemoteAddress.Len() == 16 {
		netProto = header.IPv6ProtocolNumber
	}
	ep, ok := s.gs.FindTransportEndpoint(netProto, tcp.ProtocolNumber, id, nicID).(*tcp.Endpoint)
	if !ok || ep.EndpointState() != tcp.StateSynRecv {
		return false
	}
	rst := buildClientRST(id, r.isn+1)
	if rst == nil {
		return true
	}
	s.injectOwn(rst)
	return true
}

// buildClientRST builds an RST from the client of id (the remote end) to
// its local end, with sequence number seq.
func buildClientRST(id gstack.TransportEndpointID, seq uint32) []byte {
	return buildSegment(id.RemoteAddress, id.LocalAddress, id.RemotePort, id.LocalPort, seq, 0, header.TCPFlagRst, 0, nil)
}

// synSeq is the sequence number of a TCP SYN parseSYN accepted.
func synSeq(pkt []byte) uint32 {
	if header.IPVersion(pkt) == header.IPv4Version {
		return header.TCP(pkt[header.IPv4(pkt).HeaderLength():]).SequenceNumber()
	}
	return header.TCP(pkt[header.IPv6MinimumSize:]).SequenceNumber()
}
