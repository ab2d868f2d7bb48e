// handshake.go owns the Noise IK handshake (Noise_IK_25519_ChaChaPoly_BLAKE2s
// via flynn/noise): building initiations, answering them, and completing on
// the response.
//
// IK fits a site-to-site VPN: the initiator knows the responder's static key
// from the configuration, the responder learns and checks the initiator's
// from the first message, and one round trip makes the session. Each
// message carries an opaque payload from Options.Payload (the tunnel's
// association parameters), encrypted and authenticated.
//
// Replay of an initiation is refused by a timestamp inside it that must grow
// per peer. A responder session is not used for sending until the initiator
// proves it holds the keys (its first transport packet; the initiator sends a
// keepalive at once for that), so even a replayed initiation could not
// displace a working session.
//
// Simultaneous initiation: when an initiation arrives while we have one
// outstanding, the side with the lower static public key keeps its own and
// ignores the peer's; the higher side abandons its own and answers. Exactly
// one handshake completes, at most one retransmission later if the lower
// side's initiation was lost.

package peers

import (
	"net/netip"
	"slices"
	"time"

	"github.com/flynn/noise"
)

// prologue binds the protocol name and version into every handshake, so a
// different version fails to authenticate instead of misparsing.
var prologue = []byte("scpsvpn peers v3")

var cipherSuite = noise.NewCipherSuite(noise.DH25519, noise.CipherChaChaPoly, noise.HashBLAKE2s)

// initiation is one handshake we started and that awaits a response.
type initiation struct {
	peer    *Peer
	local   uint32
	hs      *noise.HandshakeState
	created time.Time
	mac1    [macLen]byte // finds it when a cookie reply comes
	blob    []byte       // our payload in it, reported when it completes
}

func (d *Device) payloadFor(name string) ([]byte, error) {
	if d.opts.Payload == nil {
		return nil, nil
	}
	b := d.opts.Payload(name)
	if len(b) > MaxHandshakePayload {
		return nil, ErrPayloadTooLarge
	}
	return b, nil
}

// newInitiationLocked builds an initiation datagram and keeps its state
// answerable.
func (p *Peer) newInitiationLocked(now time.Time) ([]byte, error) {
	d := p.dev
	blob, err := d.payloadFor(p.name)
	if err != nil {
		return nil, err
	}
	hs, err := noise.NewHandshakeState(noise.Config{
		CipherSuite:   cipherSuite,
		Pattern:       noise.HandshakeIK,
		Initiator:     true,
		Random:        d.entropy,
		Prologue:      prologue,
		StaticKeypair: d.static,
		PeerStatic:    slices.Clone(p.key[:]),
	})
	if err != nil {
		return nil, err
	}
	ini := &initiation{peer: p, hs: hs, created: now, blob: blob}
	var ok bool
	if ini.local, ok = d.allocIndex(indexEntry{init: ini}); !ok {
		return nil, ErrIndexFull
	}
	// The timestamp only has to grow per peer pair; wall-clock nanoseconds
	// keep it growing across restarts.
	ts := max(uint64(now.UnixNano()), p.lastSentTS+1)
	p.lastSentTS = ts
	payload := initPayload{sender: ini.local, timestamp: ts, blob: blob}.appendTo(make([]byte, 0, initPayloadHeader+len(blob)))
	pkt := make([]byte, 1, initMinLen+len(blob))
	pkt[0] = typeInitiation
	pkt, _, _, err = hs.WriteMessage(pkt, payload)
	if err != nil {
		d.freeIndex(ini.local, nil, ini)
		return nil, err
	}
	mac := computeMAC1(&p.mac1, pkt)
	pkt = append(pkt, mac[:]...)
	mac2 := p.mac2Locked(now, pkt)
	pkt = append(pkt, mac2[:]...)
	ini.mac1 = mac
	d.idxMu.Lock()
	d.byMAC1[mac] = ini
	d.idxMu.Unlock()
	p.inits = append(p.inits, ini)
	if len(p.inits) > maxInitiations {
		old := p.inits[0]
		d.freeIndex(old.local, nil, old)
		p.inits = slices.Delete(p.inits, 0, 1)
	}
	return pkt, nil
}

func (d *Device) receiveInitiation(src netip.AddrPort, pkt []byte) (Result, error) {
	m, err := decodeInitiation(pkt)
	if err != nil {
		return d.drop(dropMalformed)
	}
	if !checkMAC1(&d.mac1, m.mac1d, m.mac1) {
		return d.drop(dropBadMAC)
	}
	now := d.now()
	// Under load only initiations whose source address is proven (mac2)
	// may cost a Diffie-Hellman; the others get a cookie to prove it
	// with. See cookie.go.
	if d.limiter.loaded(now) && !d.cookies.checkMAC2(src, m.mac2d, m.mac2) {
		if !d.replies.allow(src, now) {
			return d.drop(dropCookieLimited)
		}
		d.stats.cookiesSent.Add(1)
		return Result{Send: []Datagram{{To: src, Data: d.cookies.reply(src, m.mac1)}}}, nil
	}
	if !d.limiter.allowSource(src.Addr(), now) {
		return d.drop(dropRateLimited)
	}
	hs, err := noise.NewHandshakeState(noise.Config{
		CipherSuite:   cipherSuite,
		Pattern:       noise.HandshakeIK,
		Random:        d.entropy,
		Prologue:      prologue,
		StaticKeypair: d.static,
	})
	if err != nil {
		return d.drop(dropInternal)
	}
	plain, _, _, err := hs.ReadMessage(nil, m.noiseMsg)
	if err != nil {
		return d.drop(dropHandshakeAuth)
	}
	var key Key
	copy(key[:], hs.PeerStatic())
	p := d.peerByKey(key)
	if p == nil {
		return d.drop(dropUnknownPeer)
	}
	ip, err := decodeInitPayload(plain)
	if err != nil {
		return d.drop(dropMalformed)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.removed.Load() || p.key != key {
		return d.drop(dropUnknownPeer)
	}
	if ip.timestamp <= p.lastInitTS {
		return d.drop(dropStaleInitiation)
	}
	p.lastInitTS = ip.timestamp
	d.stats.initiationsRcvd.Add(1)
	res := Result{Peer: p}
	if len(p.inits) > 0 {
		if d.pub.less(p.key) {
			// Ours takes precedence; the peer will answer it.
			d.stats.collisions.Add(1)
			res.EndpointChanged = p.roam(src)
			return res, nil
		}
		p.clearInitsLocked()
	}

	blob, err := d.payloadFor(p.name)
	if err != nil {
		d.log.Warn("handshake payload", "peer", p.name, "err", err)
		return d.drop(dropInternal)
	}
	// A dead placeholder reserves the index the response must carry until
	// the session exists.
	s := &session{}
	s.dead.Store(true)
	local, ok := d.allocIndex(indexEntry{sess: s})
	if !ok {
		return d.drop(dropIndexFull)
	}
	resp := make([]byte, 1+idxLen, respMinLen+len(blob))
	resp[0] = typeResponse
	putLE32(resp[1:], ip.sender)
	rp := respPayload{sender: local, blob: blob}.appendTo(make([]byte, 0, respPayloadHeader+len(blob)))
	resp, cs1, cs2, err := hs.WriteMessage(resp, rp)
	if err != nil || cs1 == nil || cs2 == nil {
		d.freeIndex(local, s, nil)
		return d.drop(dropInternal)
	}
	ns, err := newSession(p, handshakeID(hs), local, ip.sender, cs2.UnsafeKey(), cs1.UnsafeKey(), now, false)
	if err != nil {
		d.freeIndex(local, s, nil)
		return d.drop(dropInternal)
	}
	ns.remotePayload = slices.Clone(ip.blob)
	ns.localPayload = blob
	d.setIndex(local, indexEntry{sess: ns})
	rm := computeMAC1(&p.mac1, resp)
	resp = append(resp, rm[:]...)

	p.pending = append(p.pending, ns)
	if len(p.pending) > maxPending {
		d.kill(p.pending[0])
		p.pending = slices.Delete(p.pending, 0, 1)
	}
	d.stats.responsesSent.Add(1)
	res.EndpointChanged = p.roam(src)
	res.Send = []Datagram{{To: src, Data: resp}}
	d.log.Debug("answered handshake", "peer", p.name, "from", src)
	return res, nil
}

func (d *Device) receiveResponse(src netip.AddrPort, pkt []byte) (Result, error) {
	receiver, msg, macd, mac, err := decodeResponse(pkt)
	if err != nil {
		return d.drop(dropMalformed)
	}
	if !checkMAC1(&d.mac1, macd, mac) {
		return d.drop(dropBadMAC)
	}
	// No rate limit: a response costs a Diffie-Hellman only if it names
	// one of our few outstanding initiations (a random 32-bit index an
	// off-path sender cannot guess), and a failed one is forgotten. A
	// flood of initiations therefore cannot starve our own handshakes.
	now := d.now()
	ini := d.lookupIndex(receiver).init
	if ini == nil {
		return d.drop(dropUnknownIndex)
	}
	p := ini.peer
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.removed.Load() || !slices.Contains(p.inits, ini) {
		return d.drop(dropUnknownIndex)
	}
	plain, cs1, cs2, err := ini.hs.ReadMessage(nil, msg)
	if err != nil || cs1 == nil || cs2 == nil {
		// A forged response needs the index, which only an on-path
		// attacker sees, and such an attacker can drop packets anyway;
		// forgetting the state keeps the handshake object single-use.
		p.inits = slices.DeleteFunc(p.inits, func(x *initiation) bool { return x == ini })
		d.freeIndex(ini.local, nil, ini)
		return d.drop(dropHandshakeAuth)
	}
	rp, err := decodeRespPayload(plain)
	if err != nil {
		return d.drop(dropMalformed)
	}
	s, err := newSession(p, handshakeID(ini.hs), ini.local, rp.sender, cs1.UnsafeKey(), cs2.UnsafeKey(), now, true)
	if err != nil {
		return d.drop(dropInternal)
	}
	s.confirmed.Store(true)
	// The initiation's index now names the session.
	p.inits = slices.DeleteFunc(p.inits, func(x *initiation) bool { return x == ini })
	d.setIndex(ini.local, indexEntry{sess: s})
	d.forgetMAC1(ini)
	p.installLocked(s, now)
	d.log.Debug("session established", "peer", p.name, "role", "initiator", "rtt", now.Sub(ini.created))

	res := Result{Peer: p, Session: s.id, Established: true, RemotePayload: slices.Clone(rp.blob), LocalPayload: ini.blob,
		HandshakeRTT: now.Sub(ini.created)}
	res.EndpointChanged = p.roam(src)
	// Confirm the session to the responder at once, so it can send on it
	// even if we have nothing to send.
	if ka, err := s.sealKeepalive(make([]byte, 0, keepaliveLen)); err == nil {
		res.Send = []Datagram{{To: src, Data: ka}}
	}
	return res, nil
}
