package tunnel

// assoc ties one configured peer to its SCPS-TP association: it starts an
// association when a handshake with the peer says so, seals what the
// association sends, feeds it what the peer sends, accepts the peer's
// streams, and ends it when either side's association ends.
//
// An association belongs to the handshakes that carry it. It begins with
// a handshake (named by the id both ends compute, peers.Result.Session) and
// goes on through the rekeys whose two payloads both name it; it seals
// only on those sessions and takes packets only from them. So when one end
// loses its association (a restart, an outage longer than max_outage, a
// reload, a protocol error) while the other keeps its own, the next
// handshake, which the losing end starts at once, begins a fresh
// association at both ends: the other end resets the flows of its old one
// within that handshake, and neither end ever feeds a new association
// packets of an old one.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"scpsvpn/configs"
	"scpsvpn/peers"
	"scpsvpn/scps"
	"scpsvpn/scps/settings"
)

// sealGrowth is how much more than for packet number 0 the seal adds to
// packet pn (scps.Config.HeaderGrowth).
func sealGrowth(pn uint64) int { return peers.OverheadFor(pn) - peers.OverheadFor(0) }

// associationWait is how long a new flow waits for an association that is
// not up (the first handshake, or the one after either side's association
// ended), on top of two configured round trips. Beyond it the flow is
// refused: a client learns at once that the far site is unreachable
// rather than hanging until its own timeout. A handshake retransmits after
// 1 and 3 s, so two lost initiations still fit.
const associationWait = 5 * time.Second

var errNotUp = errors.New("no association with the peer (handshake not answered)")

type assoc struct {
	e    *Endpoint
	cfg  configs.PeerConfig
	scfg scps.Config // built from cfg.Link and checked when the peer is configured
	log  *slog.Logger
	// guess sizes packets for the peer until an association begins with
	// its endpoint known (packetsize.go); tunMTU is our TUN's, the largest
	// non-TCP packet the LAN may hand us for the peer.
	guess  netip.Addr
	tunMTU int
	// memory is the association's part of [interface] memory
	// (memory.go); a reload may change it.
	memory atomic.Uint64
	// maxStreams bounds the streams the peer may open (from [interface]
	// max_flows). Everything the association needs of the endpoint's
	// settings is copied here when it is made, under e.mu: begin runs on
	// the peer's receive routine, which must not read e.cfg while Reload
	// replaces it.
	maxStreams int

	// The per-packet path reads cur and up without taking mu.
	cur atomic.Pointer[association] // nil while there is none
	up  atomic.Bool                 // an association exists and is not in an outage

	mu      sync.Mutex
	closed  bool
	ready   chan struct{} // closed when an association begins; new after it ends
	seeking time.Time     // since when a flow has been waiting for an association
	remote  uint64        // the peer's endpoint instance from its last handshake

	quota peerQuotas // what the peer holds here (quota.go)
	quic  quicFlows  // the repaired QUIC flows toward the peer (quic.go)
	// measuredUp is the highest delivery rate toward the peer, bit/s
	// (uplink.go); the timers routine alone uses it.
	measuredUp int64

	// psocks are the sockets of the peer's configured paths, by path
	// number; nil where one could not be opened (multipath.go).
	psocks []PacketConn

	rx     *peerRx            // the peer's decrypted packets and handshakes (peerrx.go)
	stopRx context.CancelFunc // ends the routine draining rx; nil until started
}

// association is one SCPS-TP association with the peer and the handshakes
// (peers sessions) it runs on.
type association struct {
	id     uint64 // the handshake that began it
	sess   *scps.Session
	cancel context.CancelFunc
	// sessions are the ids of its handshakes, newest last in a ring; only
	// the current and previous peers sessions can still carry packets, so
	// a few suffice.
	sessions [4]atomic.Uint64
	next     int           // ring position; written by the handshake path only
	send     atomic.Uint64 // the session to seal on: the newest
	dead     atomic.Bool   // ended here: it sends nothing more
	learned  learnedPaths  // its paths' addresses, when it runs several (multipath.go)
	// fecWide: the peer takes a repaired flow's wide blocks (capFecWide,
	// quic.go); set as the association begins.
	fecWide atomic.Bool
	// fecCompact: the peer takes compact datagram frames (capFecCompact,
	// fec_compact.go); set as the association begins.
	fecCompact atomic.Bool
}

func (as *association) carries(id uint64) bool {
	for i := range as.sessions {
		if as.sessions[i].Load() == id {
			return true
		}
	}
	return false
}

func (as *association) addSession(id uint64) {
	as.sessions[as.next%len(as.sessions)].Store(id)
	as.next++
	as.send.Store(id)
}

// newAssoc prepares the association of a configured peer; its scps
// configuration is checked here, so a peer that cannot run is refused
// before anything changes.
func (e *Endpoint) newAssoc(pc configs.PeerConfig, peers int) (*assoc, error) {
	m := splitPeerMemory(e.cfg.Memory, peers)
	a := &assoc{e: e, cfg: pc, log: e.log.With("peer", pc.Name), ready: make(chan struct{}), rx: newPeerRx(&e.stats.RxQueueDrops, m.rxQueue),
		guess: underlayGuess(pc, e.cfg.Listen), tunMTU: e.cfg.MTU, maxStreams: peerStreams(e.cfg.MaxFlows)}
	a.memory.Store(m.assoc)
	a.scfg = a.sessionConfig(a.guess)
	if err := a.scfg.Validate(); err != nil {
		return nil, fmt.Errorf("peer %s: association: %w", pc.Name, err)
	}
	return a, nil
}

// startLocked makes a the peer's association and, for a site that knows
// where the peer is, starts the handshake at once, so the association is
// up before the first flow needs it. e.mu held.
func (e *Endpoint) startLocked(a *assoc) {
	// The path sockets exist before anything the peer sends can begin
	// an association that sends on them.
	if len(a.cfg.Paths) > 0 {
		e.openPaths(a)
	}
	ctx, stop := context.WithCancel(e.ctx)
	a.mu.Lock()
	a.stopRx = stop
	a.mu.Unlock()
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		a.rx.run(ctx, a.handleRx)
	}()
	e.assocs[a.cfg.Name] = a
	e.announce.Store(a.cfg.Name, a)
	if a.cfg.Endpoint.IsValid() {
		a.connect(true)
	}
}

// capTailParity is the capability bit (assocParams.caps, spec.md) of a
// side whose association takes PARITY frames (scps/spec.md) and keeps
// the payloads of its newest packets for them: toward a peer without it
// (an older release, whose parser drops the packet as malformed) no
// parity goes out.
const capTailParity = 0x08

// capPathRoles is the capability bit (assocParams.caps, spec.md) of a
// side whose association takes PATH_ROLE frames (scps/spec.md): toward a
// peer without it (an older release, whose parser drops the packet as
// malformed) the path probes say nothing of the paths' roles.
const capPathRoles = 0x10

// sessionConfig is the association's configuration for a peer reached
// at underlay address addr: full packets fill the path MTU.
func (a *assoc) sessionConfig(addr netip.Addr) scps.Config {
	ourPub := a.e.dev.PublicKey()
	link := a.cfg.Link
	cfg := scps.DefaultConfig()
	cfg.EvenStreams = bytes.Compare(ourPub[:], a.cfg.PublicKey[:]) < 0
	// The seal's header grows with the packet number it carries
	// (peers.HeaderLen): packets shrink to match, so each datagram fills
	// the path and no more.
	cfg.MaxPacketSize = maxDatagram(link.MTU, addr) - peers.OverheadFor(0)
	// Packets may move between paths: each must fit every path.
	for _, pc := range a.cfg.Paths {
		cfg.MaxPacketSize = min(cfg.MaxPacketSize, maxDatagram(pc.Link.MTU, pc.Endpoint.Addr())-peers.OverheadFor(0))
	}
	cfg.WireOverhead = peers.OverheadFor(0) + underlayHeaders(addr)
	cfg.HeaderGrowth = sealGrowth
	applyLink(&cfg, link)
	cfg.Memory = a.memory.Load()
	cfg.MaxStreams = a.maxStreams
	return cfg
}

// applyLink sets the association's knobs that the peer's [peer.link]
// table gives; configs has checked them against the same bounds
// (scps/settings).
func applyLink(cfg *scps.Config, link configs.LinkConfig) {
	cfg.InitialRTT = link.RTT
	cfg.SendRate = link.Up
	cfg.RecvRate = link.Down
	cfg.Congestion = link.Congestion
	cfg.Loss = link.Loss
	cfg.OutageAfter = link.OutageAfter
	cfg.ProbeInterval = link.ProbeInterval
	cfg.MaxOutage = link.MaxOutage
	if link.Window > 0 {
		cfg.StreamWindow = uint64(link.Window)
	}
}

// untoldRates drops the rates [peer.link] told an association whose
// paths are all learned from a peer that runs several: those rates are
// one link's, and which learned path is that link this side cannot tell
// (path 0 is whichever link the peer's first packet came over first, the
// short one more often than not). Told them, it paced its cellular path
// at the GEO link's rate, and bonded at 63% of the two links. Each path
// then finds its rate as when told none; rtt and window still count.
func untoldRates(cfg *scps.Config) {
	cfg.SendRate, cfg.RecvRate = 0, 0
	if cfg.Congestion == settings.CongestionRate {
		// Open loop at a told rate: nothing left to send at.
		cfg.Congestion = ""
	}
}

// payload is our handshake payload for the peer. It is called by peers
// with the peer's lock held, so it reads only atomics.
func (a *assoc) payload() []byte {
	p := assocParams{version: wireVersion, caps: a.multipathCaps() | capFecWide | capFecCompact | capTailParity | capPathRoles, instance: a.e.instance}
	if as := a.cur.Load(); as != nil {
		p.assoc = as.id
	}
	l := a.cfg.Link
	p.up, p.down = uint64(l.Up), uint64(l.Down)
	p.rttMS = uint64(l.RTT / time.Millisecond)
	return p.marshal()
}

// connect asks peers for a handshake although a session may be current,
// and sends it. fresh: our payload changed, so the handshake must carry the
// new one.
func (a *assoc) connect(fresh bool) error {
	p, ok := a.e.dev.Peer(a.cfg.Name)
	if !ok {
		return peers.ErrPeerRemoved
	}
	d, ok, err := p.Connect(fresh)
	if ok {
		a.e.sendUDP(d.Data, d.To)
	}
	return err
}

// established is called when a handshake with the peer completes, with our
// and the peer's payloads in it. Both ends see the same two payloads and
// so decide alike: a handshake whose payloads both name one association
// carries it on (a rekey); any other begins a new association.
func (a *assoc) established(id uint64, local, remote []byte, rtt time.Duration, responder bool) {
	theirs, err := parseParams(remote)
	if err != nil {
		a.log.Warn("handshake payload rejected", "err", err)
		return
	}
	ours, err := parseParams(local)
	if err != nil {
		a.log.Error("our own handshake payload", "err", err)
		return
	}
	if ours.assoc == 0 || ours.assoc != theirs.assoc {
		a.begin(id, theirs, rtt, responder)
		return
	}
	if as := a.cur.Load(); as != nil && as.id == ours.assoc {
		as.addSession(id)
		return
	}
	// The peer goes on with an association that ended here after our
	// payload was made: a handshake with our payload of now sorts it out.
	a.log.Info("handshake names an association that has ended: handshaking again", "association", fmt.Sprintf("%016x", ours.assoc))
	a.connect(true)
}

// begin starts the association that handshake id began, ending the one
// before (its flows are reset: the peer's side of it is gone). Either
// side sends a path train (scps Association.ProbePath) when it has no
// saved path to resume, scps.PathTrainWait after the later of the two
// came up (the responder comes up a one way after the initiator, on its
// first packet: scps.PathTrainAfter), so that the answer to whichever
// side asks goes on a path its train timed. A side whose flows go first
// (a remote site's terminal, restarted or woken, with flows waiting)
// drops its train: on a thin return link (64 kbit/s) a train ahead of
// them delays them by a second or more (docs/startup.md).
func (a *assoc) begin(id uint64, theirs assocParams, rtt time.Duration, responder bool) {
	a.mu.Lock()
	restarted := a.remote != 0 && a.remote != theirs.instance
	a.mu.Unlock()
	if restarted {
		// Before the new session delivers a frame: the peer numbers
		// its repaired flows from 1 again.
		a.quic.rx.reset()
	}
	as := &association{id: id}
	as.addSession(id)
	as.learned.on = len(a.cfg.Paths) > 0 || theirs.caps&capMultipath != 0
	as.learned.first = len(a.cfg.Paths)
	as.fecWide.Store(theirs.caps&capFecWide != 0)
	as.fecCompact.Store(theirs.caps&capFecCompact != 0)
	ctx, cancel := context.WithCancel(a.e.ctx)
	as.cancel = cancel
	// The handshake came from the peer's endpoint, so its family is known
	// now; packets keep this size for the association's life.
	scfg := a.scfg
	if p, ok := a.e.dev.Peer(a.cfg.Name); ok && p.Endpoint().IsValid() {
		scfg = a.sessionConfig(p.Endpoint().Addr())
	}
	if len(a.cfg.Paths) == 0 && as.learned.on {
		untoldRates(&scfg)
	}
	// Parity at a burst's end only toward a peer that takes it (and
	// keeps the payloads it needs); both sides of one release do.
	scfg.TailParity = theirs.caps&capTailParity != 0
	// Our paths' roles in their probes only toward a peer that takes
	// them.
	scfg.PathRoles = theirs.caps&capPathRoles != 0
	scfg.Resume = a.resumeFrom(rtt)
	if r := scfg.Resume.Saved; r.Rate > 0 {
		a.log.Info("resuming at the path saved", "rate_bps", int64(r.Rate*8), "min_rtt", r.MinRTT, "age", time.Since(r.At).Round(time.Second))
	}
	sess, err := scps.NewSession(scps.SessionConfig{
		Config:     scfg,
		Transmit:   a.transmitter(as, scfg.MaxPacketSize+peers.Overhead),
		OnDatagram: a.onDatagram,
		OnState:    a.onState,
		Paths:      a.pathOptions(as.learned.on),
		Logger:     a.log.With("part", "scps"),
	})
	if err != nil {
		cancel()
		a.log.Error("new association", "err", err)
		return
	}
	as.sess = sess
	a.mu.Lock()
	if a.closed {
		// Closed while the handshake completed (reload or shutdown): it
		// would run on with nobody to close it.
		a.mu.Unlock()
		as.dead.Store(true)
		cancel()
		sess.Close()
		return
	}
	old := a.cur.Swap(as)
	a.remote = theirs.instance
	a.seeking = time.Time{}
	if old == nil {
		close(a.ready) // open since the last association ended
	}
	a.mu.Unlock()
	// A reload that re-split the budget while the session was made.
	if m := a.memory.Load(); m != scfg.Memory {
		if err := sess.SetMemory(m); err != nil {
			a.log.Error("association memory", "err", err)
		}
	}
	if old != nil {
		if restarted {
			a.log.Info("peer restarted: resetting its streams", "instance", fmt.Sprintf("%016x", theirs.instance))
		} else {
			a.log.Info("peer's association ended: resetting its streams")
		}
		a.end(old)
	}
	if wait := scps.PathTrainAfter(responder, rtt); sess.ProbePath(wait) {
		a.log.Info("path train due", "after", wait, "responder", responder)
	}
	a.up.Store(true)
	a.e.wg.Add(2)
	go func() {
		defer a.e.wg.Done()
		a.acceptLoop(ctx, sess)
	}()
	go func() {
		defer a.e.wg.Done()
		a.watch(ctx, as)
	}()
	a.log.Info("association up", "instance", fmt.Sprintf("%016x", theirs.instance), "association", fmt.Sprintf("%016x", id),
		"peer_up", theirs.up, "peer_down", theirs.down, "peer_rtt_ms", theirs.rttMS, "packet", scfg.MaxPacketSize+peers.OverheadFor(0))
	if m := sess.MaxDatagramSize(); m < a.tunMTU {
		a.log.Warn("non-TCP packets larger than the path to the peer carries are dropped: lower interface.mtu or raise this peer's link.mtu",
			"largest", m, "interface.mtu", a.tunMTU, "link.mtu", a.cfg.Link.MTU)
	}
}

// setMemory gives the peer its new part of the budget after a reload,
// its running association included: one with a smaller part takes only
// what that allows from now on, and is within it once the data it holds
// is read or acknowledged (scps.Association.SetMemory). An association
// that begins meanwhile takes it up itself (begin).
func (a *assoc) setMemory(m peerMemory) {
	a.rx.limit.Store(m.rxQueue)
	if a.memory.Swap(m.assoc) == m.assoc {
		return
	}
	if as := a.cur.Load(); as != nil {
		if err := as.sess.SetMemory(m.assoc); err != nil {
			a.log.Error("association memory", "err", err)
		}
	}
}

// end stops an association that is no longer current: nothing of it may
// reach the peer, whose side of it is gone (a close would end the peer's
// new association), so it goes silently; its streams are reset locally.
func (a *assoc) end(as *association) {
	a.observePath(as)
	as.dead.Store(true)
	as.cancel()
	as.sess.Close()
}

// detach makes as no longer current, if it still is, and readies the wait
// for the next association.
func (a *assoc) detach(as *association) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.cur.CompareAndSwap(as, nil) {
		return false
	}
	a.up.Store(false)
	if !a.closed {
		a.ready = make(chan struct{})
	}
	return true
}

// watch notices an association that ended on its own (an outage longer
// than max_outage, the peer's CLOSE, a protocol error) and handshakes
// afresh, so the peer learns at once that its side must end too and the
// next association can begin.
func (a *assoc) watch(ctx context.Context, as *association) {
	select {
	case <-ctx.Done():
		return
	case <-as.sess.Done():
	}
	a.observePath(as)
	if !a.detach(as) || a.e.ctx.Err() != nil {
		return
	}
	as.cancel()
	a.log.Info("association down", "reason", as.sess.Err())
	a.connect(true)
}

// onState logs the transport's outage transitions. Entering an outage
// also starts a handshake at once, even right after one completed: if the
// peer is gone rather than silent (it restarted and cannot reach us, or
// its association ended), the handshake is what tells us, and the flows
// of the dead association are reset instead of waiting out max_outage.
func (a *assoc) onState(outage bool) {
	wasUp := a.up.Swap(!outage && a.cur.Load() != nil)
	switch {
	case outage && wasUp:
		a.log.Info("association down", "reason", "link outage: probing")
		a.connect(true)
	case !outage && !wasUp:
		a.log.Info("association up", "reason", "link back")
	}
}

// current returns the association, nil if there is none.
func (a *assoc) current() *association { return a.cur.Load() }

// stats returns the association's counters, zero if there is none.
func (a *assoc) stats() scps.Stats {
	if as := a.cur.Load(); as != nil {
		return as.sess.Stats()
	}
	return scps.Stats{}
}

func (a *assoc) acceptLoop(ctx context.Context, sess *scps.Session) {
	for {
		st, err := sess.AcceptStream(ctx)
		if err != nil {
			return
		}
		go a.e.serveStream(a, st)
	}
}

// waitAssociation returns the association for a new flow, waiting while
// a handshake that may bring one is young: up to associationWait plus two
// configured round trips after the first flow began to wait. While the
// peer stays unreachable beyond that, flows are refused at once; each
// handshake attempt (peers gives one up after 90 s) gets that wait anew.
func (a *assoc) waitAssociation(ctx context.Context) (*association, error) {
	wait := associationWait + 2*a.cfg.Link.RTT
	for {
		if as := a.cur.Load(); as != nil {
			return as, nil
		}
		now := time.Now()
		a.mu.Lock()
		if a.closed {
			a.mu.Unlock()
			return nil, errClosed
		}
		if a.seeking.IsZero() || now.Sub(a.seeking) > 90*time.Second {
			a.seeking = now
		}
		ready, deadline := a.ready, a.seeking.Add(wait)
		a.mu.Unlock()
		if err := a.connect(false); err != nil {
			return nil, fmt.Errorf("%w: %w", errNotUp, err)
		}
		if !now.Before(deadline) {
			return nil, errNotUp
		}
		t := time.NewTimer(deadline.Sub(now))
		select {
		case <-ready:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
		t.Stop()
	}
}

// openStream opens a stream for a new flow, waiting for the association
// if it is not up.
func (a *assoc) openStream(ctx context.Context, meta []byte) (*scps.Stream, error) {
	as, err := a.waitAssociation(ctx)
	if err != nil {
		return nil, err
	}
	return as.sess.OpenStream(meta)
}

// sendDatagram sends a datagram on the association; without one it is
// dropped and a handshake is started.
func (a *assoc) sendDatagram(p []byte) error {
	as := a.cur.Load()
	if as == nil {
		a.connect(false)
		return errNotUp
	}
	return as.sess.SendDatagram(p)
}

// speaksFor reports whether the peer may send with source address src: the
// routing lookup of src must return this very peer, as with WireGuard's
// allowed IPs. Containment alone is not enough: a peer allowed 10.0.0.0/8
// must not speak for another peer's 10.1.0.0/24 inside it.
func (a *assoc) speaksFor(src netip.Addr) bool {
	p, ok := a.e.dev.Lookup(src)
	return ok && p.Name() == a.cfg.Name
}

// handleRx runs on the peer's receive routine, in arrival order.
func (a *assoc) handleRx(it rxItem) {
	if it.established {
		a.established(it.session, it.local, it.remote, it.rtt, it.responder)
		return
	}
	a.input(it)
}

// input takes one decrypted association packet from the peer, number
// it.pn (the counter it was sealed with), which came on session
// it.session. Packets of sessions that do not carry the current
// association (an older association's, or a session whose handshake began
// none) are dropped: they belong to state that no longer exists here.
func (a *assoc) input(it rxItem) {
	as := a.cur.Load()
	if as == nil || !as.carries(it.session) {
		a.e.stats.UDPStale.Add(1)
		return
	}
	pkt := (*it.buf)[:it.n]
	if !as.learned.on {
		as.sess.InputArrived(0, it.pn, pkt, it.at)
		return
	}
	as.sess.InputArrived(a.pathOf(as, it), it.pn, pkt, it.at)
}

// close ends the association for good (the peer was removed or changed,
// or the endpoint stops). Unlike end, its CLOSE goes to the peer, whose
// side then ends at once too.
func (a *assoc) close() {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	a.closed = true
	as := a.cur.Swap(nil)
	stopRx := a.stopRx
	a.mu.Unlock()
	if stopRx != nil {
		stopRx()
	}
	a.e.closePaths(a)
	up := a.up.Swap(false)
	if as == nil {
		return
	}
	as.cancel()
	as.sess.Close()
	as.dead.Store(true)
	if up {
		a.log.Info("association down", "reason", "closed")
	}
}

// transmitter returns an association's Transmit callback: it seals each
// packet for the peer, on a session of the association, and sends the
// batch. The scratch buffers belong to the one session goroutine that
// calls it.
func (a *assoc) transmitter(as *association, size int) func(pkts []scps.Packet) {
	var bufs [][]byte
	var out [][]byte
	var to netip.AddrPort
	return func(pkts []scps.Packet) {
		if as.dead.Load() {
			return
		}
		p, ok := a.e.dev.Peer(a.cfg.Name)
		if !ok {
			return
		}
		for len(bufs) < len(pkts) {
			bufs = append(bufs, make([]byte, size))
		}
		if as.learned.on {
			a.sendPaths(as, p, pkts, bufs)
			return
		}
		out = out[:0]
		for i, pkt := range pkts {
			// The packet number is the seal's counter: it crosses once,
			// in the peers header, and makes the nonce.
			sealed, dst, err := p.SealOn(as.send.Load(), pkt.Number, pkt.Data, bufs[i])
			if errors.Is(err, peers.ErrNoSession) {
				// Its sessions expired (an outage beyond the session
				// lifetime): a handshake carries the association on.
				a.connect(false)
				break // the transport retransmits once the session is up
			}
			if err != nil || !dst.IsValid() {
				break
			}
			out, to = append(out, sealed), dst
		}
		if len(out) > 0 {
			if err := a.e.sock.Send(out, to); err != nil && a.e.ctx.Err() == nil {
				a.log.Debug("UDP send", "to", to, "err", err)
			}
		}
	}
}

// onDatagram writes a peer's datagram to the TUN unchanged, if the peer may
// speak for its source.
func (a *assoc) onDatagram(p []byte) {
	if len(p) == 0 {
		return
	}
	if p[0] == fecData || p[0] == fecParity || p[0] == fecResend || p[0] == fecCompact {
		a.onRepairFrame(p) // a repaired QUIC flow's (quic.go)
		return
	}
	a.onIPDatagram(p)
}

// onIPDatagram is onDatagram for an IP packet: a datagram's, or one a
// repaired flow delivers.
func (a *assoc) onIPDatagram(p []byte) {
	if len(p) == 0 {
		return
	}
	info, ok := parseIP(p)
	if !ok {
		a.e.stats.TunMalformed.Add(1)
		return
	}
	if !a.speaksFor(info.src) {
		a.e.stats.DatagramsBadSrc.Add(1)
		return
	}
	a.e.stats.DatagramsIn.Add(1)
	// A hub relays datagrams between its peers directly.
	if other := a.e.assocFor(info.dst); other != nil {
		if other != a {
			a.relayDatagram(other, p)
		}
		return
	}
	a.e.writeTUNPacket(p)
}
