// cookielimit.go bounds the cookie replies (cookie.go) a loaded device
// sends. Each costs nothing to provoke: anyone who knows our public key
// can make initiations with a valid mac1 from any source address, and
// before this bound every one under load got a reply. 10,000 a second
// spoofed in a peer's name (its endpoint as source) made about
// 6 Mbit/s of replies toward that peer, on an uplink that may carry
// 2 Mbit/s, starving its association.
//
// Replies now take at most a small share (CookieReplyShare) of the
// uplink they leave by, counted in bytes on the wire:
//   - to a peer's known endpoint, a share of our uplink toward that peer:
//     PeerConfig.Up, else Options.AssumedUplink or, if more, the rate
//     measured (Peer.SetMeasuredUp: what we sent, which only bounds the
//     capacity from below);
//   - to any other source, HandshakeRatePerSource replies a second per
//     source (IPv4 address, IPv6 /64), and all such sources together a
//     share of our fastest known uplink.
//
// A flood from random sources then cannot take the replies a peer at its
// known endpoint needs, and a flood in one peer's name takes only that
// peer's. The initiations left without a reply are counted
// (Drops["cookie_limited"]); a real initiator retransmits and its next
// initiation may get one. A flood that spoofs a peer's exact endpoint
// still competes with that peer's own initiations for its share, as it
// would for any bandwidth: the peer's current session is unaffected, and
// its next handshake waits until the flood eases.

package peers

import (
	"net/netip"
	"sync"
	"time"

	"scpsvpn/peers/tokenbucket"
)

// cookieReplyWire is a cookie reply's size on the wire: the reply, UDP and
// an IPv6 header (IPv4's is smaller; the bound holds for both).
const cookieReplyWire = cookieReplyLen + 8 + 40

// cookieLimiter holds the cookie reply buckets, in replies a second.
type cookieLimiter struct {
	share   float64 // of the uplink, Options.CookieReplyShare
	assumed float64 // bit/s, Options.AssumedUplink
	others  *rateLimiter

	mu    sync.Mutex
	at    time.Time // when known was refreshed
	known map[netip.AddrPort]*knownEndpoint
	dev   *Device
}

// knownEndpoint is a peer's endpoint and its reply bucket.
type knownEndpoint struct {
	rate float64 // replies a second
	b    tokenbucket.Bucket
}

func newCookieLimiter(d *Device, o *Options) *cookieLimiter {
	return &cookieLimiter{
		share:   o.CookieReplyShare,
		assumed: float64(o.AssumedUplink),
		others:  newRateLimiter(o.HandshakeRatePerSource, 2*o.HandshakeRatePerSource, 0, o.RateLimitSources),
		known:   map[netip.AddrPort]*knownEndpoint{},
		dev:     d,
	}
}

// uplink is our uplink rate toward p in bit/s: configured, else the
// assumed one or what was measured, whichever is more.
func (c *cookieLimiter) uplink(p *Peer) float64 {
	if up := p.up.Load(); up > 0 {
		return float64(up)
	}
	return max(float64(p.measuredUp.Load()), c.assumed)
}

// repliesFor is how many replies a second a share of an uplink of up
// bit/s carries; at least one, so a real peer's retransmitted initiation
// may still get its cookie.
func (c *cookieLimiter) repliesFor(up float64) float64 {
	return max(c.share*up/8/cookieReplyWire, 1)
}

// refreshLocked rebuilds the table of known endpoints, at most every
// 100 ms (it is consulted for every reply of a flood), keeping the
// buckets of endpoints that did not move, and sets the other sources'
// budget from the fastest known uplink.
func (c *cookieLimiter) refreshLocked(now time.Time) {
	if !c.at.IsZero() && now.Sub(c.at) < 100*time.Millisecond && !now.Before(c.at) {
		return
	}
	c.at = now
	known := make(map[netip.AddrPort]*knownEndpoint, len(c.known))
	fastest := c.assumed
	for _, p := range c.dev.Peers() {
		up := c.uplink(p)
		fastest = max(fastest, up)
		ep := p.Endpoint()
		if !ep.IsValid() {
			continue
		}
		k := c.known[ep]
		if k == nil {
			k = &knownEndpoint{}
		}
		k.rate = c.repliesFor(up)
		known[ep] = k
	}
	c.known = known
	c.others.setGlobal(c.repliesFor(fastest))
}

// allow takes a reply's tokens for a reply to src; false if it must not
// be sent.
func (c *cookieLimiter) allow(src netip.AddrPort, now time.Time) bool {
	c.mu.Lock()
	c.refreshLocked(now)
	k := c.known[src]
	if k != nil {
		ok := k.b.Allow(now, k.rate, max(k.rate, 2))
		c.mu.Unlock()
		return ok
	}
	c.mu.Unlock()
	return c.others.allowSourceAndGlobal(src.Addr(), now)
}
