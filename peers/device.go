// device.go owns the Device: our static identity, the configured peer set
// (SetPeers), the receiver-index table that finds a session without trial
// decryption, the dispatch of received datagrams, and the timers (Tick).
// It does no I/O: the tunnel owns the UDP socket, hands every datagram to
// Receive and sends what Receive, Seal, Initiate and Tick return.
//
// Lock order: Device.mu -> Peer.mu -> Device.idxMu. The transport path takes
// only idxMu (read) and the session's replay lock.

package peers

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flynn/noise"
	"golang.org/x/crypto/curve25519"
)

// Options tunes a Device. Zero fields take the defaults in brackets.
type Options struct {
	// Now is the clock [time.Now]; tests inject a virtual one.
	Now func() time.Time
	// RekeyAfterTime starts a new handshake when the current session is
	// this old [120 s]. The initiator of the current session rekeys first;
	// the responder only after RekeyAfterTime*9/8, so both rarely collide.
	RekeyAfterTime time.Duration
	// RejectAfterTime is when a session stops sending and receiving
	// [RekeyAfterTime*3/2]. Must exceed RekeyAfterTime.
	RejectAfterTime time.Duration
	// RekeyAfterMessages and RekeyAfterBytes start a new handshake once
	// this many packets / plaintext bytes were sealed on a session
	// [2^60, 2^40].
	RekeyAfterMessages uint64
	RekeyAfterBytes    uint64
	// HandshakeRetransmit is the first retransmission interval of an
	// unanswered initiation [1 s]; later ones grow linearly to
	// HandshakeRetransmitMax [3 s], plus up to 20% jitter. No exponential
	// backoff: a satellite link back from an outage should find us quickly.
	HandshakeRetransmit    time.Duration
	HandshakeRetransmitMax time.Duration
	// HandshakeAttemptTime is how long an attempt retransmits before giving
	// up [90 s]; Initiate starts a new one.
	HandshakeAttemptTime time.Duration
	// HandshakeRatePerSource is the handshake messages per second processed
	// per source address (IPv6: per /64), with a burst of twice that [5].
	HandshakeRatePerSource float64
	// HandshakeRateGlobal caps handshake messages per second over all
	// sources [400].
	HandshakeRateGlobal float64
	// RateLimitSources bounds the rate limiter's table [4096].
	RateLimitSources int
	// CookieReplyShare is the share of an uplink that cookie replies may
	// take (cookielimit.go) [0.02].
	CookieReplyShare float64
	// AssumedUplink is the uplink rate in bit/s taken for a path whose
	// rate is not known (PeerConfig.Up) [1 Mbit/s].
	AssumedUplink int64
	// Payload returns our handshake payload for a peer (at most
	// MaxHandshakePayload bytes). Nil means empty. It is called with the
	// peer's lock held and must not call back into the Device.
	Payload func(peer string) []byte
	// Logger receives handshake and configuration events [discard].
	Logger *slog.Logger
}

func (o *Options) setDefaults() error {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.RekeyAfterTime == 0 {
		o.RekeyAfterTime = 120 * time.Second
	}
	if o.RejectAfterTime == 0 {
		o.RejectAfterTime = o.RekeyAfterTime * 3 / 2
	}
	if o.RekeyAfterMessages == 0 {
		o.RekeyAfterMessages = 1 << 60
	}
	if o.RekeyAfterBytes == 0 {
		o.RekeyAfterBytes = 1 << 40
	}
	if o.HandshakeRetransmit == 0 {
		o.HandshakeRetransmit = time.Second
	}
	if o.HandshakeRetransmitMax == 0 {
		o.HandshakeRetransmitMax = 3 * time.Second
	}
	if o.HandshakeAttemptTime == 0 {
		o.HandshakeAttemptTime = 90 * time.Second
	}
	if o.HandshakeRatePerSource == 0 {
		o.HandshakeRatePerSource = 5
	}
	if o.HandshakeRateGlobal == 0 {
		o.HandshakeRateGlobal = 400
	}
	if o.RateLimitSources == 0 {
		o.RateLimitSources = 4096
	}
	if o.CookieReplyShare == 0 {
		o.CookieReplyShare = 0.02
	}
	if o.AssumedUplink == 0 {
		o.AssumedUplink = 1e6
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.RekeyAfterTime < 0 || o.RejectAfterTime <= o.RekeyAfterTime:
		return fmt.Errorf("options: RejectAfterTime (%v) must exceed RekeyAfterTime (%v), both positive", o.RejectAfterTime, o.RekeyAfterTime)
	case o.HandshakeRetransmit < 0 || o.HandshakeRetransmitMax < o.HandshakeRetransmit:
		return fmt.Errorf("options: HandshakeRetransmitMax (%v) must be at least HandshakeRetransmit (%v)", o.HandshakeRetransmitMax, o.HandshakeRetransmit)
	case o.HandshakeAttemptTime < o.HandshakeRetransmitMax:
		return fmt.Errorf("options: HandshakeAttemptTime (%v) must be at least HandshakeRetransmitMax (%v)", o.HandshakeAttemptTime, o.HandshakeRetransmitMax)
	case o.HandshakeRatePerSource < 0 || o.HandshakeRateGlobal < 0 || o.RateLimitSources < 0:
		return errors.New("options: handshake rate limits must be positive")
	case o.CookieReplyShare < 0 || o.CookieReplyShare > 1 || o.AssumedUplink < 0:
		return errors.New("options: CookieReplyShare must be within 0..1 and AssumedUplink positive")
	}
	return nil
}

// PeerConfig is one configured peer.
type PeerConfig struct {
	Name      string
	PublicKey Key
	// Endpoint is where to send initiations; zero if the peer is only
	// reachable once it contacts us (a site behind NAT, seen from the hub).
	Endpoint netip.AddrPort
	// Subnets the peer owns; traffic to them is routed to it.
	Subnets []netip.Prefix
	// Up is our uplink rate toward the peer in bit/s, 0 if unknown: cookie
	// replies to its endpoint take a share of it (cookielimit.go).
	Up int64
}

// Datagram is one UDP payload to send.
type Datagram struct {
	To   netip.AddrPort
	Data []byte
}

// Result is what one received datagram produced.
type Result struct {
	// Peer the datagram authenticated as; nil if it did not.
	Peer *Peer
	// Data is the decrypted association packet, dst[:len(Data)], nil for
	// handshake messages and keepalives; Counter is the number it was
	// sealed with (SealOn), authenticated and not seen before on its
	// session.
	Data    []byte
	Counter uint64
	// Send holds datagrams to send now (a handshake response, or the
	// keepalive that confirms a new session to its responder).
	Send []Datagram
	// Session names the session the datagram belongs to (transport
	// datagrams and Established): the same number at both ends, different
	// for every handshake. A caller that keeps state per session (the
	// tunnel ties each association to the handshakes that carry it) tells
	// them apart by it.
	Session uint64
	// Established: a new session with Peer became current on this
	// datagram. RemotePayload is then the peer's handshake payload and
	// LocalPayload ours in the same handshake, so both ends decide from
	// the same two payloads. A rekey also reports Established.
	Established   bool
	RemotePayload []byte
	LocalPayload  []byte
	// HandshakeRTT is, with Established, the round trip the handshake
	// took: the initiator's from its initiation to the response, the
	// responder's from its response to the first packet on the session
	// (longer if that packet came late). A new association confirms a
	// path it saved with it (careful resume).
	HandshakeRTT time.Duration
	// Responder: with Established, we answered the handshake (the
	// session became current on the initiator's first packet on it).
	Responder bool
	// EndpointChanged: Peer's endpoint moved to the datagram's source.
	EndpointChanged bool
}

// indexEntry is what a receiver index refers to: a session, or an
// initiation awaiting its response.
type indexEntry struct {
	full uint32 // the index in full
	sess *session
	init *initiation
}

// Device holds our identity, the peers and their sessions. All methods are
// safe for concurrent use.
type Device struct {
	opts   Options
	log    *slog.Logger
	pub    Key
	static noise.DHKey
	mac1   [32]byte // key of the MAC on handshake messages addressed to us

	mu     sync.RWMutex
	byName map[string]*Peer
	byKey  map[Key]*Peer
	order  []*Peer // sorted by name
	routes atomic.Pointer[routeTable]

	idxMu  sync.RWMutex
	index  map[uint32]indexEntry        // by the index's low 13 bits
	byMAC1 map[[macLen]byte]*initiation // our outstanding initiations, for cookie replies

	limiter *rateLimiter
	replies *cookieLimiter
	cookies cookieJar
	stats   counters

	// entropy, if set (tests only), replaces crypto/rand for ephemeral keys
	// and receiver indices, making handshakes reproducible.
	entropy io.Reader
}

// NewDevice creates a device with private key priv and the given peers.
func NewDevice(priv Key, peers []PeerConfig, opts Options) (*Device, error) {
	if priv.IsZero() {
		return nil, fmt.Errorf("new device: %w: private key is all zeros", ErrBadKey)
	}
	if err := opts.setDefaults(); err != nil {
		return nil, fmt.Errorf("new device: %w", err)
	}
	pub := priv.PublicKey()
	d := &Device{
		opts:   opts,
		log:    opts.Logger,
		pub:    pub,
		static: noise.DHKey{Private: slices.Clone(priv[:]), Public: slices.Clone(pub[:])},
		mac1:   mac1Key(pub),
		byName: map[string]*Peer{},
		byKey:  map[Key]*Peer{},
		index:  map[uint32]indexEntry{},
		byMAC1: map[[macLen]byte]*initiation{},
		limiter: newRateLimiter(opts.HandshakeRatePerSource, 2*opts.HandshakeRatePerSource,
			opts.HandshakeRateGlobal, opts.RateLimitSources),
	}
	d.cookies = newCookieJar(opts.Now, pub)
	d.replies = newCookieLimiter(d, &opts)
	d.routes.Store(&routeTable{})
	if err := d.SetPeers(peers); err != nil {
		return nil, fmt.Errorf("new device: %w", err)
	}
	return d, nil
}

// PublicKey is our static public key.
func (d *Device) PublicKey() Key { return d.pub }

func (d *Device) now() time.Time { return d.opts.Now() }

// validatePeers checks a peer set without touching the device and returns
// the normalised subnets of each peer.
func (d *Device) validatePeers(cfgs []PeerConfig) ([][]netip.Prefix, error) {
	names := make(map[string]bool, len(cfgs))
	keys := make(map[Key]string, len(cfgs))
	owner := make(map[netip.Prefix]string)
	subnets := make([][]netip.Prefix, len(cfgs))
	for i, c := range cfgs {
		switch {
		case c.Name == "":
			return nil, fmt.Errorf("peer #%d has no name", i+1)
		case names[c.Name]:
			return nil, fmt.Errorf("peer %q is configured twice", c.Name)
		case c.PublicKey.IsZero():
			return nil, fmt.Errorf("peer %q: public key is all zeros", c.Name)
		case c.PublicKey == d.pub:
			return nil, fmt.Errorf("peer %q has our own public key: configure the other site's key (`scpsvpn pubkey` there)", c.Name)
		}
		if other, dup := keys[c.PublicKey]; dup {
			return nil, fmt.Errorf("peers %q and %q have the same public key %s", other, c.Name, c.PublicKey)
		}
		// A low-order public key makes every Diffie-Hellman output zero;
		// X25519 reports that, and such a key could never handshake.
		if _, err := curve25519.X25519(d.static.Private, c.PublicKey[:]); err != nil {
			return nil, fmt.Errorf("peer %q: public key %s is not usable: %w", c.Name, c.PublicKey, err)
		}
		if c.Endpoint.IsValid() && (c.Endpoint.Port() == 0 || c.Endpoint.Addr().IsUnspecified()) {
			return nil, fmt.Errorf("peer %q: endpoint %v needs a non-zero address and port", c.Name, c.Endpoint)
		}
		names[c.Name] = true
		keys[c.PublicKey] = c.Name
		for _, s := range c.Subnets {
			n, err := normalizePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("peer %q: %w", c.Name, err)
			}
			if other, dup := owner[n]; dup {
				if other == c.Name {
					return nil, fmt.Errorf("peer %q lists subnet %v twice", c.Name, n)
				}
				return nil, fmt.Errorf("subnet %v is claimed by both peer %q and peer %q: each subnet must belong to one peer", n, other, c.Name)
			}
			owner[n] = c.Name
			subnets[i] = append(subnets[i], n)
		}
	}
	return subnets, nil
}

// CheckPeers returns the error SetPeers would return for cfgs, changing
// nothing: a caller can then prepare for the change knowing it will apply.
func (d *Device) CheckPeers(cfgs []PeerConfig) error {
	if _, err := d.validatePeers(cfgs); err != nil {
		return fmt.Errorf("set peers: %w", err)
	}
	return nil
}

// SetPeers replaces the peer set (at start and on SIGHUP). Peers whose name
// and key are unchanged keep their sessions; a changed key drops the
// sessions, so the next Seal asks for a new handshake; removed peers lose
// their sessions at once and their *Peer handles stop working. A changed
// configured endpoint replaces the learned one. On error nothing changes.
func (d *Device) SetPeers(cfgs []PeerConfig) error {
	subnets, err := d.validatePeers(cfgs)
	if err != nil {
		return fmt.Errorf("set peers: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	byName := make(map[string]*Peer, len(cfgs))
	byKey := make(map[Key]*Peer, len(cfgs))
	order := make([]*Peer, 0, len(cfgs))
	for i, c := range cfgs {
		p := d.byName[c.Name]
		if p == nil {
			p = newPeer(d, c, subnets[i])
			d.log.Info("peer added", "peer", c.Name, "key", c.PublicKey.String(), "endpoint", c.Endpoint)
		} else {
			p.reconfigure(c, subnets[i])
		}
		byName[c.Name] = p
		byKey[c.PublicKey] = p
		order = append(order, p)
	}
	for name, p := range d.byName {
		if byName[name] == nil {
			p.remove()
			d.log.Info("peer removed", "peer", name)
		}
	}
	slices.SortFunc(order, func(a, b *Peer) int {
		switch {
		case a.name < b.name:
			return -1
		case a.name > b.name:
			return 1
		}
		return 0
	})
	d.byName, d.byKey, d.order = byName, byKey, order
	d.routes.Store(buildRoutes(order))
	return nil
}

// Lookup returns the peer owning the longest configured subnet containing
// dst.
func (d *Device) Lookup(dst netip.Addr) (*Peer, bool) {
	return d.routes.Load().lookup(dst)
}

// Peer returns the peer named name.
func (d *Device) Peer(name string) (*Peer, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	p, ok := d.byName[name]
	return p, ok
}

// Peers returns all configured peers, sorted by name.
func (d *Device) Peers() []*Peer {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return slices.Clone(d.order)
}

func (d *Device) peerByKey(k Key) *Peer {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.byKey[k]
}

// The index table. Handshake messages name a receiver index in full (32
// random bits, so an off-path attacker cannot guess which index to forge a
// response for); transport datagrams carry only its low 13 bits, which
// are therefore unique among the indices held at once (MaxIndices).

// allocIndex registers e under a fresh random receiver index; false when
// the table is full (or nearly so: a free slot was not found in 64
// draws), and the handshake that wanted it fails.
func (d *Device) allocIndex(e indexEntry) (uint32, bool) {
	d.idxMu.Lock()
	defer d.idxMu.Unlock()
	if len(d.index) >= MaxIndices {
		return 0, false
	}
	for range 64 {
		// From crypto/rand: an index another host could predict would let
		// it forge responses and cookie replies for our handshakes.
		var b [4]byte
		if d.entropy != nil {
			io.ReadFull(d.entropy, b[:])
		} else {
			rand.Read(b[:]) // never fails
		}
		idx := binary.LittleEndian.Uint32(b[:])
		if _, used := d.index[idx&indexMask]; idx != 0 && !used {
			e.full = idx
			d.index[idx&indexMask] = e
			return idx, true
		}
	}
	return 0, false
}

func (d *Device) setIndex(idx uint32, e indexEntry) {
	e.full = idx
	d.idxMu.Lock()
	d.index[idx&indexMask] = e
	d.idxMu.Unlock()
}

// lookupIndex finds the entry of a full index (handshake messages).
func (d *Device) lookupIndex(idx uint32) indexEntry {
	d.idxMu.RLock()
	e := d.index[idx&indexMask]
	d.idxMu.RUnlock()
	if e.full != idx {
		return indexEntry{}
	}
	return e
}

// lookupSession finds the session of a transport datagram's 13-bit index.
func (d *Device) lookupSession(short uint32) *session {
	d.idxMu.RLock()
	e := d.index[short]
	d.idxMu.RUnlock()
	return e.sess
}

// freeIndex removes idx if it still refers to e's session or initiation,
// and an initiation's mac1.
func (d *Device) freeIndex(idx uint32, s *session, ini *initiation) {
	d.idxMu.Lock()
	if e, ok := d.index[idx&indexMask]; ok && e.full == idx && ((s != nil && e.sess == s) || (ini != nil && e.init == ini)) {
		delete(d.index, idx&indexMask)
	}
	d.forgetMAC1Locked(ini)
	d.idxMu.Unlock()
}

// forgetMAC1 stops an initiation from taking cookie replies.
func (d *Device) forgetMAC1(ini *initiation) {
	d.idxMu.Lock()
	d.forgetMAC1Locked(ini)
	d.idxMu.Unlock()
}

func (d *Device) forgetMAC1Locked(ini *initiation) {
	if ini != nil && d.byMAC1[ini.mac1] == ini {
		delete(d.byMAC1, ini.mac1)
	}
}

func (d *Device) kill(s *session) {
	if s == nil {
		return
	}
	s.dead.Store(true)
	d.freeIndex(s.local, s, nil)
}

func (d *Device) drop(r dropReason) (Result, error) {
	d.stats.drops[r].Add(1)
	return Result{}, dropInfo[r].err
}

// Receive handles one UDP datagram from src. Transport data is decrypted
// into dst (cap(dst) >= len(pkt); dst may be pkt[HeaderLen(counter):] to
// decrypt in place). Any datagram that fails to authenticate returns an
// error, is counted, and produces nothing to send.
func (d *Device) Receive(src netip.AddrPort, pkt []byte, dst []byte) (Result, error) {
	if len(pkt) == 0 {
		return d.drop(dropMalformed)
	}
	if pkt[0]&transportBit != 0 {
		return d.receiveTransport(src, pkt, dst)
	}
	switch pkt[0] {
	case typeInitiation:
		return d.receiveInitiation(src, pkt)
	case typeResponse:
		return d.receiveResponse(src, pkt)
	case typeCookieReply:
		return d.receiveCookieReply(pkt)
	default:
		return d.drop(dropUnknownType)
	}
}

func (d *Device) receiveTransport(src netip.AddrPort, pkt, dst []byte) (Result, error) {
	h, err := decodeTransport(pkt)
	if err != nil {
		return d.drop(dropMalformed)
	}
	s := d.lookupSession(h.receiver)
	if s == nil || s.dead.Load() {
		return d.drop(dropUnknownIndex)
	}
	if s.expired(d.now(), d.opts.RejectAfterTime) {
		return d.drop(dropExpired)
	}
	plain, advanced, err := s.open(h, dst)
	if err != nil {
		return d.drop(reasonOf(err))
	}
	p := s.peer
	if p.removed.Load() || s.dead.Load() {
		return d.drop(dropUnknownIndex)
	}
	res := Result{Peer: p, Session: s.id, Counter: h.counter}
	if !s.confirmed.Load() && p.confirm(s) {
		res.Established, res.RemotePayload, res.LocalPayload = true, s.remotePayload, s.localPayload
		res.HandshakeRTT = d.now().Sub(s.created)
		res.Responder = true
	}
	// Roam only on the newest packet of the current session: a late,
	// reordered packet from an old address must not pull the endpoint back.
	if advanced && p.current.Load() == s {
		res.EndpointChanged = p.roam(src)
	}
	d.stats.rxPackets.Add(1)
	d.stats.rxBytes.Add(uint64(len(plain)))
	if h.keepalive {
		d.stats.keepalivesRx.Add(1)
		return res, nil
	}
	res.Data = plain
	return res, nil
}

// Tick runs the timers: it expires old sessions, retransmits unanswered
// initiations, gives up on attempts, and starts rekeying. Call it every
// 100-250 ms and send what it returns.
func (d *Device) Tick() []Datagram {
	now := d.now()
	d.mu.RLock()
	peers := slices.Clone(d.order)
	d.mu.RUnlock()
	var out []Datagram
	for _, p := range peers {
		if dg, ok := p.tick(now); ok {
			out = append(out, dg)
		}
	}
	d.limiter.sweep(now)
	return out
}

// Stats returns a snapshot of the counters.
func (d *Device) Stats() Stats {
	st := Stats{
		Drops:               make(map[string]uint64, numDropReasons),
		RxPackets:           d.stats.rxPackets.Load(),
		RxBytes:             d.stats.rxBytes.Load(),
		TxPackets:           d.stats.txPackets.Load(),
		TxBytes:             d.stats.txBytes.Load(),
		KeepalivesRx:        d.stats.keepalivesRx.Load(),
		InitiationsSent:     d.stats.initiationsSent.Load(),
		InitiationsReceived: d.stats.initiationsRcvd.Load(),
		ResponsesSent:       d.stats.responsesSent.Load(),
		HandshakesCompleted: d.stats.handshakesCompleted.Load(),
		HandshakeTimeouts:   d.stats.handshakeTimeouts.Load(),
		HandshakeCollisions: d.stats.collisions.Load(),
		CookieRepliesSent:   d.stats.cookiesSent.Load(),
		CookiesReceived:     d.stats.cookiesReceived.Load(),
		EndpointChanges:     d.stats.endpointChanges.Load(),
		RateLimitEntries:    d.limiter.len(),
	}
	for r := range numDropReasons {
		st.Drops[dropInfo[r].name] = d.stats.drops[r].Load()
	}
	d.idxMu.RLock()
	st.Sessions = len(d.index)
	d.idxMu.RUnlock()
	return st
}
