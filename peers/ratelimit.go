// ratelimit.go owns the handshake rate limiter: a token bucket per source
// (IPv4 address or IPv6 /64) in a bounded table, plus one global budget
// that tells when the device is under load.
//
// Every handshake message already ends in a MAC keyed on the receiver's
// public key (wire.go), so random packets die after one hash, before any
// Diffie-Hellman. What remains is a flood by someone who knows our public
// key. The global budget caps the Diffie-Hellman work for initiations from
// unproven sources; once it runs dry the device is under load and asks for
// a cookie (cookie.go) instead, so a flood from spoofed sources costs a
// hash and a short reply each, and initiations whose source is proven meet
// only their own source's bucket. Responses are not limited at all: they
// must name one of our outstanding initiations first.

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
	dry      time.Time // when the global budget last ran dry
	sources  map[netip.Addr]*tokenbucket.Bucket
	lastSwep time.Time
}

// loadLinger is how long the device stays under load after the global
// budget last ran dry: a flood that keeps draining it keeps the device
// loaded, instead of letting a fresh token through for a Diffie-Hellman
// every 1/globalRate seconds.
const loadLinger = time.Second

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

// loaded takes one token of the global budget for an initiation with a
// valid mac1 and reports whether the device is under load: the budget ran
// dry now or within loadLinger.
func (r *rateLimiter) loaded(now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.global.Allow(now, r.grate, r.gburst) {
		r.dry = now
	}
	return !r.dry.IsZero() && now.Sub(r.dry) < loadLinger && !now.Before(r.dry)
}

// allowSource takes one token for src. It allocates a table entry only
// while the table has room, after sweeping idle entries.
func (r *rateLimiter) allowSource(src netip.Addr, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.bucketLocked(src, now)
	return b != nil && b.Allow(now, r.rate, r.burst)
}

// allowSourceAndGlobal takes one token for src and one of the global
// budget, only if both have one.
func (r *rateLimiter) allowSourceAndGlobal(src netip.Addr, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.bucketLocked(src, now)
	if b == nil || !b.Ready(now, r.rate, r.burst) || !r.global.Ready(now, r.grate, r.gburst) {
		return false
	}
	b.Take()
	r.global.Take()
	return true
}

// bucketLocked returns src's bucket, nil if the table is full.
func (r *rateLimiter) bucketLocked(src netip.Addr, now time.Time) *tokenbucket.Bucket {
	key := sourceKey(src)
	b, ok := r.sources[key]
	if !ok {
		if len(r.sources) >= r.max {
			r.sweepLocked(now)
			if len(r.sources) >= r.max {
				return nil
			}
		}
		b = new(tokenbucket.Bucket) // starts full
		r.sources[key] = b
	}
	return b
}

// setGlobal changes the global budget's rate, with a second of it as
// burst.
func (r *rateLimiter) setGlobal(rate float64) {
	r.mu.Lock()
	r.grate, r.gburst = rate, rate
	r.mu.Unlock()
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
