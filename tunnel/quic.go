package tunnel

// QUIC (HTTP/3) toward a peer: UDP to or from one of the peer's quic_ports
// is handled by the peer's quic policy (docs/quic.md):
//
//   - pass: plain datagrams, as any other UDP.
//   - fallback: a datagram toward such a port is answered at once with ICMP
//     port unreachable from its destination, so the client gives QUIC up
//     and uses TCP, which the endpoint accelerates; nothing crosses the hop.
//   - repair: each such flow (5-tuple, one direction) is carried on a stream
//     of the association of its own, one message per datagram (spec.md,
//     "Repaired datagrams"). The hop's losses are then resent by the
//     association and the datagrams behind a loss wait for it: QUIC sees
//     delay, not loss, and its congestion control does not back off for
//     the hop. A datagram that would arrive later than the give-up
//     deadline is dropped instead.

import (
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"scpsvpn/scps"
)

const (
	icmpv4PortUnreach = 3
	icmpv6PortUnreach = 4
	// quicIdle ends a repaired flow's stream after this long without a
	// datagram (QUIC's idle timeouts are of this order); the next datagram
	// opens another.
	quicIdle = 30 * time.Second
	// quicQueue bounds the datagrams of one repaired flow waiting for room
	// in its stream, and quicQueuedBytes all of a peer's; more are given
	// up (the QUIC sender sees loss and slows down, as it would at a full
	// router queue). The streams' own buffers are in the association's
	// memory budget.
	quicQueue       = 128
	quicQueuedBytes = 2 << 20
	// maxQuicFlows bounds a peer's repaired flows at this end; further
	// flows are carried as plain datagrams.
	maxQuicFlows = 256
	// quicHeaderLen is a repaired datagram's header (spec.md).
	quicHeaderLen = 6
)

// quicDeadline is how late a repaired datagram may be before it is given
// up: a few of the peer's round trips (one or two resends), at least 1 s.
// QUIC would take anything later as lost, and it would only delay what
// follows.
func quicDeadline(rtt time.Duration) time.Duration {
	return max(3*rtt, time.Second)
}

// udpPorts returns a UDP packet's ports; ok is false for anything else
// or a UDP header cut short.
func udpPorts(pkt []byte, info ipInfo) (src, dst uint16, ok bool) {
	if info.proto != protoUDP || len(pkt) < info.hlen+8 {
		return 0, 0, false
	}
	h := pkt[info.hlen:]
	return binary.BigEndian.Uint16(h), binary.BigEndian.Uint16(h[2:]), true
}

// routeQuic applies a's quic policy to a packet from the TUN toward a's
// subnets; true means it was handled (refused or repaired), false that it
// goes on as a plain datagram.
func (e *Endpoint) routeQuic(a *assoc, pkt []byte, info ipInfo) bool {
	if a.cfg.Quic == "pass" {
		return false
	}
	sport, dport, ok := udpPorts(pkt, info)
	if !ok {
		return false
	}
	toServer := slices.Contains(a.cfg.QuicPorts, dport)
	switch a.cfg.Quic {
	case "fallback":
		// Only a client's datagrams are refused: a server's answers (from
		// a QUIC port) belong to a flow the far site let through.
		if !toServer {
			return false
		}
		e.stats.QuicRefused.Add(1)
		if e.unreach.allow(time.Now()) {
			if reply := portUnreachable(pkt, info); reply != nil {
				e.writeTUNPacket(reply)
			}
		}
		return true
	case "repair":
		if !toServer && !slices.Contains(a.cfg.QuicPorts, sport) {
			return false
		}
		return a.repair(pkt, info, sport, dport)
	}
	return false
}

// quicFlowKey names one direction of a UDP flow.
type quicFlowKey struct{ src, dst netip.AddrPort }

// quicFlows are a peer's repaired flows leaving this end.
type quicFlows struct {
	mu     sync.Mutex
	m      map[quicFlowKey]*quicFlow
	queued atomic.Int64 // bytes in the flows' queues
}

// quicFlow is one repaired flow: its datagrams wait in q for the routine
// that writes them to the flow's stream.
type quicFlow struct {
	q chan quicDatagram
}

type quicDatagram struct {
	frame []byte // header and packet
	at    time.Time
}

// repair queues a datagram of a repaired flow for its stream, starting
// the flow if it is new. false: carry it as a plain datagram (too many
// flows).
func (a *assoc) repair(pkt []byte, info ipInfo, sport, dport uint16) bool {
	e := a.e
	as := a.cur.Load()
	if as == nil {
		a.connect(false)
		e.stats.TunNoAssoc.Add(1)
		return true
	}
	if len(pkt) > 0xffff {
		return false
	}
	key := quicFlowKey{netip.AddrPortFrom(info.src, sport), netip.AddrPortFrom(info.dst, dport)}
	fs := &a.quic
	size := int64(quicHeaderLen + len(pkt))
	if fs.queued.Load()+size > quicQueuedBytes {
		e.stats.QuicGivenUp.Add(1)
		return true
	}
	now := time.Now()
	d := quicDatagram{frame: appendQuicDatagram(make([]byte, 0, size), pkt, now), at: now}

	fs.mu.Lock()
	f := fs.m[key]
	if f == nil {
		if len(fs.m) >= maxQuicFlows {
			fs.mu.Unlock()
			return false
		}
		if fs.m == nil {
			fs.m = map[quicFlowKey]*quicFlow{}
		}
		f = &quicFlow{q: make(chan quicDatagram, quicQueue)}
		fs.m[key] = f
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			a.runQuicFlow(as, key, f)
		}()
	}
	select {
	case f.q <- d:
		fs.queued.Add(size)
	default:
		e.stats.QuicGivenUp.Add(1)
	}
	fs.mu.Unlock()
	return true
}

// appendQuicDatagram appends the frame of pkt sent at now to b (spec.md,
// "Repaired datagrams").
func appendQuicDatagram(b, pkt []byte, now time.Time) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(pkt)))
	b = binary.BigEndian.AppendUint32(b, uint32(now.UnixMilli()))
	return append(b, pkt...)
}

// runQuicFlow opens the flow's stream on association as and writes the
// flow's datagrams to it until the flow is idle or the association ends.
func (a *assoc) runQuicFlow(as *association, key quicFlowKey, f *quicFlow) {
	e := a.e
	deadline := quicDeadline(a.cfg.Link.RTT)
	st, err := as.sess.OpenStream(flowMeta{kind: metaKindQuic, src: key.src, dst: key.dst}.marshal())
	if err != nil {
		a.log.Debug("repaired flow: cannot open stream", "src", key.src, "dst", key.dst, "err", err)
	}
	idle := time.NewTimer(quicIdle)
	defer idle.Stop()
	write := func(d quicDatagram) {
		a.quic.queued.Add(-int64(len(d.frame)))
		if st == nil || time.Since(d.at) > deadline {
			e.stats.QuicGivenUp.Add(1)
			return
		}
		if _, err := st.Write(d.frame); err != nil {
			e.stats.QuicGivenUp.Add(1)
			st.Reset(codeReset)
			st = nil
			return
		}
		e.stats.QuicRepaired.Add(1)
	}
	for done := false; !done; {
		select {
		case d := <-f.q:
			write(d)
			if !idle.Stop() {
				<-idle.C
			}
			idle.Reset(quicIdle)
			if st == nil {
				done = true // the next datagram starts the flow anew
			}
		case <-idle.C:
			done = true
		case <-as.sess.Done():
			done = true
		case <-e.ctx.Done():
			done = true
		}
	}
	// No datagram joins the queue once the flow is out of the table.
	a.quic.mu.Lock()
	delete(a.quic.m, key)
	a.quic.mu.Unlock()
	for {
		select {
		case d := <-f.q:
			write(d)
			continue
		default:
		}
		break
	}
	if st != nil {
		st.Close()
	}
}

var errQuicFrame = errors.New("malformed repaired datagram")

// readQuicDatagram reads one repaired datagram's frame from r into buf
// (at least quicHeaderLen+0xffff bytes): the IP packet and the sender's
// clock in ms when it was sent.
func readQuicDatagram(r io.Reader, buf []byte) (pkt []byte, sentMS uint32, err error) {
	if _, err := io.ReadFull(r, buf[:quicHeaderLen]); err != nil {
		return nil, 0, err
	}
	n := int(binary.BigEndian.Uint16(buf))
	sentMS = binary.BigEndian.Uint32(buf[2:])
	if n == 0 {
		return nil, 0, errQuicFrame
	}
	if _, err := io.ReadFull(r, buf[:n]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, 0, err
	}
	return buf[:n], sentMS, nil
}

// lateness tells how much later than the earliest a repaired flow's
// datagrams arrive: the sender's clock is not ours, so the delay is
// measured against the smallest difference of the two clocks seen on the
// flow (the path's own delay).
type lateness struct {
	base int32
	seen bool
}

// late returns how late a datagram sent at sentMS (sender's clock) and
// received at nowMS (ours) is.
func (l *lateness) late(sentMS, nowMS uint32) time.Duration {
	d := int32(nowMS - sentMS)
	if !l.seen || d < l.base {
		l.base, l.seen = d, true
	}
	return time.Duration(d-l.base) * time.Millisecond
}

// quicCatchUp is how much faster than the sender sent them a repaired
// flow's datagrams held behind a repair are delivered.
const quicCatchUp = 2

// quicPacer spaces the delivery of a repaired flow's datagrams. Those
// held behind a loss arrive together once it is repaired: written to the
// TUN at once, up to a round trip of them, they overflowed the receiving
// program's socket buffer (a QUIC client's, 200 KB by default on Linux),
// which lost them after all. They are delivered with the gaps the
// sender's clock gives them instead, quicCatchUp times shorter, so the
// flow catches up within half the stall and nothing is dropped.
type quicPacer struct {
	prevSent uint32
	prevAt   time.Time
}

// at returns when the datagram sent at sentMS (sender's clock), which
// arrived at now, is to be delivered.
func (p *quicPacer) at(sentMS uint32, now time.Time) time.Time {
	at := now
	if !p.prevAt.IsZero() {
		gap := max(int32(sentMS-p.prevSent), 0)
		if next := p.prevAt.Add(time.Duration(gap) * time.Millisecond / quicCatchUp); next.After(now) {
			at = next
		}
	}
	p.prevSent, p.prevAt = sentMS, at
	return at
}

// serveQuic writes the datagrams of a flow a peer repairs to the TUN
// (or, at a hub, on to the peer owning the destination), each checked as
// a datagram from the peer would be. Datagrams later than the deadline
// are given up.
func (e *Endpoint) serveQuic(a *assoc, st *scps.Stream, m flowMeta) {
	defer st.Close()
	st.CloseWrite()
	deadline := quicDeadline(a.cfg.Link.RTT)
	bp := tunBufs.Get().(*[]byte)
	defer tunBufs.Put(bp)
	var l lateness
	var pace quicPacer
	for {
		pkt, sent, err := readQuicDatagram(st, *bp)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				e.stats.TunMalformed.Add(1)
				st.Reset(codeDenied)
			}
			return
		}
		info, ok := parseIP(pkt)
		if !ok || info.src != m.src.Addr() || info.dst != m.dst.Addr() {
			e.stats.TunMalformed.Add(1)
			st.Reset(codeDenied)
			return
		}
		now := time.Now()
		if l.late(sent, uint32(now.UnixMilli())) > deadline {
			e.stats.QuicGivenUp.Add(1)
			continue
		}
		if at := pace.at(sent, now); at.After(now) {
			time.Sleep(at.Sub(now))
		}
		a.onDatagram(pkt)
	}
}

// portUnreachable is the ICMP / ICMPv6 port unreachable answering pkt,
// from its destination's address.
func portUnreachable(pkt []byte, info ipInfo) []byte {
	return icmpUnreachable(pkt, info, icmpv4PortUnreach, icmpv6PortUnreach)
}
