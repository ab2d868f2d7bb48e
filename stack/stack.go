// Package stack terminates TCP inside a gVisor netstack attached to the TUN
// (the split-TCP performance-enhancing proxy of scpsvpn).
//
// Inbound SYNs for any address reach a TCP forwarder (promiscuous NIC) and are
// offered to the tunnel as TCPRequests; the far site dials the real server
// from the client's own address and port (spoofing NIC) with DialTCP. Packets
// enter through Inject and leave through Config.Output (see link.go).
//
// This file owns the Stack: construction, the TCP settings and why, Inject,
// Stats, and Close.
package stack

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

// nicID is the only NIC of the stack: the TUN.
const nicID tcpip.NICID = 1

// TCP buffer and timer settings. Reasons are given where they are applied in
// configureTCP and configureEndpoint.
const (
	rcvBufMin     = 4 << 10
	rcvBufDefault = 256 << 10
	rcvBufMax     = 4 << 20
	sndBufMin     = 4 << 10
	sndBufDefault = 128 << 10
	sndBufMax     = 128 << 10

	timeWaitTimeout   = 10 * time.Second
	keepaliveIdle     = 60 * time.Second
	keepaliveInterval = 15 * time.Second
	keepaliveCount    = 4
)

// Stack is a gVisor netstack with one NIC over the TUN, a TCP forwarder for
// inbound connections and spoofed dial-out.
type Stack struct {
	cfg  Config
	log  *slog.Logger
	gs   *gstack.Stack
	link *linkEndpoint
	lc   linkCounters

	// closed stops Inject; injecting counts Inject calls in progress so
	// Close can wait until no new SYN handler goroutine can be spawned.
	closed    atomic.Bool
	injecting atomic.Int64

	mu sync.Mutex
	// flows counts MaxFlows slots held: requests awaiting Accept/Refuse plus
	// open Conns.
	flows   int
	conns   map[*Conn]struct{}
	pending map[*TCPRequest]struct{}
	dialing map[tcpip.Endpoint]struct{} // DialTCP handshakes in progress
	// accepting counts Accepts whose local handshake is in progress (the
	// client's SYN answered, its ACK awaited).
	accepting int
	closing   bool
	// bufCharged is what open Conns took from Config.BufferMemory.
	bufCharged int64

	accepted     atomic.Uint64
	dialed       atomic.Uint64
	refusedLimit atomic.Uint64
	dialLimit    atomic.Uint64
	refused      atomic.Uint64
	acceptFailed atomic.Uint64
	dialFailed   atomic.Uint64

	guard      *synGuard
	synEvicted atomic.Uint64
	evicting   sync.WaitGroup // synguard.go's RST retries, cookieflow.go's replays

	cookies    *cookieJar     // syncookie.go
	cflows     cookieFlows    // cookieflow.go
	cookieStat cookieCounters // syncookie.go, cookieflow.go
}

// Stats is a snapshot of the Stack's counters.
type Stats struct {
	FlowsActive  int    // MaxFlows slots held (pending requests + open Conns)
	Accepted     uint64 // inbound connections accepted
	Dialed       uint64 // outbound connections established
	RefusedLimit uint64 // inbound SYNs answered with RST because MaxFlows was reached
	DialLimit    uint64 // DialTCP calls failed with ErrFlowLimit
	Refused      uint64 // inbound requests refused by the handler, or with no handler (RST)
	AcceptFailed uint64 // Accept calls whose local handshake failed
	DialFailed   uint64 // DialTCP calls that failed (refused, timeout, ...)

	InFlightDrops uint64 // SYNs dropped silently by gVisor: MaxInFlight handshakes pending
	SYNEvicted    uint64 // handshakes ended (RST) to make room for newer SYNs (synguard.go)
	SYNCookieStats
	MalformedIn uint64 // packets gVisor rejected as malformed (IP or TCP)

	PacketsIn     uint64 // packets injected into the NIC
	PacketsOut    uint64 // packets written by Output without error
	BadPackets    uint64 // injected packets that were not IPv4/IPv6 or truncated
	QueueLen      int    // outbound packets queued or being written now
	QueueBlocks   uint64 // times gVisor waited for outbound queue space
	QueueDrops    uint64 // outbound packets dropped: queue stuck or closing
	OutputErrors  uint64 // Output calls that returned an error
	OutputBatches uint64 // Output calls
}

// New builds the stack: TCP options, the forwarder (installed before the NIC
// so that no SYN can arrive without a handler), the NIC in promiscuous and
// spoofing mode, and default routes for both families to the NIC.
func New(cfg Config) (*Stack, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Stack{
		cfg:     cfg,
		log:     cfg.Logger,
		conns:   make(map[*Conn]struct{}),
		pending: make(map[*TCPRequest]struct{}),
		dialing: make(map[tcpip.Endpoint]struct{}),
		guard:   newSYNGuard(cfg.MaxInFlight),
		cookies: newCookieJar(),
	}
	s.cflows.heldMax, s.cflows.pendFor = cookieHeldMax, cookiePending
	if cfg.BufferMemory > 0 {
		s.cflows.heldMax = cfg.BufferMemory / cookieHeldShare
	}
	s.gs = gstack.New(gstack.Options{
		NetworkProtocols:   []gstack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol},
		TransportProtocols: []gstack.TransportProtocolFactory{tcp.NewProtocol},
	})
	if err := configureTCP(s.gs); err != nil {
		s.gs.Destroy()
		return nil, err
	}

	// rcvWnd is the initial receive buffer of forwarded endpoints; pass ours
	// explicitly, as 0 would select gVisor's constant (1 MiB), not the range
	// set above.
	fwd := tcp.NewForwarder(s.gs, rcvBufDefault, cfg.MaxInFlight, s.handleForward)
	s.gs.SetTransportProtocolHandler(tcp.ProtocolNumber, fwd.HandlePacket)

	s.link = newLinkEndpoint(&cfg, &s.lc)
	s.link.filter = func(pkt []byte, partial bool) bool {
		return s.cflows.active() && s.cookieOut(pkt, partial)
	}
	if err := s.setupNIC(); err != nil {
		s.gs.Close()
		s.link.Close()
		s.gs.Wait()
		s.link.Wait()
		return nil, err
	}
	s.log.Debug("stack: up", "mtu", cfg.MTU, "max_flows", cfg.MaxFlows, "max_in_flight", cfg.MaxInFlight)
	return s, nil
}

func (s *Stack) setupNIC() error {
	if err := s.gs.CreateNICWithOptions(nicID, s.link, gstack.NICOptions{Name: "tun"}); err != nil {
		return fmt.Errorf("stack: create NIC: %s", err)
	}
	// Promiscuous: accept packets for any destination, since every address
	// routed into the TUN is a remote server we terminate TCP for.
	if err := s.gs.SetPromiscuousMode(nicID, true); err != nil {
		return fmt.Errorf("stack: promiscuous mode: %s", err)
	}
	// Spoofing: send from any source, so the far side can dial from the
	// client's own address and forwarded endpoints reply as the server.
	if err := s.gs.SetSpoofing(nicID, true); err != nil {
		return fmt.Errorf("stack: spoofing: %s", err)
	}
	s.gs.SetRouteTable([]tcpip.Route{
		{Destination: header.IPv4EmptySubnet, NIC: nicID},
		{Destination: header.IPv6EmptySubnet, NIC: nicID},
	})
	return nil
}

// configureTCP applies the stack-wide TCP options.
func configureTCP(gs *gstack.Stack) error {
	sack := tcpip.TCPSACKEnabled(true)
	moderate := tcpip.TCPModerateReceiveBufferOption(true)
	delay := tcpip.TCPDelayEnabled(false)
	timeWait := tcpip.TCPTimeWaitTimeoutOption(timeWaitTimeout)
	timeWaitReuse := tcpip.TCPTimeWaitReuseGlobal
	opts := []struct {
		name string
		opt  tcpip.SettableTransportProtocolOption
	}{
		// SACK: recover several losses per RTT without go-back-N; every
		// modern client offers it (gVisor's default is off).
		{"SACK", &sack},
		// Receive buffers: a LAN leg's BDP is small (10 Gbit/s x 1 ms is
		// 1.25 MB), so 4 MiB max is plenty. Start moderately (256 KiB) and
		// let auto-tuning grow a buffer only while the tunnel drains it: a
		// flow stalled behind the satellite link keeps a small buffer, and
		// its window closes (backpressure) instead of hoarding memory.
		{"receive buffer", &tcpip.TCPReceiveBufferSizeRangeOption{Min: rcvBufMin, Default: rcvBufDefault, Max: rcvBufMax}},
		{"moderate receive buffer", &moderate},
		// Send buffers hold data from the far site until the LAN client
		// ACKs it. 128 KiB covers the LAN BDP at 1 Gbit/s and 1 ms, and
		// is all a client that stops reading holds here: the tunnel
		// stops reading the stream once it is full, and the stream's
		// credit is cut (scps/internal/streams/readerstall.go). With
		// 1 MiB, growing to 4, every stalled download drew that much
		// more across the satellite link for nobody.
		{"send buffer", &tcpip.TCPSendBufferSizeRangeOption{Min: sndBufMin, Default: sndBufDefault, Max: sndBufMax}},
		// Nagle off: the tunnel writes whatever arrived from the satellite;
		// holding back a small segment for an ACK adds latency to
		// interactive traffic for no gain on a LAN.
		{"delay (Nagle)", &delay},
		// TIME-WAIT: 2*MSL of 60 s is far beyond LAN delays; a short wait
		// frees thousands of short flows' endpoints sooner.
		{"TIME-WAIT timeout", &timeWait},
		// TIME-WAIT reuse: spoofed dials bind the client's own port; a client
		// reconnecting from that port must not be refused here because our
		// old endpoint still sits in TIME-WAIT.
		{"TIME-WAIT reuse", &timeWaitReuse},
	}
	for _, o := range opts {
		if err := gs.SetTransportProtocolOption(tcp.ProtocolNumber, o.opt); err != nil {
			return fmt.Errorf("stack: set TCP option %s: %s", o.name, err)
		}
	}
	return nil
}

// configureEndpoint applies per-connection options to a forwarded or dialed
// endpoint.
func configureEndpoint(ep tcpip.Endpoint) {
	ops := ep.SocketOptions()
	// Keepalive: find LAN peers that vanished (host rebooted, cable pulled)
	// and release their flow slot and buffers. Probes cross only the LAN leg
	// and are answered by the peer's kernel even when its window is closed,
	// so a long satellite outage does not trip them.
	ops.SetKeepAlive(true)
	idle := tcpip.KeepaliveIdleOption(keepaliveIdle)
	interval := tcpip.KeepaliveIntervalOption(keepaliveInterval)
	_ = ep.SetSockOpt(&idle)
	_ = ep.SetSockOpt(&interval)
	_ = ep.SetSockOptInt(tcpip.KeepaliveCountOption, keepaliveCount)
	// Nagle off per endpoint too (the stack option only sets the default).
	ops.SetDelayOption(false)
}

// Inject hands one inbound IP packet (IPv4 or IPv6) from the TUN to the
// stack. The packet is copied; pkt may be reused when Inject returns. It is
// safe for concurrent use but meant for one reader goroutine (delivery runs
// on the caller's goroutine); packets after Close are ignored.
func (s *Stack) Inject(pkt []byte) {
	s.injecting.Add(1)
	if !s.closed.Load() && s.admit(pkt) {
		s.link.inject(pkt)
	}
	s.injecting.Add(-1)
}

// injectOwn hands gVisor a packet the stack made itself (an eviction RST,
// a replayed handshake), unless Close has begun: Close waits for the
// injecting count, so nothing reaches gVisor after it.
func (s *Stack) injectOwn(pkt []byte) {
	s.injecting.Add(1)
	if !s.closed.Load() {
		s.link.inject(pkt)
	}
	s.injecting.Add(-1)
}

// goBackground runs f on a goroutine Close waits for (evicting), unless
// Close has begun: none starts after it (the injecting count orders this
// as for Inject).
func (s *Stack) goBackground(f func()) {
	s.injecting.Add(1)
	defer s.injecting.Add(-1)
	if s.closed.Load() {
		return
	}
	s.evicting.Add(1)
	go func() {
		defer s.evicting.Done()
		f()
	}()
}

// admit looks at a packet from the TUN before gVisor does: a SYN may be
// answered with a cookie, a cookie flow's packet translated or held
// (cookieflow.go). false: gVisor must not see it.
func (s *Stack) admit(pkt []byte) bool {
	if id, netProto, ok := parseSYN(pkt); ok {
		live := s.reclaimTimeWait(id, netProto)
		if !live && s.cookieSYN(pkt, id) {
			return false
		}
		s.guard.seen(id, synSeq(pkt))
		return true
	}
	if s.cflows.active() || s.cookieCheckable() {
		return s.cookieIn(pkt)
	}
	return true
}

// InjectBatch hands a batch of inbound IP packets (as read together from
// the TUN) to the stack, like Inject for each in order. Consecutive
// segments of one TCP flow are coalesced (gVisor's GRO) before the stack
// sees them: a TUN read splits each 64 KB segment the kernel sent into
// MTU-sized packets, and the stack's TCP costs per segment, not per byte
// (see docs/performance.md). The batch is flushed at the end, so nothing
// waits for a later read or a timer. Coalescing needs
// Config.TrustRXChecksums; without it the packets are delivered one by one.
func (s *Stack) InjectBatch(pkts [][]byte) {
	s.injecting.Add(1)
	defer s.injecting.Add(-1)
	if s.closed.Load() {
		return
	}
	b := s.link.beginBatch()
	defer b.end()
	for _, pkt := range pkts {
		if isSYN(pkt) {
			// admit must see the stack as Inject would: with every
			// earlier packet (a FIN closing the tuple) delivered.
			b.flush()
		}
		if s.admit(pkt) {
			b.add(pkt)
		}
	}
}

// reclaimTimeWait aborts our endpoint in TIME-WAIT for the 4-tuple of an
// incoming SYN, so that the SYN reaches the forwarder. gVisor hands a SYN
// that hits TIME-WAIT only to a listening endpoint, never to the forwarder,
// and drops it otherwise: a client reusing its port soon after a connection
// the server closed first would stall for the whole TIME-WAIT. A new SYN on
// the tuple means the client has moved on (Linux accepts it likewise).
// live reports whether another endpoint of the 4-tuple remains (a
// handshake in progress, whose retransmitted SYN is gVisor's to answer).
func (s *Stack) reclaimTimeWait(id gstack.TransportEndpointID, netProto tcpip.NetworkProtocolNumber) (live bool) {
	ep := s.gs.FindTransportEndpoint(netProto, tcp.ProtocolNumber, id, nicID)
	if ep == nil {
		return false
	}
	if tep, ok := ep.(*tcp.Endpoint); ok && tep.EndpointState() == tcp.StateTimeWait {
		tep.Abort()
		return false
	}
	return true
}

// isSYN reports whether pkt is a TCP SYN (without ACK), as parseSYN.
func isSYN(pkt []byte) bool {
	_, _, ok := parseSYN(pkt)
	return ok
}

// parseSYN returns the local view of the 4-tuple of a TCP SYN (without ACK)
// in an IPv4 or IPv6 packet; ok is false for anything else, including
// fragments, IPv6 extension headers and truncated packets.
func parseSYN(pkt []byte) (id gstack.TransportEndpointID, netProto tcpip.NetworkProtocolNumber, ok bool) {
	var tcpHdr header.TCP
	switch {
	case len(pkt) >= header.IPv4MinimumSize && header.IPVersion(pkt) == header.IPv4Version:
		ip := header.IPv4(pkt)
		hl := int(ip.HeaderLength())
		if hl < header.IPv4MinimumSize || len(pkt) < hl+header.TCPMinimumSize ||
			ip.Protocol() != uint8(header.TCPProtocolNumber) || ip.FragmentOffset() != 0 || ip.More() {
			return id, 0, false
		}
		tcpHdr = header.TCP(pkt[hl:])
		id.LocalAddress, id.RemoteAddress = ip.DestinationAddress(), ip.SourceAddress()
		netProto = header.IPv4ProtocolNumber
	case len(pkt) >= header.IPv6MinimumSize+header.TCPMinimumSize && header.IPVersion(pkt) == header.IPv6Version:
		ip := header.IPv6(pkt)
		if ip.NextHeader() != uint8(header.TCPProtocolNumber) {
			return id, 0, false
		}
		tcpHdr = header.TCP(pkt[header.IPv6MinimumSize:])
		id.LocalAddress, id.RemoteAddress = ip.DestinationAddress(), ip.SourceAddress()
		netProto = header.IPv6ProtocolNumber
	default:
		return id, 0, false
	}
	if tcpHdr.Flags()&(header.TCPFlagSyn|header.TCPFlagAck|header.TCPFlagRst) != header.TCPFlagSyn {
		return id, 0, false
	}
	id.LocalPort, id.RemotePort = tcpHdr.DestinationPort(), tcpHdr.SourcePort()
	return id, netProto, true
}

// Stats returns a snapshot of the counters.
func (s *Stack) Stats() Stats {
	s.mu.Lock()
	flows := s.flows
	s.mu.Unlock()
	gst := s.gs.Stats()
	return Stats{
		FlowsActive:   flows,
		Accepted:      s.accepted.Load(),
		Dialed:        s.dialed.Load(),
		RefusedLimit:  s.refusedLimit.Load(),
		DialLimit:     s.dialLimit.Load(),
		Refused:       s.refused.Load(),
		AcceptFailed:  s.acceptFailed.Load(),
		DialFailed:    s.dialFailed.Load(),
		InFlightDrops: gst.TCP.ForwardMaxInFlightDrop.Value(),
		SYNEvicted:    s.synEvicted.Load(),
		SYNCookieStats: SYNCookieStats{
			CookiesSent: s.cookieStat.sent.Load(), CookiesAccepted: s.cookieStat.accepted.Load(),
			CookiesRejected: s.cookieStat.rejected.Load(), CookieDrops: s.cookieStat.drops.Load(),
		},
		MalformedIn:   gst.IP.MalformedPacketsReceived.Value() + gst.TCP.InvalidSegmentsReceived.Value(),
		PacketsIn:     s.lc.packetsIn.Load(),
		PacketsOut:    s.lc.packetsOut.Load(),
		BadPackets:    s.lc.badPackets.Load(),
		QueueLen:      s.link.queued(),
		QueueBlocks:   s.lc.queueBlocks.Load(),
		QueueDrops:    s.lc.queueDrops.Load(),
		OutputErrors:  s.lc.outputErrors.Load(),
		OutputBatches: s.lc.outputBatches.Load(),
	}
}

// reserve takes a MaxFlows slot; false if the limit is reached or the stack
// is closing.
func (s *Stack) reserve() (ok, closing bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false, true
	}
	if s.flows >= s.cfg.MaxFlows {
		return false, false
	}
	s.flows++
	return true, false
}

// unreserve returns a slot taken by reserve.
func (s *Stack) unreserve() {
	s.mu.Lock()
	s.flows--
	s.mu.Unlock()
}

func (s *Stack) acceptsInProgress() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepting
}

// track registers an established Conn (its slot is already reserved). It
// returns false if the stack is closing; the caller then aborts the Conn.
func (s *Stack) track(c *Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

// forget releases a Conn's slot.
func (s *Stack) forget(c *Conn) {
	s.mu.Lock()
	if _, ok := s.conns[c]; ok {
		delete(s.conns, c)
		s.flows--
	}
	s.bufCharged -= c.charge
	c.charge = 0
	s.mu.Unlock()
}

// acceptGrace bounds how long Close waits for local handshakes in
// progress: on the LAN side the client's ACK is a fraction of a
// millisecond away.
const acceptGrace = 250 * time.Millisecond

// Close aborts every connection (RST), refuses pending requests, stops
// gVisor's goroutines and the writer, and waits for them. Packets already
// queued, including the RSTs, are flushed to Output first.
func (s *Stack) Close() error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	// From here new SYNs are refused, and an Accept that completes gets
	// no connection but aborts it (RST).
	s.closing = true
	s.mu.Unlock()
	// A client whose local handshake is in progress would get no RST if
	// gVisor closed under it (it drops handshakes silently) and would wait
	// for its own timeout: let its ACK arrive first, so its connection
	// exists and is reset.
	for deadline := time.Now().Add(acceptGrace); s.acceptsInProgress() > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	s.closed.Store(true)
	// After this loop no Inject is inside gVisor, so no new forwarder
	// goroutine can start.
	for s.injecting.Load() != 0 {
		time.Sleep(50 * time.Microsecond)
	}
	s.evicting.Wait()

	s.mu.Lock()
	reqs := make([]*TCPRequest, 0, len(s.pending))
	for r := range s.pending {
		reqs = append(reqs, r)
	}
	conns := make([]*Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	dialing := make([]tcpip.Endpoint, 0, len(s.dialing))
	for ep := range s.dialing {
		dialing = append(dialing, ep)
	}
	s.mu.Unlock()

	// Wake DialTCP calls still in their handshake; they return an error.
	for _, ep := range dialing {
		ep.Abort()
	}
	for _, r := range reqs {
		r.complete(true)
	}
	for _, c := range conns {
		c.Abort()
	}
	// gVisor's Close aborts the remaining endpoints (handshakes, TIME-WAIT,
	// ...) and stops the protocols. Then the link endpoint flushes the
	// queued RSTs and stops its writer; it must stop before gVisor's Wait,
	// which waits for it before removing the NIC.
	s.gs.Close()
	s.link.Close()
	s.gs.Wait()
	s.link.Wait()
	s.log.Debug("stack: closed", "aborted", len(conns), "refused_pending", len(reqs))
	return nil
}
