// errors.go owns the sentinel errors and the drop counters. Every datagram
// Receive rejects maps to exactly one reason, counted in Stats.Drops; the
// error returned is the sentinel itself (no wrapping), so a flood of bad
// packets costs no allocation.

package peers

import (
	"errors"
	"sync/atomic"
)

// Errors returned by Receive for dropped datagrams. Each is counted under
// its reason in Stats.Drops.
var (
	ErrMalformed        = errors.New("peers: malformed datagram")
	ErrUnknownType      = errors.New("peers: unknown datagram type")
	ErrBadMAC           = errors.New("peers: handshake MAC does not match our public key")
	ErrRateLimited      = errors.New("peers: handshake rate limited")
	ErrCookieLimited    = errors.New("peers: under load, and cookie replies at their share of the uplink")
	ErrHandshakeAuth    = errors.New("peers: handshake failed to authenticate")
	ErrUnknownPeer      = errors.New("peers: handshake from a key that is not a configured peer")
	ErrStaleInitiation  = errors.New("peers: replayed or stale handshake initiation")
	ErrUnknownIndex     = errors.New("peers: no session or handshake for receiver index")
	ErrSessionExpired   = errors.New("peers: session expired")
	ErrReplay           = errors.New("peers: replayed or too old transport packet")
	ErrAuth             = errors.New("peers: transport packet failed authentication")
	ErrBufferTooSmall   = errors.New("peers: destination buffer too small")
	ErrBufferOverlap    = errors.New("peers: source and destination buffers overlap inexactly")
	ErrNoSession        = errors.New("peers: no session with peer: call Initiate")
	ErrCounter          = errors.New("peers: counter not above the last sealed on the session, or beyond MaxCounter")
	ErrIndexFull        = errors.New("peers: receiver index table full")
	ErrNoEndpoint       = errors.New("peers: peer has no known endpoint")
	ErrPeerRemoved      = errors.New("peers: peer was removed from the configuration")
	ErrPayloadTooLarge  = errors.New("peers: handshake payload too large")
	ErrHandshakeFailure = errors.New("peers: internal handshake failure")
)

type dropReason int

const (
	dropMalformed dropReason = iota
	dropUnknownType
	dropBadMAC
	dropRateLimited
	dropHandshakeAuth
	dropUnknownPeer
	dropStaleInitiation
	dropUnknownIndex
	dropExpired
	dropReplay
	dropAuth
	dropBuffer
	dropInternal
	dropIndexFull
	dropCookieLimited
	numDropReasons
)

var dropInfo = [numDropReasons]struct {
	name string
	err  error
}{
	dropMalformed:       {"malformed", ErrMalformed},
	dropUnknownType:     {"unknown_type", ErrUnknownType},
	dropBadMAC:          {"bad_mac", ErrBadMAC},
	dropRateLimited:     {"rate_limited", ErrRateLimited},
	dropHandshakeAuth:   {"handshake_auth", ErrHandshakeAuth},
	dropUnknownPeer:     {"unknown_peer", ErrUnknownPeer},
	dropStaleInitiation: {"stale_initiation", ErrStaleInitiation},
	dropUnknownIndex:    {"unknown_index", ErrUnknownIndex},
	dropExpired:         {"session_expired", ErrSessionExpired},
	dropReplay:          {"replay", ErrReplay},
	dropAuth:            {"auth", ErrAuth},
	dropBuffer:          {"buffer", ErrBufferTooSmall},
	dropInternal:        {"internal", ErrHandshakeFailure},
	dropIndexFull:       {"index_full", ErrIndexFull},
	dropCookieLimited:   {"cookie_limited", ErrCookieLimited},
}

// reasonOf maps a session-level error back to its drop reason.
func reasonOf(err error) dropReason {
	for r, info := range dropInfo {
		if err == info.err {
			return dropReason(r)
		}
	}
	if err == ErrBufferOverlap {
		return dropBuffer
	}
	return dropInternal
}

type counters struct {
	drops [numDropReasons]atomic.Uint64

	rxPackets, rxBytes, txPackets, txBytes atomic.Uint64
	keepalivesRx                           atomic.Uint64
	initiationsSent, initiationsRcvd       atomic.Uint64
	responsesSent, handshakesCompleted     atomic.Uint64
	handshakeTimeouts, collisions          atomic.Uint64
	endpointChanges                        atomic.Uint64
	cookiesSent, cookiesReceived           atomic.Uint64
}

// Stats is a snapshot of the device counters.
type Stats struct {
	// Drops counts rejected datagrams by reason (malformed, bad_mac,
	// rate_limited, handshake_auth, unknown_peer, stale_initiation,
	// unknown_index, session_expired, replay, auth, buffer, internal,
	// index_full, cookie_limited: initiations under load left without a
	// cookie reply, cookielimit.go).
	Drops map[string]uint64

	RxPackets, RxBytes uint64 // authenticated transport packets and plaintext bytes
	TxPackets, TxBytes uint64 // sealed transport packets and plaintext bytes
	KeepalivesRx       uint64

	InitiationsSent     uint64 // including retransmissions
	InitiationsReceived uint64 // authenticated ones
	ResponsesSent       uint64
	HandshakesCompleted uint64 // sessions that became current, either role
	HandshakeTimeouts   uint64 // attempts given up after HandshakeAttemptTime
	HandshakeCollisions uint64 // peer initiations ignored because ours takes precedence
	EndpointChanges     uint64 // roaming events
	CookieRepliesSent   uint64 // initiations answered with a cookie instead of a handshake: we were under load
	CookiesReceived     uint64 // cookies a loaded peer sent us

	Sessions         int // live sessions and handshakes in the index table
	RateLimitEntries int // sources tracked by the handshake rate limiter
}

// TotalDrops sums Drops.
func (s Stats) TotalDrops() uint64 {
	var n uint64
	for _, v := range s.Drops {
		n += v
	}
	return n
}
