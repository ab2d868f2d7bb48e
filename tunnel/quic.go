package tunnel

// QUIC (HTTP/3) toward a peer: UDP to or from one of the peer's quic_ports
// is handled by the peer's quic policy (docs/quic.md):
//
//   - pass: plain datagrams, as any other UDP.
//   - fallback: a datagram toward such a port is answered at once with ICMP
//     port unreachable from its destination, so the client gives QUIC up
//     and uses TCP, which the endpoint accelerates; nothing crosses the hop.
//   - repair: each such flow (5-tuple, one direction) is numbered and
//     carried in association datagrams with one to four parity datagrams
//     per short block (fec.go; spec.md, "Repaired datagrams"), so the
//     receiving endpoint rebuilds what the hop lost without a round trip,
//     and holds the datagrams behind a gap for the few milliseconds until
//     the block's parity arrives: QUIC sees neither the loss nor a
//     reordering, and its congestion control does not back off for the
//     hop, nor does its RTT grow. No packet carries two datagrams of one
//     block (scps.Session.SendDatagramApart), so one lost packet costs a
//     block one datagram, however small they are. What the parities
//     cannot rebuild the receiver asks the sender for again, and holds
//     the flow behind it until it comes, for at most a round trip and a
//     half: QUIC sees a late burst (delay) rather than a loss, which
//     would have cut its window.

import (
	"encoding/binary"
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
	// quicIdle ends a repaired flow after this long without a datagram
	// (QUIC's idle timeouts are of this order); the next datagram starts
	// it anew.
	quicIdle = 30 * time.Second
	// quicQueue bounds the datagrams of one repaired flow waiting for room
	// in the association's datagram queue, and quicQueuedBytes all of a
	// peer's; more are given up (the QUIC sender sees loss and slows down,
	// as it would at a full router queue). Deeper than the association's
	// own 50 ms of datagrams: QUIC's start-up overshoots by far more, and
	// dropped there it backed off below the link's capacity.
	quicQueue       = 2048
	quicQueuedBytes = 2 << 20
	// maxQuicFlows bounds a peer's repaired flows at this end; further
	// flows are carried as plain datagrams.
	maxQuicFlows = 256
	// fecSpan closes a block that has not filled up this long after its
	// first datagram left, so a slow flow's parity is not held back; a
	// flow silent for fecSpan after a block closed has paused, and that
	// block's parities go again (the tail: no later frame would tell the
	// receiver of its losses). Long enough for a block of fecNarrowBlock
	// at 10 Mbit/s (QUIC's 1342-byte packets: 34 ms): cut at 20 ms, its
	// blocks held 16 to 18 datagrams and needed 2 parities each where
	// 32 need 3 (12.5 % against 9.4 %, and a block beyond repair, whose
	// resend holds the flow for a round trip, 4 times as often). A wide
	// block (fecMaxBlock) fills within it from about 20 Mbit/s; below,
	// the link's told rate bounds the block (fecWideBlock). Longer
	// spans, and closing a block at a burst's end, were tried:
	// docs/quic.md ("Wider blocks").
	fecSpan = 40 * time.Millisecond
	// quicHold is the longest the receiver holds a flow's datagrams
	// behind a gap for its block's parity (which follows the block within
	// its span, fecSpan or fecQueuedSpan, and the association's queue of
	// datagrams) before it asks for the gap again. At 100 ms a block of
	// the longer span over the GEO, on a loaded machine, once had its
	// gap asked for before its parities rebuilt it.
	quicHold = fecQueuedSpan + 40*time.Millisecond
	// quicHeldMax bounds the datagrams a flow holds behind a gap, and
	// quicRxBytes those and the parity sums of all of a peer's flows:
	// what arrives over a round trip and a half while a resend comes
	// (1.1 MiB at 10 Mbit/s and 600 ms).
	quicHeldMax = 2048
	quicRxBytes = 3 << 20
	// quicAskMax bounds the gaps a flow has asked for again at once; a
	// wider loss is given up.
	quicAskMax = 256
	// quicKeep is how many of its last datagrams a flow keeps to resend,
	// and quicKeptBytes all of a peer's (beyond, a datagram is not kept
	// and its loss is given up): a round trip and a half at 10 Mbit/s.
	quicKeep      = 1024
	quicKeptBytes = 2 << 20
	// fecRxBlocks is how many recent blocks of a flow the receiver keeps
	// the sums of.
	fecRxBlocks = 4
)

// capFecWide is the capability bit (assocParams.caps, spec.md) of a side
// whose parser takes a repaired flow's blocks of up to fecMaxBlock
// datagrams and fecMaxParities parities; a peer without it (an older
// release) gets blocks of at most fecNarrowBlock and fecNarrowParities.
const capFecWide = 0x02

// fecWideBlock bounds a wide block's datagrams toward a peer whose
// link is told to carry up bit/s: as many full-size datagrams (1432
// bytes on the wire with the frames, seal and UDP/IP) as the link
// carries in a span, from fecNarrowBlock to fecMaxBlock. Full-size
// whatever the block's: a flow's small datagrams (QUIC's
// acknowledgements) come sparse, and their blocks close by the span
// all the same (with the parities of a wide shape, more than a narrow
// one gives them, in a first version). A block the span cuts short
// needs more parities for its datagrams than a shape that fills (at
// 0.7 % loss and 10 Mbit/s, 36 datagrams of a 64 + 3 shape need 3,
// 8.3 %, where 30 + 2 fills, 6.7 %): over the GEO the shapes stay
// near the narrow ones, on a link of 20 Mbit/s and more they widen.
// Untold (0): narrow.
func fecWideBlock(up int64) int {
	return fecBlockIn(up, fecSpan)
}

// fecBlockIn is how many full-size datagrams (1432 bytes on the wire)
// a link told to carry up bit/s sends in span, from fecNarrowBlock to
// fecMaxBlock.
func fecBlockIn(up int64, span time.Duration) int {
	n := int(float64(up) / 8 * span.Seconds() / 1432)
	return min(max(n, fecNarrowBlock), fecMaxBlock)
}

// fecQueuedSpan is the span of a block cut from a standing queue
// (fecBlockShape): its first datagram waited at least this long in the
// flow's queue, and the queue already holds the rest of the block. The
// link is then full and QUIC's packets wait there anyway: what a lost
// datagram adds by waiting for a longer block's parities (up to
// fecQueuedSpan instead of fecSpan) is small against that wait, while
// each parity takes the place of a QUIC packet on the link. Over the GEO
// (10 Mbit/s, 1 % loss) such a block is 54 + 3 (5.6 %) where the span's
// bound gave 34 + 3 (8.8 %). Under quicHold, so that the receiver has
// the parities before it asks for a resend. In QUIC's slow start the
// first packets of each burst find the queue empty, so the round's RTT
// samples (HyStart++'s) keep the short blocks.
const fecQueuedSpan = 2 * fecSpan

// fecBlockShape chooses the shape (k datagrams, m parities) and the span
// of a block opened by a datagram that waited in the flow's queue for
// waited, with queued datagrams behind it, at forward loss p, toward a
// peer that takes wide blocks (wide) over a link told to carry up bit/s.
func fecBlockShape(p float64, wide bool, up int64, waited time.Duration, queued int) (k, m int, span time.Duration) {
	if !wide {
		k, m = fecShape(p, fecNarrowBlock, fecNarrowParities)
		return k, m, fecSpan
	}
	if waited >= fecQueuedSpan {
		if deep := fecBlockIn(up, fecQueuedSpan); queued >= deep-1 {
			k, m = fecShape(p, deep, fecMaxParities)
			if k > fecWideBlock(up) {
				return k, m, fecQueuedSpan
			}
		}
	}
	k, m = fecShape(p, fecWideBlock(up), fecMaxParities)
	return k, m, fecSpan
}

// fecMeasuredLoss is the forward loss the association has seen, from a
// prior of 1 % (a satellite hop's) until it has sent a few hundred
// packets: of the packets it could tell lost, those that carried more
// than an acknowledgement (an ACK-only packet is never declared lost).
// Counted over all packets, an end whose packets mostly acknowledge (a
// TCP download's receiver) takes the hop's loss for less and gives its
// blocks too few parities; over the GEO's QUIC download a tenth of
// site A's packets only acknowledged (0.85 % measured against 0.93 %).
func fecMeasuredLoss(st scps.Stats) float64 {
	return float64(st.PacketsLost+1) / float64(st.PacketsSent-min(st.AckOnlyPacketsSent, st.PacketsSent)+100)
}

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

// quicFlows are a peer's repaired flows: those leaving this end, and the
// receiver's state of those arriving.
type quicFlows struct {
	mu     sync.Mutex
	m      map[quicFlowKey]*quicFlow
	byID   map[uint32]*quicFlow // the same flows, by number (resend requests)
	queued atomic.Int64         // bytes in the flows' queues
	kept   atomic.Int64         // bytes the flows keep to resend
	ids    atomic.Uint32        // the last flow number given out
	rx     quicRx
	rel    quicRelease
}

// quicRelease paces what the receiver delivers in a burst: a flow held
// for a resend releases up to a round trip of datagrams at once, and
// written to the TUN at once they overflowed the QUIC client's socket
// (its RcvbufErrors: 69 drops in one page load). Beyond quicBurst
// datagrams they wait here, in order, and are written at three times
// the peer's configured down rate; whatever follows waits behind them.
// It does no I/O and reads no clock (admit, step): quicDeliver and
// quicPace drive it, the tests in virtual time.
type quicRelease struct {
	mu      sync.Mutex
	q       [][]byte
	bytes   int
	running bool      // the pacer owns the queue (and writes outside mu)
	start   time.Time // the pacer's schedule: sent bytes since start
	sent    int
}

// quicBurst is how many datagrams are written to the TUN at once before
// the rest is paced; quicPaceBatch how many the pacer writes at a time.
const (
	quicBurst     = 32
	quicPaceBatch = 8
)

// admit takes datagrams to deliver, in order (r.mu held). It returns
// those to write now (none while the pacer runs: they queue behind
// it), whether to start the pacer, and how many it dropped because the
// pacer fell too far behind. paced: the peer's down rate is known. A
// datagram that queues is copied: one delivered in order as it came
// aliases the association's packet, valid only during its handler, and
// read later it was another datagram (the release's reordering).
func (r *quicRelease) admit(out [][]byte, paced bool) (now [][]byte, start bool, dropped int) {
	if r.bytes > quicRxBytes {
		// The pacer fell far behind (a stalled TUN): these are lost.
		return nil, false, len(out)
	}
	if !paced || !r.running && len(out) <= quicBurst {
		return out, false, 0
	}
	for _, p := range out {
		r.q = append(r.q, slices.Clone(p))
		r.bytes += len(p)
	}
	if r.running {
		return nil, false, 0
	}
	r.running, r.start, r.sent = true, time.Time{}, 0
	return nil, true, 0
}

// step takes the pacer's next batch at now (r.mu held) and returns when
// the pacer may take the one after, at rate bytes/s; an empty batch:
// the queue is empty, and the pacer stops.
func (r *quicRelease) step(now time.Time, rate int64) (batch [][]byte, next time.Time) {
	n := min(len(r.q), quicPaceBatch)
	if n == 0 {
		r.q, r.bytes, r.running = nil, 0, false
		return nil, time.Time{}
	}
	due := func() time.Time {
		return r.start.Add(time.Duration(float64(r.sent) / float64(rate) * float64(time.Second)))
	}
	if r.start.IsZero() || due().Before(now.Add(-10*time.Millisecond)) {
		r.start, r.sent = now, 0 // no credit for a lull: no burst after it
	}
	batch = slices.Clone(r.q[:n])
	clear(r.q[:n])
	r.q = r.q[n:]
	for _, p := range batch {
		r.bytes -= len(p)
		r.sent += len(p)
	}
	return batch, due()
}

// quicFlow is one repaired flow leaving: its datagrams wait in q for the
// routine that numbers them, adds the parities and hands them to the
// association; it keeps the last it sent, to resend those the receiver
// could not rebuild.
type quicFlow struct {
	q  chan quicDatagram
	id uint32

	mu   sync.Mutex
	kept []quicKept // by sequence number modulo quicKeep
}

// quicKept is a sent datagram kept to resend.
type quicKept struct {
	pkt     []byte // nil: none
	seq     uint32
	index   byte
	at      time.Time // sent
	resent  time.Time // last resent (both copies of a request come)
	expires time.Time
}

type quicDatagram struct {
	pkt []byte
	at  time.Time
}

// repair queues a datagram of a repaired flow, starting the flow if it
// is new. false: carry it as a plain datagram (too many flows).
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
	size := int64(len(pkt))
	if fs.queued.Load()+size > quicQueuedBytes {
		e.stats.QuicGivenUp.Add(1)
		return true
	}
	d := quicDatagram{pkt: slices.Clone(pkt), at: time.Now()}

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
		f = &quicFlow{q: make(chan quicDatagram, quicQueue), id: fs.ids.Add(1)}
		fs.m[key] = f
		if fs.byID == nil {
			fs.byID = map[uint32]*quicFlow{}
		}
		fs.byID[f.id] = f
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

// quicSender numbers a repaired flow's datagrams into blocks and sends
// them with the blocks' parities on association as.
type quicSender struct {
	a        *assoc
	as       *association
	f        *quicFlow
	id       uint32
	seq      uint32        // the next datagram's number
	first    uint32        // the open block's first
	n        int           // datagrams in the open block
	k, m     int           // the open block's shape
	loss     float64       // the forward loss the open block's shape was chosen for
	span     time.Duration // the open block's (fecBlockShape)
	sums     fecSums
	buf      []byte
	deadline time.Duration
	// tail holds the last closed block's parity frames until the flow
	// sends again, to repeat them if it pauses instead.
	tail [][]byte
}

// send hands frame b to the association once its datagram queue has
// room; false if the flow or the association ended first, or the
// datagram (read at) grew older than the deadline meanwhile.
func (s *quicSender) send(b []byte, at time.Time) bool {
	sess := s.as.sess
	for !sess.DatagramRoom(len(b)) {
		if time.Since(at) > s.deadline {
			return false
		}
		// Woken when the association sent packets; the timer is for a
		// wake another flow took.
		t := time.NewTimer(5 * time.Millisecond)
		select {
		case <-sess.DatagramSent():
		case <-t.C:
		case <-sess.Done():
			t.Stop()
			return false
		case <-s.a.e.ctx.Done():
			t.Stop()
			return false
		}
		t.Stop()
	}
	// The block's frames go one to a packet: a lost packet then costs
	// the block one datagram, which a parity rebuilds.
	return sess.SendDatagramApart(b, uint64(s.id)<<32|uint64(s.first)) == nil
}

// keep keeps a sent datagram to resend, within the peer's budget.
func (s *quicSender) keep(seq uint32, index int, pkt []byte, now time.Time) {
	f, fs := s.f, &s.a.quic
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.kept == nil {
		f.kept = make([]quicKept, quicKeep)
	}
	k := &f.kept[seq%quicKeep]
	if k.pkt != nil {
		fs.kept.Add(-int64(len(k.pkt)))
	}
	*k = quicKept{}
	if fs.kept.Load()+int64(len(pkt)) > quicKeptBytes {
		return
	}
	fs.kept.Add(int64(len(pkt)))
	*k = quicKept{pkt: pkt, seq: seq, index: byte(index), at: now, expires: now.Add(s.deadline)}
}

// release gives the kept datagrams' bytes back to the peer's budget.
func (f *quicFlow) release(fs *quicFlows) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range f.kept {
		fs.kept.Add(-int64(len(k.pkt)))
	}
	f.kept = nil
}

// onResend resends the datagrams a resend request asks for, those the
// flow still keeps, each twice, in two packets (a resend comes once,
// with no time for another).
func (a *assoc) onResend(h fecHeader) {
	as := a.cur.Load()
	if as == nil {
		return
	}
	a.quic.mu.Lock()
	f := a.quic.byID[h.flow]
	a.quic.mu.Unlock()
	if f == nil {
		return
	}
	now := time.Now()
	var frames [][]byte
	f.mu.Lock()
	for i := range 64 {
		seq := h.seq + uint32(i)
		if h.mask&(1<<i) == 0 || f.kept == nil {
			continue
		}
		k := &f.kept[seq%quicKeep]
		if k.pkt == nil || k.seq != seq || now.After(k.expires) || now.Sub(k.resent) < 100*time.Millisecond {
			continue
		}
		k.resent = now
		frames = append(frames, appendFecData(nil, f.id, seq, int(k.index), k.pkt))
	}
	f.mu.Unlock()
	for _, fr := range frames {
		a.e.stats.QuicResent.Add(1)
		sendTwice(as, fr, 1<<63|uint64(f.id)<<32|uint64(binary.BigEndian.Uint32(fr[5:])))
	}
}

// sendTwice sends a datagram twice, in two packets (group: the copies').
func sendTwice(as *association, b []byte, group uint64) {
	for range 2 {
		as.sess.SendDatagramApart(b, group)
	}
}

// add sends one datagram of the flow; true when it closed the block.
func (s *quicSender) add(d quicDatagram) bool {
	e := s.a.e
	if s.n == 0 {
		s.tail = s.tail[:0] // this block's frames tell of the last one's losses
		s.loss = fecMeasuredLoss(s.as.sess.Stats())
		s.k, s.m, s.span = fecBlockShape(s.loss, s.as.fecWide.Load(), s.a.cfg.Link.Up, time.Since(d.at), len(s.f.q))
		s.first = s.seq
		s.sums.reset()
	}
	compact := false
	if s.as.fecCompact.Load() && s.n > 0 && s.seq >= fecCompactAfter {
		// A block's first goes whole, so that a receiver that lost the
		// flow's state learns its addresses again within a block.
		s.buf, compact = appendFecCompact(s.buf[:0], s.id, s.seq, s.n, d.pkt)
	}
	if !compact {
		s.buf = appendFecData(s.buf[:0], s.id, s.seq, s.n, d.pkt)
	}
	if len(s.buf) > s.as.sess.MaxDatagramSize() {
		// Too large with the header: it goes as it is, outside the
		// flow's numbering.
		if s.as.sess.SendDatagram(d.pkt) != nil {
			e.stats.QuicGivenUp.Add(1)
		}
		return false
	}
	if !s.send(s.buf, d.at) {
		// Its parity may still rebuild it at the far end, or a resend.
		e.stats.QuicGivenUp.Add(1)
	}
	s.keep(s.seq, s.n, d.pkt, time.Now())
	s.sums.addShard(s.n, d.pkt, s.m)
	s.n++
	s.seq++
	if s.n == s.k {
		s.close()
		return true
	}
	return false
}

// close sends the open block's parities, once, and keeps them in tail.
// A block closed by its span (a slow flow, or the pacing of a QUIC
// sender that fills a block in about fecSpan) is not the last as a rule:
// sending its parities twice made a fifth of a 5 MB download parities.
func (s *quicSender) close() {
	if s.n == 0 {
		return
	}
	now := time.Now()
	s.tail = s.tail[:0]
	m := fecParities(s.loss, s.n, s.m)
	for w := range m {
		fr := appendFecParity(nil, s.id, s.first, s.n, m, byte(w), s.sums.rows[w])
		s.tail = append(s.tail, fr)
		s.a.e.stats.QuicParities.Add(1)
		s.send(fr, now)
	}
	s.n = 0
}

// repeatTail sends the last closed block's parities again: the flow
// paused after it, so no later frame tells the receiver of its losses,
// and a burst that took its last datagrams and its parities still leaves
// a parity to tell.
func (s *quicSender) repeatTail() {
	now := time.Now()
	for _, fr := range s.tail {
		s.a.e.stats.QuicParities.Add(1)
		s.send(fr, now)
	}
	s.tail = s.tail[:0]
}

// quicMarker says when a repaired flow's queue tells QUIC to slow down.
// Once a datagram has waited half a round trip in the flow's queue, one
// datagram is marked (ECN's CE, when the flow is ECN-capable) or
// dropped: cubic takes its window to 0.7, which the queue still covers,
// so the link stays full, where a full queue later dropped hundreds at
// once (a mark costs QUIC no resend). The next mark waits for a
// datagram that entered the queue two round trips after this one left
// it: the cut reaches the sender a round trip after the mark (and the
// association's queue), and those that entered before it say nothing
// of it. Two round trips between marks alone cut ngtcp2's window twice
// for one queue on the GEO (1.21 MB to 854 kB, then 598 kB: under the
// path's 640 kB of QUIC bytes, the link a sixth empty for a second).
type quicMarker struct {
	rtt  time.Duration // the path's
	last time.Time     // the last mark
}

// due reports whether the datagram that entered the queue at and leaves
// it now is to be marked.
func (m *quicMarker) due(at, now time.Time) bool {
	if now.Sub(at) <= m.rtt/2 || !m.last.IsZero() && at.Before(m.last.Add(2*m.rtt)) {
		return false
	}
	m.last = now
	return true
}

// runQuicFlow sends the flow's datagrams on association as until the flow
// is idle or the association ends.
func (a *assoc) runQuicFlow(as *association, key quicFlowKey, f *quicFlow) {
	e := a.e
	s := &quicSender{a: a, as: as, f: f, id: f.id, deadline: quicDeadline(a.cfg.Link.RTT)}
	defer f.release(&a.quic)
	idle := time.NewTimer(quicIdle)
	defer idle.Stop()
	span := time.NewTimer(fecSpan)
	span.Stop()
	// spent fires a deadline after the flow last sent: what it keeps
	// to resend is then past its expiry, and its bytes go back to the
	// peer's budget. Held until the flow idled out (quicIdle), a
	// finished flow's last 1024 datagrams (1.3 MB of 2 MiB) left the
	// next flow toward the peer room to keep only its first 555, and
	// a third none: their losses beyond the parities were given up.
	spent := time.NewTimer(s.deadline)
	spent.Stop()
	defer spent.Stop()
	mark := quicMarker{rtt: max(a.cfg.Link.RTT, 100*time.Millisecond)}
	write := func(d quicDatagram) {
		a.quic.queued.Add(-int64(len(d.pkt)))
		now := time.Now()
		wait := now.Sub(d.at)
		if wait > s.deadline {
			e.stats.QuicGivenUp.Add(1)
			return
		}
		if mark.due(d.at, now) {
			if !markCE(d.pkt) {
				e.stats.QuicGivenUp.Add(1)
				return
			}
			e.stats.QuicMarked.Add(1)
		}
		opened := s.n == 0
		switch closed := s.add(d); {
		case opened && s.n > 0:
			span.Reset(s.span) // close the open block
		case closed:
			span.Reset(fecSpan) // closed full: see whether the flow pauses
		}
		spent.Reset(s.deadline)
	}
	for done := false; !done; {
		select {
		case d := <-f.q:
			write(d)
			if !idle.Stop() {
				<-idle.C
			}
			idle.Reset(quicIdle)
		case <-span.C:
			switch {
			case s.n > 0:
				s.close()
				span.Reset(fecSpan)
			case len(f.q) == 0:
				// Silent for fecSpan since the block closed: a pause.
				s.repeatTail()
			}
		case <-spent.C:
			f.release(&a.quic)
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
	delete(a.quic.byID, f.id)
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
	s.close()
	s.repeatTail()
}

// quicRx is the receiver's state of a peer's repaired flows, by the
// sender's flow number.
type quicRx struct {
	mu     sync.Mutex
	flows  map[uint32]*quicRxFlow
	bytes  int           // held datagrams and parity sums, against quicRxBytes
	now    time.Time     // the frame's arrival, or the timer's
	wait   time.Duration // how long an asked gap is held (0: a second)
	again  time.Duration // how long a resend takes to come (0: never asked twice)
	waitAt time.Time     // when wait was last measured
	asks   [][]byte      // resend requests to send
}

// quicRxFlow delivers one repaired flow in order: a datagram behind a
// gap is held until the gap is rebuilt from its block's parities, or
// comes again from the sender, which the receiver asks for when the
// parities cannot rebuild it, a later block's parity came, or quicHold
// passed; an asked gap not filled a resend's time later is asked for
// once more (quicResendTime), and one not filled within the resend wait
// is given up.
type quicRxFlow struct {
	id     uint32
	next   uint32 // the number of the datagram to deliver next
	held   map[uint32][]byte
	asked  map[uint32]quicAsk // gaps asked for again
	since  time.Time          // when the oldest gap began to hold datagrams
	timer  *time.Timer
	blocks [fecRxBlocks]*fecRxBlock
	last   time.Time // the flow's last frame
	// key is the flow's addresses and ports, from its datagram frames
	// (keyed once known), which its compact frames leave out.
	key   quicFlowKey
	keyed bool
}

// quicAsk is a gap the receiver asked the sender for: until is when it
// is given up, again when it is asked for once more if it has not come
// (zero: not again).
type quicAsk struct{ until, again time.Time }

// fecRxBlock is what the receiver knows of one block.
type fecRxBlock struct {
	first    uint32
	count    int    // 0 until a parity tells
	parities int    // likewise
	got      uint64 // indexes received or rebuilt
	have     uint8  // bit j: parity j received
	sums     fecSums
	done     bool // rebuilt, or known to be beyond repair
}

// before reports whether sequence number x comes before y.
func before(x, y uint32) bool { return int32(x-y) < 0 }

// onRepairFrame takes a repaired flow's frame from the peer's association
// datagrams and delivers what it completes, in order.
func (a *assoc) onRepairFrame(b []byte) {
	if b[0] == fecResend {
		h, _, err := parseFec(b)
		if err != nil {
			a.e.stats.TunMalformed.Add(1)
			return
		}
		a.onResend(h)
		return
	}
	rx := &a.quic.rx
	now := time.Now()
	rx.mu.Lock()
	if now.Sub(rx.waitAt) > time.Second {
		rx.wait, rx.waitAt = a.quicResendWait(), now
		rx.again = a.quicResendTime()
	}
	out, f := rx.take(&a.e.stats, b, now)
	a.quicRxDone(f, out, now)
}

// quicRxDone ends the receiver's work (rx.mu held, and unlocked here):
// it sets f's timer (f nil: none), delivers out, and sends the resend
// requests the work made.
func (a *assoc) quicRxDone(f *quicRxFlow, out [][]byte, now time.Time) {
	rx := &a.quic.rx
	if f != nil {
		rx.arm(a, f, now)
	}
	// Delivered (or queued) under the lock, so that the hold timer's
	// deliveries do not overtake a frame's, nor theirs these.
	a.quicDeliver(out)
	asks := rx.takeAsks()
	rx.mu.Unlock()
	a.sendAsks(asks)
}

// quicDeliver writes a repaired flow's datagrams to the TUN, in order,
// pacing a burst (quicRelease) when the peer's down rate is configured.
// Called with rx.mu held, so that a direct write cannot overtake the
// frame before it; the pacer writes outside both locks, but while it
// runs nothing is written directly.
func (a *assoc) quicDeliver(out [][]byte) {
	if len(out) == 0 {
		return
	}
	r := &a.quic.rel
	rate := 3 * a.cfg.Link.Down / 8 // bytes/s
	r.mu.Lock()
	now, start, dropped := r.admit(out, rate > 0)
	r.mu.Unlock()
	if dropped > 0 {
		a.e.stats.QuicGivenUp.Add(uint64(dropped))
	}
	for _, p := range now {
		a.onIPDatagram(p)
	}
	if start {
		a.e.wg.Add(1)
		go func() {
			defer a.e.wg.Done()
			a.quicPace(rate)
		}()
	}
}

// quicPace writes the release queue's datagrams at rate bytes/s, a few
// at a time, until it is empty.
func (a *assoc) quicPace(rate int64) {
	r := &a.quic.rel
	for {
		r.mu.Lock()
		if a.e.ctx.Err() != nil {
			r.q = nil
			r.bytes = 0
		}
		batch, next := r.step(time.Now(), rate)
		r.mu.Unlock()
		if batch == nil {
			return
		}
		a.e.stats.QuicPaced.Add(uint64(len(batch)))
		for _, p := range batch {
			a.onIPDatagram(p)
		}
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
	}
}

// quicResendWait is how long the receiver holds a flow behind a gap it
// asked for again: the peer's round trip (the request's way there, the
// resend's back) and a half, and 100 ms for the queues. QUIC takes no
// loss meanwhile, as it acknowledges nothing sent after the gap until
// the gap comes.
func (a *assoc) quicResendWait() time.Duration {
	rtt := a.cfg.Link.RTT
	if as := a.cur.Load(); as != nil {
		rtt = max(rtt, as.sess.Stats().SRTT)
	}
	return rtt*3/2 + 100*time.Millisecond
}

// quicResendTime is how long a resend takes to come once asked for:
// the measured round trip (the request's way there, the resend's back)
// and 100 ms for the queues. A gap not filled by then was lost twice on
// the way (both copies of the request, or of the resend: a burst of loss
// takes two packets in a row) and is asked for once more, when another
// resend can still come within the wait (quicRx.ask).
func (a *assoc) quicResendTime() time.Duration {
	rtt := a.cfg.Link.RTT
	if as := a.cur.Load(); as != nil {
		if srtt := as.sess.Stats().SRTT; srtt > 0 {
			rtt = srtt
		}
	}
	return rtt + 100*time.Millisecond
}

// takeAsks returns the resend requests to send (rx.mu held).
func (rx *quicRx) takeAsks() [][]byte {
	asks := rx.asks
	rx.asks = nil
	return asks
}

// sendAsks sends resend requests, each twice, in two packets.
func (a *assoc) sendAsks(asks [][]byte) {
	as := a.cur.Load()
	if as == nil {
		return
	}
	for _, b := range asks {
		sendTwice(as, b, 1<<62|uint64(binary.BigEndian.Uint32(b[1:]))<<32|uint64(binary.BigEndian.Uint32(b[5:])))
	}
}

// take takes one frame (rx.mu held): it returns the datagrams to deliver,
// in order, and the frame's flow (nil if there was no room for it).
func (rx *quicRx) take(st *Stats, b []byte, now time.Time) ([][]byte, *quicRxFlow) {
	h, body, err := parseFec(b)
	if err != nil {
		st.TunMalformed.Add(1)
		return nil, nil
	}
	if h.typ == fecResend {
		return nil, nil // the sender's (onResend)
	}
	rx.now = now
	f := rx.flow(h, now)
	if f == nil {
		if h.typ == fecData {
			return [][]byte{body}, nil // no room to keep its order: as it is
		}
		// A compact frame with no room for its flow: the flow's
		// addresses are not known here, so it is lost.
		return nil, nil
	}
	f.last = now
	switch h.typ {
	case fecData:
		// From every datagram frame, not the first alone: a peer that
		// restarted numbers its flows anew, and a flow's first 64
		// datagrams go as datagram frames.
		if info, ok := parseIP(body); ok && info.proto == protoUDP {
			if key, ok := compactKey(body, info); ok {
				f.key, f.keyed = key, true
			}
		}
		return rx.data(st, f, h, body, nil), f
	case fecCompact:
		if !f.keyed {
			// Its flow's addresses not known yet (the datagram frames
			// before it lost): as if lost, for the parities or a
			// resend (a datagram frame) to fill.
			return nil, f
		}
		pkt, ok := expandCompact(f.key, body)
		if !ok {
			st.TunMalformed.Add(1)
			return nil, f
		}
		return rx.data(st, f, h, pkt, nil), f
	}
	return rx.parity(st, f, h, body, nil), f
}

// flow returns the state of the flow h belongs to, new if need be (and
// anew when h is far from where the flow was: the peer restarted its
// numbering); nil when there is no room for another.
func (rx *quicRx) flow(h fecHeader, now time.Time) *quicRxFlow {
	start := h.seq
	if h.typ == fecData || h.typ == fecCompact {
		start -= uint32(h.index)
	}
	f := rx.flows[h.flow]
	if f != nil && int32(h.seq-f.next) > -1<<16 && int32(h.seq-f.next) < 1<<16 {
		return f
	}
	if f != nil {
		rx.drop(f)
	}
	if len(rx.flows) >= maxQuicFlows {
		for id, g := range rx.flows {
			if now.Sub(g.last) > quicIdle {
				rx.drop(g)
				delete(rx.flows, id)
			}
		}
		if len(rx.flows) >= maxQuicFlows {
			return nil
		}
	}
	if rx.flows == nil {
		rx.flows = map[uint32]*quicRxFlow{}
	}
	f = &quicRxFlow{id: h.flow, next: start, held: map[uint32][]byte{}, asked: map[uint32]quicAsk{}}
	rx.flows[h.flow] = f
	return f
}

// reset forgets every flow: the peer restarted, and numbers its flows
// from 1 again. A new flow under an old one's number, within 2^16 of
// where the old one was, had its first datagrams dropped as delivered.
func (rx *quicRx) reset() {
	rx.mu.Lock()
	defer rx.mu.Unlock()
	for id, f := range rx.flows {
		rx.drop(f)
		delete(rx.flows, id)
	}
}

// drop forgets a flow's held datagrams and sums.
func (rx *quicRx) drop(f *quicRxFlow) {
	for _, p := range f.held {
		rx.bytes -= len(p)
	}
	clear(f.held)
	clear(f.asked)
	for i, blk := range f.blocks {
		if blk != nil {
			rx.bytes -= blk.sums.size()
			f.blocks[i] = nil
		}
	}
	if f.timer != nil {
		f.timer.Stop()
	}
}

// block returns the flow's block starting at first, new if need be (in
// place of the oldest); nil if over the budget.
func (rx *quicRx) block(f *quicRxFlow, first uint32) *fecRxBlock {
	oldest := 0
	for i, blk := range f.blocks {
		if blk == nil {
			oldest = i
			continue
		}
		if blk.first == first {
			return blk
		}
		if f.blocks[oldest] != nil && before(blk.first, f.blocks[oldest].first) {
			oldest = i
		}
	}
	if old := f.blocks[oldest]; old != nil {
		rx.bytes -= old.sums.size()
	}
	f.blocks[oldest] = nil
	if rx.bytes > quicRxBytes {
		return nil
	}
	blk := &fecRxBlock{first: first}
	f.blocks[oldest] = blk
	return blk
}

// grow adds a block's sums' growth to the budget.
func (rx *quicRx) grow(blk *fecRxBlock, add func()) {
	c := blk.sums.size()
	add()
	rx.bytes += blk.sums.size() - c
}

func (rx *quicRx) data(st *Stats, f *quicRxFlow, h fecHeader, pkt []byte, out [][]byte) [][]byte {
	if before(h.seq, f.next) {
		return out // delivered or given up already
	}
	blk := rx.block(f, h.seq-uint32(h.index))
	if blk != nil {
		bit := uint64(1) << h.index
		if blk.got&bit != 0 {
			return out
		}
		blk.got |= bit
		if !blk.done {
			rx.grow(blk, func() { blk.sums.addShard(int(h.index), pkt, fecMaxParities) })
		}
	}
	out = rx.put(st, f, h.seq, pkt, true, out)
	if blk != nil {
		out = rx.rebuild(st, f, blk, out)
	}
	return out
}

func (rx *quicRx) parity(st *Stats, f *quicRxFlow, h fecHeader, sum []byte, out [][]byte) [][]byte {
	if !before(f.next, h.seq+uint32(h.count)) {
		return out // the whole block is past
	}
	blk := rx.block(f, h.seq)
	if blk == nil {
		return out
	}
	if blk.count == 0 {
		blk.count, blk.parities = int(h.count), int(h.parities)
	}
	if blk.count != int(h.count) || blk.parities != int(h.parities) {
		st.TunMalformed.Add(1)
		return out
	}
	if bit := uint8(1) << h.which; blk.have&bit == 0 {
		blk.have |= bit
		if !blk.done {
			rx.grow(blk, func() { blk.sums.foldParity(h.which, sum) })
		}
	}
	// The frames of earlier blocks were all sent before this one: a gap
	// before the block cannot fill from parities any more.
	out = rx.ask(st, f, h.seq, out)
	return rx.rebuild(st, f, blk, out)
}

// rebuild rebuilds a block's missing datagrams once its parities allow,
// and gives them up once its last parity came and they do not.
func (rx *quicRx) rebuild(st *Stats, f *quicRxFlow, blk *fecRxBlock, out [][]byte) [][]byte {
	if blk.done || blk.count == 0 || blk.have == 0 {
		return out
	}
	var missing []int
	for i := range blk.count {
		if blk.got&(1<<i) == 0 {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		blk.done = true
		return out
	}
	if pkts := fecRecover(&blk.sums, blk.have, missing); pkts != nil {
		blk.done = true
		for j, i := range missing {
			blk.got |= 1 << i
			st.QuicRepaired.Add(1)
			// Asked for already (its parities came after quicHold):
			// rebuilt all the same, not held for a resend.
			delete(f.asked, blk.first+uint32(i))
			out = rx.put(st, f, blk.first+uint32(i), slices.Clone(pkts[j]), false, out)
		}
		return out
	}
	// The parities go in order: once the last came, or more are missing
	// than there are parities, nothing more will help.
	if blk.have&(1<<(blk.parities-1)) != 0 || len(missing) > blk.parities {
		// Beyond repair: ask the sender.
		blk.done = true
		out = rx.ask(st, f, blk.first+uint32(blk.count), out)
	}
	return out
}

// put delivers datagram seq if it is the next, holding it otherwise
// (copy: pkt aliases the association's packet).
func (rx *quicRx) put(st *Stats, f *quicRxFlow, seq uint32, pkt []byte, copyIt bool, out [][]byte) [][]byte {
	if before(seq, f.next) {
		return out
	}
	if _, ok := f.asked[seq]; ok {
		// A resend (or a late rebuild) of a gap asked for: the loss
		// became delay.
		delete(f.asked, seq)
		st.QuicHeld.Add(1)
	}
	if seq == f.next {
		f.next++
		return rx.drain(st, f, append(out, pkt))
	}
	if _, ok := f.held[seq]; ok {
		return out
	}
	if len(f.held) >= quicHeldMax || rx.bytes+len(pkt) > quicRxBytes {
		// No room to wait for the gap: give it up.
		out = rx.giveUpBefore(st, f, seq, out)
		f.next++
		return rx.drain(st, f, append(out, pkt))
	}
	if copyIt {
		pkt = slices.Clone(pkt)
	}
	if len(f.held) == 0 {
		f.since = time.Now()
	}
	f.held[seq] = pkt
	rx.bytes += len(pkt)
	return out
}

// drain delivers the held datagrams that follow on.
func (rx *quicRx) drain(st *Stats, f *quicRxFlow, out [][]byte) [][]byte {
	for len(f.held) > 0 {
		p, ok := f.held[f.next]
		if !ok {
			break
		}
		delete(f.held, f.next)
		rx.bytes -= len(p)
		out = append(out, p)
		f.next++
		st.QuicWaited.Add(1)
	}
	if len(f.held) > 0 {
		f.since = time.Now()
	}
	return out
}

// giveUpBefore gives up the gaps before seq and delivers what was held
// behind them.
func (rx *quicRx) giveUpBefore(st *Stats, f *quicRxFlow, seq uint32, out [][]byte) [][]byte {
	if !before(f.next, seq) {
		return out
	}
	// Over the held datagrams (at most quicHeldMax), not the numbers.
	var seqs []uint32
	for s := range f.held {
		if before(s, seq) {
			seqs = append(seqs, s)
		}
	}
	slices.SortFunc(seqs, func(x, y uint32) int { return int(int32(x - y)) })
	st.QuicWaited.Add(uint64(len(seqs)))
	for _, s := range seqs {
		out = append(out, f.held[s])
		rx.bytes -= len(f.held[s])
		delete(f.held, s)
	}
	for s := range f.asked {
		if before(s, seq) {
			delete(f.asked, s)
		}
	}
	st.QuicGivenUp.Add(uint64(seq-f.next) - uint64(len(seqs)))
	f.next = seq
	return rx.drain(st, f, out)
}

// ask asks the sender again for the gaps before seq that are neither
// held nor asked for already (rx.mu held); the flow holds what follows
// until they come or rx.wait passes. A wider loss than quicAskMax gaps
// is given up at once.
func (rx *quicRx) ask(st *Stats, f *quicRxFlow, seq uint32, out [][]byte) [][]byte {
	if !before(f.next, seq) {
		return out
	}
	if seq-f.next > quicHeldMax+fecMaxBlock {
		return rx.giveUpBefore(st, f, seq, out)
	}
	wait := rx.wait
	if wait == 0 {
		wait = time.Second
	}
	ask := quicAsk{until: rx.now.Add(wait)}
	if rx.again > 0 && 2*rx.again <= wait {
		// A second request and its resend fit in the wait.
		ask.again = rx.now.Add(rx.again)
	}
	var seqs []uint32
	for s := f.next; before(s, seq); s++ {
		if _, ok := f.held[s]; ok {
			continue
		}
		if _, ok := f.asked[s]; ok {
			continue
		}
		if len(f.asked) >= quicAskMax {
			return rx.giveUpBefore(st, f, seq, out)
		}
		f.asked[s] = ask
		seqs = append(seqs, s)
	}
	rx.request(f.id, seqs)
	return out
}

// request adds the resend requests for seqs (in order) of flow id, up
// to 64 numbers a request.
func (rx *quicRx) request(id uint32, seqs []uint32) {
	var first uint32
	var mask uint64
	flush := func() {
		if mask != 0 {
			rx.asks = append(rx.asks, appendFecResend(nil, id, first, mask))
		}
		mask = 0
	}
	for _, s := range seqs {
		if mask == 0 || s-first >= 64 {
			flush()
			first = s
		}
		mask |= 1 << (s - first)
	}
	flush()
}

// askAgain asks once more for the asked gaps whose resend has not come
// by their again time (rx.mu held).
func (rx *quicRx) askAgain(f *quicRxFlow, now time.Time) {
	var seqs []uint32
	for s, k := range f.asked {
		if !k.again.IsZero() && !now.Before(k.again) {
			k.again = time.Time{}
			f.asked[s] = k
			seqs = append(seqs, s)
		}
	}
	slices.SortFunc(seqs, func(x, y uint32) int { return int(int32(x - y)) })
	rx.request(f.id, seqs)
}

// expire gives up the asked gaps at the head of the flow whose wait
// passed, and delivers what was held behind them.
func (rx *quicRx) expire(st *Stats, f *quicRxFlow, now time.Time, out [][]byte) [][]byte {
	for len(f.asked) > 0 {
		k, ok := f.asked[f.next]
		if !ok || now.Before(k.until) {
			break
		}
		delete(f.asked, f.next)
		st.QuicGivenUp.Add(1)
		f.next++
		out = rx.drain(st, f, out)
	}
	return out
}

// arm sets the flow's timer while it holds datagrams or waits for asked
// gaps: for the parity's wait (quicHold after the oldest gap began to
// hold), or the first asked gap's.
func (rx *quicRx) arm(a *assoc, f *quicRxFlow, now time.Time) {
	var at time.Time
	if len(f.held) > 0 {
		at = f.since.Add(quicHold)
	}
	if !at.After(now) {
		at = time.Time{}
	}
	for _, k := range f.asked {
		if at.IsZero() || k.until.Before(at) {
			at = k.until
		}
		if !k.again.IsZero() && k.again.Before(at) {
			at = k.again
		}
	}
	if at.IsZero() {
		if len(f.held) == 0 {
			return
		}
		at = now.Add(quicHold)
	}
	wait := at.Sub(now)
	if f.timer == nil {
		id := f.id
		f.timer = time.AfterFunc(wait, func() { a.quicHoldOver(id) })
		return
	}
	f.timer.Reset(wait)
}

// quicHoldOver asks for a flow's gaps that held datagrams for quicHold,
// asks once more for those whose resend has not come in a resend's time,
// and gives up those asked for whose wait passed.
func (a *assoc) quicHoldOver(id uint32) {
	rx := &a.quic.rx
	rx.mu.Lock()
	f := rx.flows[id]
	if f == nil || len(f.held) == 0 && len(f.asked) == 0 {
		rx.mu.Unlock()
		return
	}
	now := time.Now()
	rx.now = now
	a.quicRxDone(f, rx.holdOver(&a.e.stats, f, now), now)
}

// holdOver is quicHoldOver's work on the flow (rx.mu held): it returns
// the datagrams to deliver.
func (rx *quicRx) holdOver(st *Stats, f *quicRxFlow, now time.Time) [][]byte {
	var out [][]byte
	if len(f.held) > 0 && now.Sub(f.since) >= quicHold {
		var high uint32
		first := true
		for seq := range f.held {
			if first || before(high, seq) {
				high, first = seq, false
			}
		}
		out = rx.ask(st, f, high, out)
	}
	rx.askAgain(f, now)
	return rx.expire(st, f, now, out)
}

// markCE marks an ECN-capable IP packet Congestion Experienced (RFC 3168),
// in place; false if it is not ECN-capable (or not IP).
func markCE(pkt []byte) bool {
	if len(pkt) < 20 {
		return false
	}
	switch pkt[0] >> 4 {
	case 4:
		hlen := int(pkt[0]&0x0f) * 4
		if pkt[1]&3 == 0 || hlen < 20 || len(pkt) < hlen {
			return false
		}
		pkt[1] |= 3
		pkt[10], pkt[11] = 0, 0
		binary.BigEndian.PutUint16(pkt[10:], ^checksum(pkt[:hlen], 0))
		return true
	case 6:
		if len(pkt) < 40 || pkt[1]>>4&3 == 0 {
			return false
		}
		pkt[1] |= 0x30
		return true
	}
	return false
}

// portUnreachable is the ICMP / ICMPv6 port unreachable answering pkt,
// from its destination's address.
func portUnreachable(pkt []byte, info ipInfo) []byte {
	return icmpUnreachable(pkt, info, icmpv4PortUnreach, icmpv6PortUnreach)
}
