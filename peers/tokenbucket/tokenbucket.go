// Package tokenbucket limits events to a rate with a burst, in wall-clock
// time: the handshake limiter of peers (a bucket per source and a global
// one) and the tunnel's ICMP unreachable replies use it. The scps pacer is
// a different bucket (bytes, virtual time, a balance that may go negative,
// and a due time to wake at) and keeps its own.
package tokenbucket

import "time"

// Bucket holds tokens for one limited thing. Rate and burst are passed to
// each call rather than stored, so a table of many buckets that share them
// stays small. The zero Bucket is full. It is not safe for concurrent use.
type Bucket struct {
	tokens float64
	last   time.Time // zero: never used, full
}

// refill credits the time since the last call at rate, up to burst.
func (b *Bucket) refill(now time.Time, rate, burst float64) {
	switch {
	case b.last.IsZero():
		b.tokens = burst
	case now.After(b.last):
		b.tokens = min(burst, b.tokens+now.Sub(b.last).Seconds()*rate)
	default:
		return // a clock step back credits nothing and keeps last
	}
	b.last = now
}

// Allow takes one token if there is one: rate tokens per second, at most
// burst saved up.
func (b *Bucket) Allow(now time.Time, rate, burst float64) bool {
	if !b.Ready(now, rate, burst) {
		return false
	}
	b.Take()
	return true
}

// Ready reports whether a token is there, without taking it: an event
// that needs tokens of several buckets checks them all before it takes.
func (b *Bucket) Ready(now time.Time, rate, burst float64) bool {
	b.refill(now, rate, burst)
	return b.tokens >= 1
}

// Take takes the token Ready reported.
func (b *Bucket) Take() { b.tokens-- }

// Full reports whether the bucket would be full at now; forgetting a full
// bucket changes nothing, as a new one starts full.
func (b *Bucket) Full(now time.Time, rate, burst float64) bool {
	return b.last.IsZero() || b.tokens+now.Sub(b.last).Seconds()*rate >= burst
}
