package tunnel

// assoc ties one configured peer to its SCPS-TP association: it builds the
// scps session from the peer's link settings, seals what the session sends,
// feeds it what the peer sends, accepts the peer's streams, and follows the
// peer's lifecycle (up, down, restarted).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"

	"scpsvpn/configs"
	"scpsvpn/peers"
	"scpsvpn/scps"
)

// maxUDPPayload fits an association packet in one 1500-byte underlay packet
// over IPv4 or IPv6 (1500 - 40 IPv6 - 8 UDP).
const maxUDPPayload = 1452

type assoc struct {
	e   *Endpoint
	cfg configs.PeerConfig
	log *slog.Logger

	// The per-packet path (input, datagrams) reads sess and up without
	// taking mu; mu orders session replacement, close and remote.
	sess atomic.Pointer[scps.Session]
	up   atomic.Bool

	mu     sync.Mutex
	cancel context.CancelFunc // stops the current session's accept loop
	remote uint64             // the peer's association instance, 0 until known
	closed bool

	gen atomic.Uint64 // session generation: a replaced session sends nothing more
}

// addAssocLocked creates the association of a configured peer. e.mu held.
func (e *Endpoint) addAssocLocked(pc configs.PeerConfig) error {
	a := &assoc{e: e, cfg: pc, log: e.log.With("peer", pc.Name)}
	if err := a.newSession(); err != nil {
		return err
	}
	e.assocs[pc.Name] = a
	// Sites that know where the peer is start the handshake at once, so
	// the association is up before the first flow needs it.
	if p, ok := e.dev.Peer(pc.Name); ok && pc.Endpoint.IsValid() {
		if d, ok, err := p.Initiate(); err == nil && ok {
			e.sendUDP(d.Data, d.To)
		}
	}
	return nil
}

// newSession starts a fresh scps session, replacing (and resetting) any
// previous one.
func (a *assoc) newSession() error {
	ourPub := a.e.dev.PublicKey()
	link := a.cfg.Link
	cfg := scps.DefaultConfig()
	cfg.EvenStreams = bytes.Compare(ourPub[:], a.cfg.PublicKey[:]) < 0
	cfg.MaxPacketSize = maxUDPPayload - peers.Overhead
	cfg.WireOverhead = peers.Overhead + 8 + 20
	if a.cfg.Endpoint.Addr().Is6() && !a.cfg.Endpoint.Addr().Is4In6() {
		cfg.WireOverhead = peers.Overhead + 8 + 40
	}
	cfg.InitialRTT = link.RTT
	cfg.SendRate = link.Up
	cfg.RecvRate = link.Down
	cfg.Congestion = link.Congestion
	cfg.Loss = link.Loss
	cfg.OutageAfter = link.OutageAfter
	cfg.ProbeInterval = link.ProbeInterval
	cfg.MaxOutage = link.MaxOutage
	applyLinkConfig(&cfg, link)
	ctx, cancel := context.WithCancel(a.e.ctx)
	gen := a.gen.Add(1)
	sess, err := scps.NewSession(scps.SessionConfig{
		Config:     cfg,
		Transmit:   a.transmitter(gen),
		OnDatagram: a.onDatagram,
		OnState:    a.onState,
		Logger:     a.log.With("part", "scps"),
	})
	if err != nil {
		cancel()
		return fmt.Errorf("peer %s: association: %w", a.cfg.Name, err)
	}
	a.mu.Lock()
	if a.closed {
		// Closed while the session was made (a peer restart or a
		// session's end racing with reload or shutdown): it would run on
		// with nobody to close it.
		a.mu.Unlock()
		cancel()
		sess.Close()
		return nil
	}
	old, oldCancel := a.sess.Swap(sess), a.cancel
	a.cancel = cancel
	a.mu.Unlock()
	if old != nil {
		oldCancel()
		old.Close()
	}
	a.e.wg.Add(2)
	go func() {
		defer a.e.wg.Done()
		a.acceptLoop(ctx, sess)
	}()
	go func() {
		defer a.e.wg.Done()
		a.watch(ctx, sess)
	}()
	return nil
}

// watch replaces a session that ended on its own (an outage longer than
// max_outage, or a protocol error), so the association can begin afresh
// when the peer is heard again.
func (a *assoc) watch(ctx context.Context, sess *scps.Session) {
	select {
	case <-ctx.Done():
		return
	case <-sess.Done():
	}
	a.mu.Lock()
	current := a.sess.Load() == sess && !a.closed
	a.mu.Unlock()
	a.up.Store(false)
	if !current || a.e.ctx.Err() != nil {
		return
	}
	a.log.Info("association down", "reason", sess.Err())
	if err := a.newSession(); err != nil {
		a.log.Error("new association", "err", err)
	}
}

// onState logs the transport's outage transitions.
func (a *assoc) onState(outage bool) {
	wasUp := a.up.Swap(!outage)
	switch {
	case outage && wasUp:
		a.log.Info("association down", "reason", "link outage: probing")
	case !outage && !wasUp:
		a.log.Info("association up", "reason", "link back")
	}
}

func (a *assoc) session() *scps.Session { return a.sess.Load() }

func (a *assoc) acceptLoop(ctx context.Context, sess *scps.Session) {
	for {
		st, err := sess.AcceptStream(ctx)
		if err != nil {
			return
		}
		go a.e.serveStream(a, st)
	}
}

func (a *assoc) openStream(meta []byte) (*scps.Stream, error) {
	a.mu.Lock()
	closed := a.closed
	a.mu.Unlock()
	if closed {
		return nil, errClosed
	}
	return a.session().OpenStream(meta)
}

// speaksFor reports whether the peer may send with source address src: the
// routing lookup of src must return this very peer, as with WireGuard's
// allowed IPs. Containment alone is not enough: a peer allowed 10.0.0.0/8
// must not speak for another peer's 10.1.0.0/24 inside it.
func (a *assoc) speaksFor(src netip.Addr) bool {
	p, ok := a.e.dev.Lookup(src)
	return ok && p.Name() == a.cfg.Name
}

// input takes one decrypted association packet from the peer.
func (a *assoc) input(pkt []byte) {
	if a.up.CompareAndSwap(false, true) {
		a.mu.Lock()
		remote := a.remote
		a.mu.Unlock()
		if remote != 0 {
			a.log.Info("association up", "instance", fmt.Sprintf("%016x", remote))
		}
	}
	a.session().Input(pkt)
}

// established is called when a handshake with the peer completes.
func (a *assoc) established(payload []byte) {
	p, err := parseParams(payload)
	if err != nil {
		a.log.Warn("handshake payload rejected", "err", err)
		return
	}
	a.mu.Lock()
	restarted := a.remote != 0 && a.remote != p.instance
	first := a.remote == 0
	a.remote = p.instance
	a.mu.Unlock()
	wasUp := a.up.Swap(true)
	if restarted {
		a.log.Info("peer restarted: resetting its streams", "instance", fmt.Sprintf("%016x", p.instance))
		if err := a.newSession(); err != nil {
			a.log.Error("new association", "err", err)
		}
	}
	if first || restarted || !wasUp {
		a.log.Info("association up", "instance", fmt.Sprintf("%016x", p.instance), "peer_up", p.up, "peer_down", p.down, "peer_rtt_ms", p.rttMS)
	}
}

func (a *assoc) close() {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	a.closed = true
	cancel := a.cancel
	a.mu.Unlock()
	sess, up := a.session(), a.up.Swap(false)
	cancel()
	sess.Close()
	if up {
		a.log.Info("association down", "reason", "closed")
	}
}

// transmitter returns the session's Transmit callback: it seals each packet
// for the peer and sends the batch. The scratch buffers belong to the one
// session goroutine that calls it.
func (a *assoc) transmitter(gen uint64) func(pkts [][]byte) {
	var bufs [][]byte
	var out [][]byte
	var to netip.AddrPort
	return func(pkts [][]byte) {
		// A session replaced because the peer restarted must not reach
		// the peer's new association (its close would end it).
		if a.gen.Load() != gen {
			return
		}
		p, ok := a.e.dev.Peer(a.cfg.Name)
		if !ok {
			return
		}
		for len(bufs) < len(pkts) {
			bufs = append(bufs, make([]byte, maxUDPPayload+peers.Overhead+64))
		}
		out = out[:0]
		for i, pkt := range pkts {
			sealed, dst, err := p.Seal(pkt, bufs[i])
			if errors.Is(err, peers.ErrNoSession) {
				if d, ok, err := p.Initiate(); err == nil && ok {
					a.e.sendUDP(d.Data, d.To)
				}
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
			_ = other.session().SendDatagram(p)
		}
		return
	}
	a.e.writeTUNPacket(p)
}

// applyLinkConfig carries the optional [peer.link] tuning keys over.
func applyLinkConfig(cfg *scps.Config, link configs.LinkConfig) {
	if link.Window > 0 {
		cfg.StreamWindow = uint64(link.Window)
	}
}
