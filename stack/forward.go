// This file owns the inbound side: gVisor's TCP forwarder hands each new SYN
// to handleForward, which applies the MaxFlows limit and offers the
// connection to the tunnel as a TCPRequest to Accept or Refuse.

package stack

import (
	"container/list"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// TCPRequest is an inbound TCP connection whose SYN arrived. Exactly one of
// Accept or Refuse must be called; until then it holds a MaxFlows slot and a
// MaxInFlight handshake slot.
type TCPRequest struct {
	// Src is the client's address and port.
	Src netip.AddrPort
	// Dst is the original destination (the server the client wants).
	Dst netip.AddrPort

	s  *Stack
	fr *tcp.ForwarderRequest

	mu   sync.Mutex
	done bool

	id gstack.TransportEndpointID // fr's, kept: fr forgets it once completed
	// The SYN guard's (synguard.go), under its lock.
	guardElem *list.Element
	isn       uint32 // the client's SYN sequence number, if hasISN
	admitted  time.Time
	hasISN    bool
	// handshakeOver: Accept's local handshake ended (either way).
	handshakeOver atomic.Bool
	// acceptAt is when Accept's local handshake began (UnixNano; 0: not
	// yet), for the SYN guard's grace (handshakeGrace).
	acceptAt atomic.Int64
}

// handleForward runs on a goroutine gVisor starts for each new SYN.
func (s *Stack) handleForward(fr *tcp.ForwarderRequest) {
	id := fr.ID()
	r := &TCPRequest{
		Src: netip.AddrPortFrom(addrFrom(id.RemoteAddress), id.RemotePort),
		Dst: netip.AddrPortFrom(addrFrom(id.LocalAddress), id.LocalPort),
		s:   s,
		fr:  fr,
		id:  id,
	}
	s.mu.Lock()
	switch {
	case s.closing:
		s.mu.Unlock()
		fr.Complete(true)
		return
	case s.cfg.HandleTCP == nil:
		s.mu.Unlock()
		s.refused.Add(1)
		fr.Complete(true)
		return
	case s.flows >= s.cfg.MaxFlows:
		s.mu.Unlock()
		s.refusedLimit.Add(1)
		fr.Complete(true)
		return
	}
	s.flows++
	s.pending[r] = struct{}{}
	s.mu.Unlock()
	replay := false
	if s.cflows.active() {
		s.cflows.offer(id, r) // a cookie flow's replayed SYN (cookieflow.go)
		replay = s.cflows.lookup(id) != nil
	}
	if old := s.guard.admit(r, replay); old != nil {
		s.evict(old)
		if old == r {
			return // dropped: its client sends the SYN again
		}
	}
	s.cfg.HandleTCP(r)
}

// isPending reports whether r (nil: none) awaits Accept or Refuse, or is
// in Accept's local handshake.
func (s *Stack) isPending(r *TCPRequest) bool {
	if r == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.pending[r]
	return ok
}

// take marks the request as answered; false if it already was.
func (r *TCPRequest) take() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return false
	}
	r.done = true
	return true
}

// settle removes the request from the pending set; keepSlot says whether its
// MaxFlows slot passes on to a Conn.
func (r *TCPRequest) settle(keepSlot bool) {
	s := r.s
	s.mu.Lock()
	delete(s.pending, r)
	if !keepSlot {
		s.flows--
	}
	s.mu.Unlock()
}

// complete answers the request without a connection, with RST if reset.
func (r *TCPRequest) complete(reset bool) bool {
	if !r.take() {
		return false
	}
	r.fr.Complete(reset)
	r.s.guard.done(r)
	r.settle(false)
	return true
}

// Accept completes the local handshake and returns the connection. This is
// the optimistic open: the client's connection is up before the far side
// has reached the server; call Conn.Abort if the far side later fails.
func (r *TCPRequest) Accept() (*Conn, error) {
	if !r.take() {
		return nil, ErrRequestDone
	}
	s := r.s
	r.acceptAt.Store(time.Now().UnixNano())
	s.mu.Lock()
	s.accepting++
	s.mu.Unlock()
	var wq waiter.Queue
	ep, terr := r.fr.CreateEndpoint(&wq)
	r.handshakeOver.Store(true)
	s.guard.done(r)
	s.mu.Lock()
	s.accepting--
	s.mu.Unlock()
	// The handshake is over either way; Complete frees the in-flight slot.
	// No RST on failure: the client reset or vanished already.
	r.fr.Complete(false)
	if terr != nil {
		r.settle(false)
		s.acceptFailed.Add(1)
		return nil, opError("accept", r.Dst, r.Src, terr)
	}
	configureEndpoint(ep)
	c := newConn(s, &wq, ep)
	r.settle(true)
	if !s.track(c) {
		ep.Abort()
		ep.Close()
		s.unreserve()
		return nil, ErrClosed
	}
	s.accepted.Add(1)
	return c, nil
}

// Refuse answers the client's SYN with RST.
func (r *TCPRequest) Refuse() {
	if r.complete(true) {
		r.s.refused.Add(1)
	}
}

// addrFrom converts a gVisor address to netip without allocating.
func addrFrom(a tcpip.Address) netip.Addr {
	switch a.Len() {
	case 4:
		return netip.AddrFrom4(a.As4())
	case 16:
		return netip.AddrFrom16(a.As16())
	}
	return netip.Addr{}
}

// newConn wraps an established endpoint.
func newConn(s *Stack, wq *waiter.Queue, ep tcpip.Endpoint) *Conn {
	return &Conn{TCPConn: gonet.NewTCPConn(wq, ep), ep: ep, wq: wq, s: s, charge: s.chargeBuffers(ep)}
}
