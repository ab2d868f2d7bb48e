package tunnel

// Per-peer quotas at a hub (docs/reliability.md, "Fair shares at a hub").
// The flows a peer opens here, the ones re-originated on our LAN and the
// ones relayed on to another peer, each count against a fair share of
// max_flows: while the endpoint holds less than half of max_flows nobody
// is limited, beyond that a peer at its share (max_flows / peers) gets its
// new streams refused, so one spoke cannot take the slots every other
// spoke needs. A flow counts from the moment it takes a slot, not once it
// carries data: a dial toward a host that never answers holds its netstack
// slot for up to dialTimeout, and a relay waiting for the next hop's
// association holds its stream. Datagrams a peer sends for another peer
// are relayed at most at half that peer's configured uplink rate, so one
// spoke's flood leaves room for the others'.

import (
	"sync"
	"sync/atomic"
	"time"
)

// flowQuota counts one kind of a peer's flows.
type flowQuota struct{ n atomic.Int64 }

// take counts a new flow if the peer may open it: it is under share, or
// the endpoint is under half of max flows.
func (q *flowQuota) take(share, active, maxFlows int64) bool {
	if q.n.Add(1) > share && 2*active >= maxFlows {
		q.n.Add(-1)
		return false
	}
	return true
}

func (q *flowQuota) release() { q.n.Add(-1) }

// flowShare is a peer's fair share of max flows, and max flows.
func (e *Endpoint) flowShare() (share, maxFlows int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	maxFlows = int64(e.cfg.MaxFlows)
	return max(1, maxFlows/int64(max(1, len(e.cfg.Peers)))), maxFlows
}

// admitFlow takes a slot of q for a peer's new flow, counting a refusal.
// An admitted flow is held until releaseFlow.
func (e *Endpoint) admitFlow(q *flowQuota) bool {
	share, maxFlows := e.flowShare()
	if q.take(share, e.stats.FlowsHeld.Load(), maxFlows) {
		e.stats.FlowsHeld.Add(1)
		return true
	}
	e.stats.FlowsOverQuota.Add(1)
	return false
}

// releaseFlow ends a flow admitFlow admitted.
func (e *Endpoint) releaseFlow(q *flowQuota) {
	q.release()
	e.stats.FlowsHeld.Add(-1)
}

// byteBucket is a token bucket in bytes: rate a second, a burst of 100 ms
// worth (at least one large packet).
type byteBucket struct {
	mu     sync.Mutex
	tokens float64
	at     time.Time
}

func (b *byteBucket) allow(n int, rate float64, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	burst := max(rate/10, 65535)
	if b.at.IsZero() {
		b.tokens = burst
	} else {
		b.tokens = min(burst, b.tokens+rate*now.Sub(b.at).Seconds())
	}
	b.at = now
	if b.tokens < float64(n) {
		return false
	}
	b.tokens -= float64(n)
	return true
}

// relayDatagram passes a datagram from peer a on to peer to, within a's
// share of to's uplink: half its configured rate (no limit if unknown).
func (a *assoc) relayDatagram(to *assoc, p []byte) {
	if up := to.cfg.Link.Up; up > 0 && !a.quota.dgrams.allow(len(p), float64(up)/8/2, time.Now()) {
		a.e.stats.DatagramsOverQuota.Add(1)
		return
	}
	_ = to.sendDatagram(p)
}

// peerQuotas is what one peer holds at this endpoint.
type peerQuotas struct {
	served  flowQuota  // its flows re-originated on our LAN
	streams flowQuota  // its flows relayed on to another peer
	dgrams  byteBucket // its datagrams relayed on to other peers
}
