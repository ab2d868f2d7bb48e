// ratelimit.go owns the handshake rate limiter: a token bucket per source
// (IPv4 address or IPv6 /64) in a bounded table, plus one global bucket.
//
// Why rate limiting and not WireGuard's cookie reply: every handshake message
// already ends in a MAC keyed on the receiver's public key (wire.go), so
// random packets die after one hash, before any Diffie-Hellman. What remains
// is a flood by someone who knows our public key. A cookie reply would answer
// such unauthenticated senders (against "unknown senders get nothing": it
// confirms a responder exists at this address) and, under load, add a full
// round trip — 600 ms on GEO — to every legitimate handshake. Token buckets
// cost nothing on the wire, cap the Diffie-Hellman work per source, and the
// global bucket caps it overall when sources are spoofed. The price: a flood
// of spoofed sources with a valid MAC can starve other handshakes while it
// lasts (established sessions are unaffected, and rekeying retries for
// HandshakeAttemptTime).

package peers

import (
	"net/netip"
	"sync"
	"time"

	"scpsvpn/peers/tokenbucket"
)

type rateLimiter struct {
	mu       sync.Mutex
	rate     float64 // tokens per second per source
	burst    float64
	max      int // table bound
	global   tokenbucket.Bucket
	grate    float64
	gburst   float64
	sources  map[netip.Addr]*tokenbucket.Bucket
	lastSwep time.Time
}

func newRateLimiter(rate, burst, globalRate float64, max int) *rateLimiter {
	return &rateLimiter{
		rate:    rate,
		burst:   burst,
		max:     max,
		grate:   globalRate,
		gburst:  globalRate, // one second of global budget
		sources: make(map[netip.Addr]*tokenbucket.Bucket),
	}
}

// sourceKey groups IPv6 sources by /64: one host usually owns a whole /64
// and could otherwise rotate addresses to get fresh buckets.
func sourceKey(a netip.Addr) netip.Addr {
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.Addr()
	}
	return a.WithZone("")
}

// allow takes one token for src and one global token. It allocates a table
// entry only while the table has room, after sweeping idle entries.
func (r *rateLimiter) allow(src netip.Addr, now time.Time) bool {
	key := sourceKey(src)
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.sources[key]
	if !ok {
		if len(r.sources) >= r.max {
			r.sweepLocked(now)
			if len(r.sources) >= r.max {
				return false
			}
		}
		b = new(tokenbucket.Bucket) // starts full
		r.sources[key] = b
	}
	if !b.Ready(now, r.rate, r.burst) || !r.global.Ready(now, r.grate, r.gburst) {
		return false
	}
	b.Take()
	r.global.Take()
	return true
}

// sweep drops entries whose buckets have refilled completely: forgetting
// them changes nothing, as a new entry starts full.
func (r *rateLimiter) sweep(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.lastSwep) < time.Second {
		return
	}
	r.sweepLocked(now)
}

func (r *rateLimiter) sweepLocked(now time.Time) {
	r.lastSwep = now
	for k, b := range r.sources {
		if b.Full(now, r.rate, r.burst) {
			delete(r.sources, k)
		}
	}
}

func (r *rateLimiter) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sources)
}
