// cookie.go owns the handshake's defence against floods of initiations
// from spoofed sources (WireGuard paper §5.4.7): mac2 and the cookie reply.
//
// mac1 (wire.go) already drops random datagrams with one hash; what is left
// is a flood of initiations with a valid mac1 — anyone who knows our public
// key can make them — from forged source addresses. Their Diffie-Hellman
// work used to be capped by a global budget that the flood then used up,
// starving real peers (a restarted peer, a rekey) until it stopped.
//
// Under load (rateLimiter.loaded), an initiation must carry a valid mac2: a
// MAC keyed by a cookie that only someone receiving datagrams at the
// initiation's source address can know. One without it gets no
// Diffie-Hellman, only a cookie reply sent to that address: the cookie, a
// MAC of the address under a secret that rotates every two minutes,
// encrypted to the initiator (a key from our public key, the initiation's
// mac1 as additional data). A real peer stores it and its next initiation
// (retransmitted 1 s later) carries mac2; a spoofer never sees the cookie.
// Initiations with a valid mac2 skip the global budget and meet only their
// source's own rate limit, so the flood cannot crowd them out.
//
// The reply (73 bytes) is smaller than the initiation it answers (141 or
// more), so it amplifies nothing, and only a sender that knows our public
// key ever gets one. Responses need no cookie: they are matched to one of
// our outstanding initiations by receiver index before any Diffie-Hellman.

package peers

import (
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"io"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/crypto/blake2s"
	"golang.org/x/crypto/chacha20poly1305"
)

const (
	// cookieSecretLife is how long a cookie secret is used; the one before
	// still checks, so a cookie stays good for up to twice this.
	cookieSecretLife = 2 * time.Minute
	// cookieLife is how long an initiator uses a cookie it received: a
	// little less than the responder's shortest guarantee.
	cookieLife = cookieSecretLife - 5*time.Second
	cookieLen  = 16
	xNonceLen  = chacha20poly1305.NonceSizeX
)

// cookieKey is the key that encrypts cookie replies from the holder of pub.
func cookieKey(pub Key) [32]byte { return labelledKey("scpsvpn cookie v1", pub) }

// cookieJar is the responder's side: the rotating secret, the cookies made
// from it, and the replies that carry them.
type cookieJar struct {
	now  func() time.Time
	rand io.Reader   // nil: crypto/rand
	aead cipher.AEAD // XChaCha20-Poly1305 under cookieKey of our own public key

	mu       sync.Mutex
	secret   [32]byte
	previous [32]byte
	born     time.Time // of secret; zero before the first
}

func (j *cookieJar) random(b []byte) {
	if j.rand != nil {
		io.ReadFull(j.rand, b)
		return
	}
	rand.Read(b)
}

// secrets returns the current secret (rotating it when due) and the one
// before it.
func (j *cookieJar) secrets() (cur, prev [32]byte) {
	now := j.now()
	j.mu.Lock()
	defer j.mu.Unlock()
	if age := now.Sub(j.born); j.born.IsZero() || age >= cookieSecretLife || age < 0 {
		j.previous = j.secret
		if j.born.IsZero() || age >= 2*cookieSecretLife || age < 0 {
			// Rotated lazily: the secret before was due to go
			// too, so the previous one is one nobody knows.
			j.random(j.previous[:])
		}
		j.random(j.secret[:])
		j.born = now
	}
	return j.secret, j.previous
}

// cookie is the MAC of src under secret: bound to the address and port the
// datagram came from.
func cookie(secret *[32]byte, src netip.AddrPort) [cookieLen]byte {
	h, err := blake2s.New128(secret[:])
	if err != nil {
		panic("peers: blake2s.New128 with a 32-byte key: " + err.Error())
	}
	a := src.Addr().Unmap().As16()
	h.Write(a[:])
	h.Write([]byte{byte(src.Port() >> 8), byte(src.Port())})
	var c [cookieLen]byte
	h.Sum(c[:0])
	return c
}

func newCookieJar(now func() time.Time, pub Key) cookieJar {
	k := cookieKey(pub)
	aead, err := chacha20poly1305.NewX(k[:])
	if err != nil {
		panic("peers: XChaCha20-Poly1305 with a 32-byte key: " + err.Error())
	}
	return cookieJar{now: now, aead: aead}
}

// checkMAC2 reports whether an initiation from src carries a mac2 made with
// a cookie of the current or the previous secret.
func (j *cookieJar) checkMAC2(src netip.AddrPort, macd, mac []byte) bool {
	if [macLen]byte(mac) == ([macLen]byte{}) {
		return false // the initiator has no cookie: nothing to check
	}
	cur, prev := j.secrets()
	for _, s := range [...]*[32]byte{&cur, &prev} {
		c := cookie(s, src)
		want := computeMAC(c[:], macd)
		if hmac.Equal(want[:], mac) {
			return true
		}
	}
	return false
}

// reply makes the cookie reply to an initiation from src whose mac1 is mac1.
func (j *cookieJar) reply(src netip.AddrPort, mac1 []byte) []byte {
	cur, _ := j.secrets()
	c := cookie(&cur, src)
	out := make([]byte, 1, cookieReplyLen)
	out[0] = typeCookieReply
	out = append(out, mac1...)
	nonce := out[len(out) : len(out)+xNonceLen]
	j.random(nonce)
	out = out[:len(out)+xNonceLen]
	return j.aead.Seal(out, nonce, c[:], mac1)
}

// openCookieReply decrypts a cookie reply from the holder of the key k to
// a handshake message whose mac1 was mac1.
func openCookieReply(k *[32]byte, nonce, sealed, mac1 []byte) ([cookieLen]byte, bool) {
	var c [cookieLen]byte
	aead, _ := chacha20poly1305.NewX(k[:])
	if _, err := aead.Open(c[:0], nonce, sealed, mac1); err != nil {
		return c, false
	}
	return c, true
}

// receiveCookieReply stores the cookie a loaded responder sent in answer to
// one of our initiations still outstanding; the next initiation to that
// peer carries mac2.
func (d *Device) receiveCookieReply(pkt []byte) (Result, error) {
	mac1, nonce, sealed, err := decodeCookieReply(pkt)
	if err != nil {
		return d.drop(dropMalformed)
	}
	var key [macLen]byte
	copy(key[:], mac1)
	d.idxMu.RLock()
	ini := d.byMAC1[key]
	d.idxMu.RUnlock()
	if ini == nil {
		return d.drop(dropUnknownIndex)
	}
	p := ini.peer
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := openCookieReply(&p.cookieKey, nonce, sealed, mac1)
	if !ok {
		return d.drop(dropAuth)
	}
	p.cookie, p.cookieAt = c, d.now()
	d.stats.cookiesReceived.Add(1)
	d.log.Debug("cookie received: the peer is under load", "peer", p.name)
	return Result{}, nil
}

// mac2Locked returns the mac2 of a message to p: made with the peer's
// cookie while it is fresh, zeros otherwise.
func (p *Peer) mac2Locked(now time.Time, macd []byte) [macLen]byte {
	if p.cookieAt.IsZero() || now.Sub(p.cookieAt) >= cookieLife || now.Before(p.cookieAt) {
		return [macLen]byte{}
	}
	return computeMAC(p.cookie[:], macd)
}
