// peer.go owns one peer's state: its configuration, learned endpoint, the
// session slots (current, previous, responder sessions awaiting
// confirmation), the handshake attempt in progress and its timers, and the
// per-packet Seal.
//
// Session rotation: a new session becomes current as soon as it is usable
// for sending (initiator: on the response; responder: on the first packet
// the initiator sends with it). The session it replaces stays as previous
// until the next rotation or RejectAfterTime, so packets the peer sealed
// before it switched — up to a satellite RTT of them — still decrypt.

package peers

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// maxInitiations is how many of our initiations stay answerable: a
	// response to any of them completes the handshake, so an RTT longer
	// than the retransmission interval (outage, deep modem queue) still
	// converges.
	maxInitiations = 4
	// maxPending bounds responder sessions awaiting confirmation, for the
	// same reason in the other direction.
	maxPending = 4
)

// Peer is one configured remote site. Handles stay valid across SetPeers
// while the peer keeps its name; after removal its methods fail with
// ErrPeerRemoved.
type Peer struct {
	dev  *Device
	name string

	endpoint    atomic.Pointer[netip.AddrPort]
	current     atomic.Pointer[session]
	previous    atomic.Pointer[session] // written under mu
	removed     atomic.Bool
	rekeyWanted atomic.Bool   // a send limit was crossed
	handshakes  atomic.Uint64 // sessions with this peer that became current
	up          atomic.Int64  // PeerConfig.Up
	measuredUp  atomic.Int64  // SetMeasuredUp

	mu         sync.Mutex
	key        Key
	mac1       [32]byte // key of the MAC on handshake messages to this peer
	subnets    []netip.Prefix
	configured netip.AddrPort // endpoint from the configuration
	pending    []*session     // responder sessions, oldest first
	inits      []*initiation
	hsStarted  time.Time // start of the current attempt
	hsNext     time.Time // next retransmission
	hsSent     int       // initiations sent in this attempt
	lastInitTS uint64    // newest initiation timestamp accepted from the peer
	lastSentTS uint64    // newest timestamp we sent
	lastHS     time.Time
	cookieKey  [32]byte        // decrypts the peer's cookie replies
	cookie     [cookieLen]byte // the latest cookie from the peer, for mac2
	cookieAt   time.Time       // when it came; zero if never
}

func newPeer(d *Device, c PeerConfig, subnets []netip.Prefix) *Peer {
	p := &Peer{dev: d, name: c.Name, key: c.PublicKey, mac1: mac1Key(c.PublicKey), cookieKey: cookieKey(c.PublicKey), subnets: subnets, configured: c.Endpoint}
	if c.Endpoint.IsValid() {
		ep := c.Endpoint
		p.endpoint.Store(&ep)
	}
	p.up.Store(c.Up)
	return p
}

func (p *Peer) reconfigure(c PeerConfig, subnets []netip.Prefix) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up.Store(c.Up)
	if c.PublicKey != p.key {
		p.resetLocked()
		p.key = c.PublicKey
		p.mac1 = mac1Key(c.PublicKey)
		p.cookieKey = cookieKey(c.PublicKey)
		p.cookieAt = time.Time{}
		p.lastInitTS = 0
		p.dev.log.Info("peer key changed: sessions dropped", "peer", p.name, "key", c.PublicKey.String())
	}
	if c.Endpoint != p.configured {
		p.configured = c.Endpoint
		if c.Endpoint.IsValid() {
			ep := c.Endpoint
			p.endpoint.Store(&ep)
		}
	}
	p.subnets = subnets
}

func (p *Peer) remove() {
	p.removed.Store(true)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resetLocked()
}

// resetLocked drops every session and handshake of the peer.
func (p *Peer) resetLocked() {
	d := p.dev
	d.kill(p.current.Swap(nil))
	d.kill(p.previous.Swap(nil))
	for _, s := range p.pending {
		d.kill(s)
	}
	p.pending = nil
	p.clearInitsLocked()
	p.rekeyWanted.Store(false)
}

func (p *Peer) clearInitsLocked() {
	for _, ini := range p.inits {
		p.dev.freeIndex(ini.local, nil, ini)
	}
	p.inits = nil
}

// Name is the configured name.
func (p *Peer) Name() string { return p.name }

// PublicKey is the peer's configured static key.
func (p *Peer) PublicKey() Key {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.key
}

// Subnets are the peer's normalised subnets.
func (p *Peer) Subnets() []netip.Prefix {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.subnets)
}

// Endpoint is where the peer's datagrams go: the configured endpoint until
// an authenticated packet arrives from elsewhere. Zero if unknown.
func (p *Peer) Endpoint() netip.AddrPort {
	if ep := p.endpoint.Load(); ep != nil {
		return *ep
	}
	return netip.AddrPort{}
}

// SetMeasuredUp tells the device our uplink rate toward the peer as
// measured (bit/s): where PeerConfig.Up is 0 it sizes the share of cookie
// replies to the peer's endpoint instead of Options.AssumedUplink.
func (p *Peer) SetMeasuredUp(bps int64) { p.measuredUp.Store(bps) }

// Uplink is our uplink rate toward the peer in bit/s: configured, else
// measured; 0 if neither is known.
func (p *Peer) Uplink() int64 {
	if up := p.up.Load(); up > 0 {
		return up
	}
	return p.measuredUp.Load()
}

// HasSession reports whether Seal can send now.
func (p *Peer) HasSession() bool {
	s := p.current.Load()
	return s != nil && !p.removed.Load() && !s.dead.Load() && !s.expired(p.dev.now(), p.dev.opts.RejectAfterTime)
}

// LastHandshake is when the current session was established (zero if never).
func (p *Peer) LastHandshake() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastHS
}

// Handshakes counts the handshakes with the peer that completed (either
// role), rekeys included.
func (p *Peer) Handshakes() uint64 { return p.handshakes.Load() }

// Removed reports whether SetPeers removed the peer.
func (p *Peer) Removed() bool { return p.removed.Load() }

// Seal encrypts one packet for the peer on the current session with the
// counter one above the last sealed on it, into dst (cap(dst) >=
// len(plaintext)+Overhead), and returns the datagram and its destination.
// ErrNoSession means call Initiate.
func (p *Peer) Seal(plaintext, dst []byte) ([]byte, netip.AddrPort, error) {
	return p.seal(p.current.Load(), 0, true, plaintext, dst)
}

// SealOn encrypts the association packet numbered counter on the session
// named id (Result.Session), if it is the current or the previous one and
// still usable (otherwise ErrNoSession), into dst (cap(dst) >=
// len(plaintext)+OverheadFor(counter); plaintext may already sit at
// dst[HeaderLen(counter):]). The counter travels in the header and makes
// the nonce, so the receiver gets it back as Result.Counter; it must be
// above every counter sealed on the session before (ErrCounter), and at
// most MaxCounter. A caller whose state belongs to some handshakes only
// (the tunnel's association) thus never sends it under a session the peer
// may have tied to other state, not even while a new session is being
// installed.
func (p *Peer) SealOn(id, counter uint64, plaintext, dst []byte) ([]byte, netip.AddrPort, error) {
	s := p.current.Load()
	if s == nil || s.id != id {
		if s = p.previous.Load(); s == nil || s.id != id {
			return nil, netip.AddrPort{}, ErrNoSession
		}
	}
	return p.seal(s, counter, false, plaintext, dst)
}

// seal seals on s with counter, or with next the session's next counter.
func (p *Peer) seal(s *session, counter uint64, next bool, plaintext, dst []byte) ([]byte, netip.AddrPort, error) {
	if p.removed.Load() {
		return nil, netip.AddrPort{}, ErrPeerRemoved
	}
	d := p.dev
	if !s.usable(d.now(), d.opts.RejectAfterTime) {
		return nil, netip.AddrPort{}, ErrNoSession
	}
	ep := p.endpoint.Load()
	if ep == nil {
		return nil, netip.AddrPort{}, ErrNoEndpoint
	}
	var out []byte
	var err error
	if next {
		out, err = s.sealNext(plaintext, dst)
	} else {
		out, err = s.seal(counter, plaintext, dst)
	}
	if err != nil {
		return nil, netip.AddrPort{}, err
	}
	if s.sendCount.Load() >= d.opts.RekeyAfterMessages || s.sendBytes.Load() >= d.opts.RekeyAfterBytes {
		p.rekeyWanted.Store(true)
	}
	d.stats.txPackets.Add(1)
	d.stats.txBytes.Add(uint64(len(plaintext)))
	return out, *ep, nil
}

// Initiate returns a handshake initiation if one is due now: no usable
// session (or rekeying is due) and no attempt in progress, or the attempt's
// retransmission is due. It is cheap to call on every ErrNoSession.
func (p *Peer) Initiate() (Datagram, bool, error) {
	now := p.dev.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.removed.Load() {
		return Datagram{}, false, ErrPeerRemoved
	}
	if len(p.inits) > 0 {
		if now.Before(p.hsNext) {
			return Datagram{}, false, nil
		}
		return p.sendInitiationLocked(now)
	}
	if p.awaitingConfirmLocked(now) {
		return Datagram{}, false, nil
	}
	if s := p.current.Load(); s != nil && !s.dead.Load() && !s.expired(now, p.dev.opts.RejectAfterTime) && !p.rekeyDueLocked(now) {
		return Datagram{}, false, nil
	}
	p.hsStarted, p.hsSent = now, 0
	return p.sendInitiationLocked(now)
}

// Connect is Initiate for a caller that needs a new handshake although a
// session may be current: its handshake payload changed (the tunnel's
// association began or ended), or it has nothing tied to the current
// session. It returns an initiation if no attempt is in progress, we are
// not completing the peer's, and no handshake completed in the last
// HandshakeRetransmit (its Established may still be on its way through
// the caller), or if the attempt's retransmission is due. With fresh,
// initiations still outstanding, made with an older payload, are dropped
// and a new attempt starts now, whatever completed before, so no response
// to an out-of-date payload completes.
func (p *Peer) Connect(fresh bool) (Datagram, bool, error) {
	now := p.dev.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.removed.Load() {
		return Datagram{}, false, ErrPeerRemoved
	}
	switch {
	case fresh:
		p.clearInitsLocked()
	case len(p.inits) > 0:
		if now.Before(p.hsNext) {
			return Datagram{}, false, nil
		}
		return p.sendInitiationLocked(now)
	case p.awaitingConfirmLocked(now), now.Sub(p.lastHS) < p.dev.opts.HandshakeRetransmit:
		return Datagram{}, false, nil
	}
	p.hsStarted, p.hsSent = now, 0
	return p.sendInitiationLocked(now)
}

// awaitingConfirmLocked: we answered the peer's initiation recently, so the
// peer is completing a handshake and our own would only collide with it.
func (p *Peer) awaitingConfirmLocked(now time.Time) bool {
	if len(p.pending) == 0 {
		return false
	}
	return now.Sub(p.pending[len(p.pending)-1].created) < 2*p.dev.opts.HandshakeRetransmitMax
}

func (p *Peer) rekeyDueLocked(now time.Time) bool {
	s := p.current.Load()
	if s == nil || s.dead.Load() {
		return false
	}
	if p.rekeyWanted.Load() {
		return true
	}
	o := &p.dev.opts
	after := o.RekeyAfterTime
	if !s.initiator {
		after += o.RekeyAfterTime / 8
	}
	return now.Sub(s.created) >= after
}

// sendInitiationLocked makes a new initiation (a retransmission is a new
// one: fresh ephemeral key and index) and schedules the next.
func (p *Peer) sendInitiationLocked(now time.Time) (Datagram, bool, error) {
	ep := p.endpoint.Load()
	if ep == nil {
		return Datagram{}, false, ErrNoEndpoint
	}
	pkt, err := p.newInitiationLocked(now)
	if err != nil {
		return Datagram{}, false, err
	}
	o := &p.dev.opts
	p.hsSent++
	iv := min(o.HandshakeRetransmit*time.Duration(p.hsSent), o.HandshakeRetransmitMax)
	if j := int64(iv / 5); j > 0 {
		iv += time.Duration(rand.Int64N(j))
	}
	p.hsNext = now.Add(iv)
	p.dev.stats.initiationsSent.Add(1)
	return Datagram{To: *ep, Data: pkt}, true, nil
}

// tick runs the peer's timers; see Device.Tick.
func (p *Peer) tick(now time.Time) (Datagram, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.removed.Load() {
		return Datagram{}, false
	}
	p.expireLocked(now)
	o := &p.dev.opts
	if len(p.inits) > 0 {
		if now.Sub(p.hsStarted) >= o.HandshakeAttemptTime {
			p.clearInitsLocked()
			p.dev.stats.handshakeTimeouts.Add(1)
			p.dev.log.Info("handshake attempt gave up", "peer", p.name, "initiations", p.hsSent, "after", now.Sub(p.hsStarted))
			return Datagram{}, false
		}
		if now.Before(p.hsNext) {
			return Datagram{}, false
		}
	} else {
		if p.awaitingConfirmLocked(now) || !p.rekeyDueLocked(now) {
			return Datagram{}, false
		}
		p.hsStarted, p.hsSent = now, 0
	}
	dg, ok, err := p.sendInitiationLocked(now)
	if err != nil {
		p.dev.log.Debug("no initiation sent", "peer", p.name, "err", err)
	}
	return dg, ok
}

func (p *Peer) expireLocked(now time.Time) {
	d := p.dev
	reject := d.opts.RejectAfterTime
	if s := p.current.Load(); s != nil && s.expired(now, reject) {
		d.kill(p.current.Swap(nil))
		d.log.Debug("session expired", "peer", p.name)
	}
	if s := p.previous.Load(); s != nil && s.expired(now, reject) {
		d.kill(p.previous.Swap(nil))
	}
	p.pending = slices.DeleteFunc(p.pending, func(s *session) bool {
		if s.expired(now, reject) {
			d.kill(s)
			return true
		}
		return false
	})
}

// installLocked makes s current and keeps the old current as previous.
func (p *Peer) installLocked(s *session, now time.Time) {
	d := p.dev
	old := p.current.Swap(s)
	if old != nil && !old.dead.Load() {
		d.kill(p.previous.Swap(old))
	}
	p.lastHS = now
	p.rekeyWanted.Store(false)
	p.clearInitsLocked()
	d.stats.handshakesCompleted.Add(1)
	p.handshakes.Add(1)
}

// confirm makes a responder session current on the first packet the
// initiator sent with it; false if it was confirmed concurrently or
// dropped.
func (p *Peer) confirm(s *session) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.Index(p.pending, s)
	if i < 0 || s.dead.Load() {
		return false
	}
	s.confirmed.Store(true)
	// The initiator completed with s, so it holds no state for the other
	// pending sessions: they can never be confirmed.
	for _, o := range p.pending {
		if o != s {
			p.dev.kill(o)
		}
	}
	p.pending = nil
	p.installLocked(s, p.dev.now())
	p.dev.log.Debug("session established", "peer", p.name, "role", "responder")
	return true
}

// roam moves the endpoint to src after an authenticated packet from it.
func (p *Peer) roam(src netip.AddrPort) bool {
	if ep := p.endpoint.Load(); ep != nil && *ep == src {
		return false
	}
	if !src.IsValid() {
		return false
	}
	ep := src // copied here so only a real move allocates
	p.endpoint.Store(&ep)
	p.dev.stats.endpointChanges.Add(1)
	p.dev.log.Info("peer endpoint changed", "peer", p.name, "endpoint", src)
	return true
}
