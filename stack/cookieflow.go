// This file owns connections opened by a SYN cookie (syncookie.go). The
// client's ACK that returns a valid cookie is held; a SYN as the client's
// (its ISN and the MSS the cookie kept, no other option) goes to gVisor,
// which answers with a SYN-ACK of its own ISN. That SYN-ACK is dropped on
// its way out, and the held ACK, translated, completes gVisor's handshake.
// From then on the connection's sequence numbers differ by the two ISNs:
// every segment gVisor sends has its sequence number moved to the cookie's
// space, every segment from the client has its acknowledgement moved back
// (no SACK blocks or timestamps to translate: a cookie offers neither).
// A flow is forgotten when gVisor's endpoint for it is gone.
//
// The packets held take memory from the stack's buffer budget: at most
// 1/cookieHeldShare of it for all flows (budget.go gives connections the
// rest), beyond which they are dropped and counted, as a full queue
// drops (the client retransmits). A replayed handshake whose request the
// handler still holds (the tunnel waits up to 5 s and two RTTs for an
// association before it accepts or refuses) is kept until it is answered:
// forgotten earlier, its SYN-ACK or RST would reach the client
// untranslated, a stray the client resets on or ignores (and hangs).

package stack

import (
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

const (
	// cookieHeld bounds the client packets held while gVisor's handshake
	// is replayed (the ACK, and data the client sent right after it).
	cookieHeld = 8
	// cookiePending is how long a replayed handshake whose SYN was not
	// made a request (gVisor dropped it) may take before its flow is
	// forgotten: the client's packets then reach gVisor untranslated and
	// are answered with RST.
	cookiePending = 5 * time.Second
	// cookieFlowsMax bounds the flows in replay at once (the rest of the
	// table is bounded by MaxFlows: each has a gVisor endpoint).
	cookieFlowsMax = 4096
	// cookieHeldShare: the packets held for all cookie flows take at most
	// this fraction of Config.BufferMemory; cookieHeldMax without a
	// budget.
	cookieHeldShare = 16
	cookieHeldMax   = 8 << 20
)

// cookieFlow is one connection opened by a cookie.
type cookieFlow struct {
	cookie uint32 // our ISN as the client knows it
	isn    uint32 // gVisor's ISN, once ready
	ready  bool
	held   [][]byte // client packets awaiting ready
	// heldBytes is what held takes from cookieFlows.heldMax.
	heldBytes int64
	born      time.Time
	// req is the request gVisor made of the replayed SYN, once offered to
	// the handler (handleForward): the flow lives while it is pending.
	req *TCPRequest
}

// cookieFlows is the table of connections opened by cookies, by 4-tuple
// (local view).
type cookieFlows struct {
	mu        sync.RWMutex // read: lookups on every packet while n > 0
	m         map[gstack.TransportEndpointID]*cookieFlow
	pending   int
	heldBytes int64         // all flows' held packets
	heldMax   int64         // the most heldBytes may reach (New)
	pendFor   time.Duration // cookiePending; tests shorten it
	lastSweep atomic.Int64  // UnixNano
	n         atomic.Int64  // len(m), read without the lock on every packet
}

// holdLocked keeps a copy of pkt for f until its handshake is replayed;
// false if f or all flows hold as much as they may.
func (t *cookieFlows) holdLocked(f *cookieFlow, pkt []byte) bool {
	n := int64(len(pkt))
	if len(f.held) >= cookieHeld || t.heldBytes+n > t.heldMax {
		return false
	}
	f.held = append(f.held, append([]byte(nil), pkt...))
	f.heldBytes += n
	t.heldBytes += n
	return true
}

// releaseHeldLocked gives back what f's held packets took.
func (t *cookieFlows) releaseHeldLocked(f *cookieFlow) {
	t.heldBytes -= f.heldBytes
	f.heldBytes = 0
}

// offer notes that the replayed SYN of id became request r.
func (t *cookieFlows) offer(id gstack.TransportEndpointID, r *TCPRequest) {
	t.mu.Lock()
	if f := t.m[id]; f != nil && !f.ready {
		f.req = r
	}
	t.mu.Unlock()
}

// lookup returns the flow of id, if any.
func (t *cookieFlows) lookup(id gstack.TransportEndpointID) *cookieFlow {
	t.mu.RLock()
	f := t.m[id]
	t.mu.RUnlock()
	return f
}

// active reports whether any packet may need translation.
func (t *cookieFlows) active() bool { return t.n.Load() > 0 }

// SYNCookieStats are the SYN cookie counters (part of Stats).
type SYNCookieStats struct {
	CookiesSent     uint64 // SYNs answered with a cookie (a SYN flood was on)
	CookiesAccepted uint64 // connections opened by an ACK with a valid cookie
	CookiesRejected uint64 // ACKs for no connection whose cookie was wrong or expired
	CookieDrops     uint64 // cookie SYN-ACKs or held packets dropped (queues full)
}

type cookieCounters struct {
	sent, accepted, rejected, drops atomic.Uint64
	// lastSent is when a cookie was last sent (UnixNano): ACKs for no
	// connection are checked for a cookie only while one may be valid.
	lastSent atomic.Int64
	until    atomic.Int64 // cookies stay on until then (UnixNano)
}

// cookieCheckable reports whether a cookie sent may still be valid.
func (s *Stack) cookieCheckable() bool {
	last := s.cookieStat.lastSent.Load()
	return last != 0 && time.Since(time.Unix(0, last)) < 2*cookiePeriod
}

// cookieSticky is how long cookies stay on after the guard was last full:
// while they are on no SYN reaches gVisor, so the guard empties (stale
// handshakes are ended), and without it each refill would cost a guard's
// worth of gVisor handshakes and evictions every few seconds of a flood.
const cookieSticky = 10 * time.Second

// cookieSYN answers the SYN pkt of id, which has no endpoint, with a
// cookie if the guard is full or was lately; true if it did (the SYN must
// not reach gVisor then).
func (s *Stack) cookieSYN(pkt []byte, id gstack.TransportEndpointID) bool {
	if s.cflows.active() {
		s.forgetFlow(id)
	}
	now := time.Now()
	if s.guard.full() {
		s.cookieStat.until.Store(now.Add(cookieSticky).UnixNano())
	} else if now.UnixNano() >= s.cookieStat.until.Load() {
		return false
	}
	syn, ok := parseSegment(pkt)
	if !ok {
		return false
	}
	for _, r := range s.guard.stale(now.Add(-staleHandshake), 2) {
		s.evict(r)
	}
	ours := uint16(s.link.MTU()) - header.TCPMinimumSize - header.IPv4MinimumSize
	if syn.netProto == header.IPv6ProtocolNumber {
		ours = uint16(s.link.MTU()) - header.TCPMinimumSize - header.IPv6MinimumSize
	}
	s.cookieStat.lastSent.Store(now.UnixNano())
	if b := s.cookies.synAck(&syn, id, ours); b == nil || !s.link.enqueueRaw(b) {
		s.cookieStat.drops.Add(1)
		return true
	}
	s.cookieStat.sent.Add(1)
	return true
}

// forgetFlow drops the cookie flow of id, whose gVisor endpoint is gone:
// a new connection on the same 4-tuple starts from scratch.
func (s *Stack) forgetFlow(id gstack.TransportEndpointID) {
	t := &s.cflows
	f := t.lookup(id)
	if f == nil || !f.ready {
		return
	}
	t.mu.Lock()
	if t.m[id] == f {
		t.deleteLocked(id, f)
	}
	t.mu.Unlock()
}

func (t *cookieFlows) deleteLocked(id gstack.TransportEndpointID, f *cookieFlow) {
	delete(t.m, id)
	if !f.ready {
		t.pending--
		t.releaseHeldLocked(f)
	}
	t.n.Store(int64(len(t.m)))
}

// cookieIn handles a non-SYN TCP packet from a client before gVisor sees
// it: a cookie flow's packet is translated, or held while its handshake is
// replayed; an ACK returning a valid cookie opens a flow. deliver is false
// when the packet must not reach gVisor now.
func (s *Stack) cookieIn(pkt []byte) (deliver bool) {
	seg, ok := parseSegment(pkt)
	if !ok {
		return true
	}
	flags := seg.tcp.Flags()
	if flags&header.TCPFlagSyn != 0 {
		return true
	}
	id := seg.inbound()
	t := &s.cflows
	if t.active() {
		s.sweep()
		if f := t.lookup(id); f != nil {
			return s.cookieFlowIn(f, &seg, pkt)
		}
	}
	if flags&(header.TCPFlagAck|header.TCPFlagRst) != header.TCPFlagAck || !s.cookieCheckable() {
		return true
	}
	if s.gs.FindTransportEndpoint(seg.netProto, tcp.ProtocolNumber, id, nicID) != nil {
		return true
	}
	isn, cookie := seg.tcp.SequenceNumber()-1, seg.tcp.AckNumber()-1
	mss, ok := s.cookies.check(id, isn, cookie)
	if !ok {
		s.cookieStat.rejected.Add(1)
		return true // gVisor answers it with RST, as any stray segment
	}
	f := &cookieFlow{cookie: cookie, born: time.Now()}
	t.mu.Lock()
	if t.m[id] != nil || t.pending >= cookieFlowsMax || !t.holdLocked(f, pkt) {
		t.mu.Unlock()
		s.cookieStat.drops.Add(1)
		return false
	}
	if t.m == nil {
		t.m = map[gstack.TransportEndpointID]*cookieFlow{}
	}
	t.m[id] = f
	t.pending++
	t.n.Store(int64(len(t.m)))
	t.mu.Unlock()
	s.cookieStat.accepted.Add(1)
	// The SYN as the client's, past the cookie check (and the guard: this
	// client is real): gVisor's SYN-ACK comes back through cookieOut.
	syn := buildSegment(seg.src, seg.dst, id.RemotePort, id.LocalPort, isn, 0, header.TCPFlagSyn,
		seg.tcp.WindowSize(), mssOption(mss))
	s.guard.seen(id, isn)
	s.link.inject(syn)
	return false
}

// cookieFlowIn translates a packet of flow f from the client, or holds it
// while f's handshake is replayed.
func (s *Stack) cookieFlowIn(f *cookieFlow, seg *tcpSegment, pkt []byte) (deliver bool) {
	t := &s.cflows
	t.mu.Lock()
	if !f.ready {
		if t.m[seg.inbound()] != f || !t.holdLocked(f, pkt) {
			s.cookieStat.drops.Add(1)
		}
		t.mu.Unlock()
		return false
	}
	t.mu.Unlock()
	if seg.tcp.Flags()&header.TCPFlagAck != 0 {
		seg.setAck(seg.tcp.AckNumber() - (f.cookie - f.isn))
	}
	return true
}

// sweep forgets, at most once a second, flows whose endpoint is gone and
// replays that never finished: whose SYN never became a request, or whose
// request is no longer pending (the handler answered it, or the stack
// closed) yet never completed the handshake.
func (s *Stack) sweep() {
	t := &s.cflows
	now := time.Now()
	last := t.lastSweep.Load()
	if now.UnixNano()-last < int64(time.Second) || !t.lastSweep.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, f := range t.m {
		proto := header.IPv4ProtocolNumber
		if id.LocalAddress.Len() == 16 {
			proto = header.IPv6ProtocolNumber
		}
		if f.ready && s.gs.FindTransportEndpoint(proto, tcp.ProtocolNumber, id, nicID) == nil ||
			!f.ready && now.Sub(f.born) > t.pendFor && !s.isPending(f.req) {
			t.deleteLocked(id, f)
		}
	}
}

// cookieOut handles a packet gVisor sends, before it is queued for the
// TUN: a cookie flow's packet gets the cookie's sequence space. drop is
// true for gVisor's SYN-ACK of a replayed handshake; the held client
// packets then complete it (on another goroutine: gVisor may hold the
// endpoint's lock here).
func (s *Stack) cookieOut(pkt []byte, partial bool) (drop bool) {
	seg, ok := parseSegment(pkt)
	if !ok {
		return false
	}
	id := seg.outbound()
	t := &s.cflows
	f := t.lookup(id)
	if f == nil {
		return false
	}
	t.mu.RLock()
	ready := f.ready
	t.mu.RUnlock()
	if ready {
		seg.setSeq(seg.tcp.SequenceNumber()+(f.cookie-f.isn), partial)
		return false
	}
	flags := seg.tcp.Flags()
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case f.ready: // raced with the SYN-ACK
		seg.setSeq(seg.tcp.SequenceNumber()+(f.cookie-f.isn), partial)
		return false
	case t.m[id] != f: // forgotten meanwhile
		return false
	case flags&(header.TCPFlagSyn|header.TCPFlagAck) == header.TCPFlagSyn|header.TCPFlagAck:
		f.isn, f.ready = seg.tcp.SequenceNumber(), true
		t.pending--
		t.releaseHeldLocked(f)
		s.replay(f.held, f.cookie-f.isn)
		f.held = nil
		return true
	case flags&header.TCPFlagRst != 0:
		// Refused (no handler, flow limit): the client, connected as far
		// as it knows, takes an RST at its next expected number.
		t.deleteLocked(id, f)
		seg.setSeq(f.cookie+1, partial)
		return false
	}
	return true
}

// replay injects the held client packets with their acknowledgement moved
// into gVisor's sequence space.
func (s *Stack) replay(held [][]byte, delta uint32) {
	s.goBackground(func() {
		for _, p := range held {
			seg, ok := parseSegment(p)
			if !ok {
				continue
			}
			if seg.tcp.Flags()&header.TCPFlagAck != 0 {
				seg.setAck(seg.tcp.AckNumber() - delta)
			}
			s.injectOwn(p)
		}
	})
}
