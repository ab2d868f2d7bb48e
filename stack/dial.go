// This file owns the outbound side: dialing the real server from the
// client's own address and port through the spoofing NIC.

package stack

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// DialTCP connects to dst from the spoofed source src (the client's address
// and port; port 0 picks an ephemeral one). It fails with an error matching
// ErrRefused (and syscall.ECONNREFUSED) when dst answers RST, with ctx's
// error when ctx ends first, and with ErrFlowLimit at MaxFlows.
func (s *Stack) DialTCP(ctx context.Context, src, dst netip.AddrPort) (*Conn, error) {
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	if !src.Addr().IsValid() || !dst.Addr().IsValid() || dst.Port() == 0 {
		return nil, fmt.Errorf("stack: dial %v from %v: invalid address", dst, src)
	}
	if src.Addr().Is4() != dst.Addr().Is4() {
		return nil, fmt.Errorf("stack: dial %v from %v: address families differ", dst, src)
	}
	netProto := header.IPv6ProtocolNumber
	if dst.Addr().Is4() {
		netProto = header.IPv4ProtocolNumber
	}

	ok, closing := s.reserve()
	if closing {
		return nil, ErrClosed
	}
	if !ok {
		s.dialLimit.Add(1)
		return nil, &net.OpError{Op: "dial", Net: "tcp", Source: net.TCPAddrFromAddrPort(src),
			Addr: net.TCPAddrFromAddrPort(dst), Err: ErrFlowLimit}
	}
	c, err := s.dial(ctx, src, dst, netProto)
	if err != nil {
		s.unreserve()
		s.dialFailed.Add(1)
		return nil, err
	}
	if !s.track(c) {
		c.ep.Abort()
		c.TCPConn.Close()
		s.unreserve()
		return nil, ErrClosed
	}
	s.dialed.Add(1)
	return c, nil
}

// dial creates, binds and connects the endpoint; the flow slot is the
// caller's business.
func (s *Stack) dial(ctx context.Context, src, dst netip.AddrPort, netProto tcpip.NetworkProtocolNumber) (*Conn, error) {
	var wq waiter.Queue
	ep, terr := s.gs.NewEndpoint(tcp.ProtocolNumber, netProto, &wq)
	if terr != nil {
		return nil, fmt.Errorf("stack: dial %v: new endpoint: %s", dst, terr)
	}
	fail := func(terr tcpip.Error) (*Conn, error) {
		ep.Abort()
		ep.Close()
		return nil, opError("dial", src, dst, terr)
	}
	if !s.trackDial(ep, true) {
		ep.Close()
		return nil, ErrClosed
	}
	defer s.trackDial(ep, false)
	configureEndpoint(ep)
	// The client may use one port towards several servers; the 4-tuples
	// still differ, so allow binding the same spoofed address and port.
	ep.SocketOptions().SetReuseAddress(true)
	if terr := ep.Bind(tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFromSlice(src.Addr().AsSlice()), Port: src.Port()}); terr != nil {
		return fail(terr)
	}

	entry, notify := waiter.NewChannelEntry(waiter.WritableEvents | waiter.EventHUp | waiter.EventErr)
	wq.EventRegister(&entry)
	defer wq.EventUnregister(&entry)

	remote := tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFromSlice(dst.Addr().AsSlice()), Port: dst.Port()}
	terr = ep.Connect(remote)
	if _, inUse := terr.(*tcpip.ErrBadLocalAddress); inUse && src.Port() != 0 && s.evictTimeWait(netProto, src, dst) {
		terr = ep.Connect(remote)
	}
	if _, started := terr.(*tcpip.ErrConnectStarted); started {
		terr = nil
		// Wake-ups can be stale (e.g. left by a first Connect that failed
		// before the TIME-WAIT eviction), so wait for the state to change.
		for terr == nil && handshaking(ep) {
			select {
			case <-ctx.Done():
				ep.Abort()
				ep.Close()
				return nil, &net.OpError{Op: "dial", Net: "tcp", Source: net.TCPAddrFromAddrPort(src),
					Addr: net.TCPAddrFromAddrPort(dst), Err: fmt.Errorf("stack: %w", ctx.Err())}
			case <-notify:
			}
			terr = ep.LastError()
		}
		if terr == nil && !established(ep) {
			// The handshake ended but the error may land just after the
			// state change. A SYN-SENT that ends without our abort (ctx,
			// Close) was answered by RST or unreachable: refused.
			terr = ep.LastError()
			if terr == nil {
				s.mu.Lock()
				closing := s.closing
				s.mu.Unlock()
				if closing {
					terr = &tcpip.ErrAborted{}
				} else {
					terr = &tcpip.ErrConnectionRefused{}
				}
			}
		}
	}
	if terr != nil {
		return fail(terr)
	}
	return newConn(s, &wq, ep), nil
}

// handshaking reports whether a dialing endpoint is still connecting.
func handshaking(ep tcpip.Endpoint) bool {
	switch ep.(*tcp.Endpoint).EndpointState() {
	case tcp.StateConnecting, tcp.StateSynSent, tcp.StateSynRecv:
		return true
	}
	return false
}

// established reports whether the handshake completed (the peer may have
// sent its FIN already).
func established(ep tcpip.Endpoint) bool {
	switch ep.(*tcp.Endpoint).EndpointState() {
	case tcp.StateEstablished, tcp.StateCloseWait:
		return true
	}
	return false
}

// evictTimeWait aborts our endpoint for the 4-tuple src->dst if it is in
// TIME-WAIT, and reports whether it did. gVisor's TIME-WAIT reuse only covers
// ephemeral ports, but a spoofed dial binds the client's own port: when the
// client reconnects from it (its kernel allowed that), our leftover
// TIME-WAIT from the previous connection must not refuse it.
func (s *Stack) evictTimeWait(netProto tcpip.NetworkProtocolNumber, src, dst netip.AddrPort) bool {
	id := gstack.TransportEndpointID{
		LocalAddress:  tcpip.AddrFromSlice(src.Addr().AsSlice()),
		LocalPort:     src.Port(),
		RemoteAddress: tcpip.AddrFromSlice(dst.Addr().AsSlice()),
		RemotePort:    dst.Port(),
	}
	ep, ok := s.gs.FindTransportEndpoint(netProto, tcp.ProtocolNumber, id, nicID).(*tcp.Endpoint)
	if !ok || ep.EndpointState() != tcp.StateTimeWait {
		return false
	}
	ep.Abort()
	return true
}

// trackDial adds (or removes) a connecting endpoint so that Close can abort
// it; adding fails once the stack is closing.
func (s *Stack) trackDial(ep tcpip.Endpoint, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !add {
		delete(s.dialing, ep)
		return true
	}
	if s.closing {
		return false
	}
	s.dialing[ep] = struct{}{}
	return true
}
