// session.go owns one pair of transport keys made by a handshake: sealing
// with a counter nonce, opening with the replay window, and the limits after
// which a session must be replaced. Sealing and opening write into caller
// buffers and do not allocate.
//
// The counter of an association packet is the caller's (the association's
// packet number), so the packet number crosses the wire once, in our
// header, authenticated. The session guarantees what the nonce needs
// whatever the caller does: it refuses a counter not above every counter
// it sealed before, so no nonce repeats under its key.

package peers

import (
	"crypto/cipher"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/flynn/noise"
	"golang.org/x/crypto/chacha20poly1305"
)

// nonces are scratch space for the 12-byte nonce: a nonce on the stack
// would escape through the AEAD interface and cost an allocation per
// packet.
var nonces = sync.Pool{New: func() any { return new([12]byte) }}

type session struct {
	peer      *Peer
	id        uint64 // the handshake's, the same at both ends (see handshakeID)
	local     uint32 // our index: the peer writes it into packets to us
	remote    uint32 // the peer's index: we write it into packets to them
	send      cipher.AEAD
	recv      cipher.AEAD
	created   time.Time
	initiator bool // we sent the initiation that made this session

	// sendNext is one above the highest counter sealed (0: none yet);
	// sendCount and sendBytes count what was sealed, for rekeying.
	sendNext  atomic.Uint64
	sendCount atomic.Uint64
	sendBytes atomic.Uint64
	// keepaliveSent and keepaliveSeen: a session carries at most one
	// keepalive each way (its nonce is fixed, see wire.go).
	keepaliveSent atomic.Bool
	keepaliveSeen atomic.Bool
	// confirmed is false for a responder session until the initiator's
	// first transport packet proves it holds the keys; until then we never
	// send on it, so a replayed initiation cannot replace working keys.
	confirmed atomic.Bool
	dead      atomic.Bool

	remotePayload []byte // the initiator's handshake payload, reported on confirmation
	localPayload  []byte // ours in the same handshake, reported with it

	replayMu sync.Mutex
	replay   replayWindow
}

func newSession(p *Peer, id uint64, local, remote uint32, sendKey, recvKey [32]byte, now time.Time, initiator bool) (*session, error) {
	send, err := chacha20poly1305.New(sendKey[:])
	if err != nil {
		return nil, fmt.Errorf("session send cipher: %w", err)
	}
	recv, err := chacha20poly1305.New(recvKey[:])
	if err != nil {
		return nil, fmt.Errorf("session receive cipher: %w", err)
	}
	return &session{peer: p, id: id, local: local, remote: remote, send: send, recv: recv, created: now, initiator: initiator}, nil
}

// handshakeID names a completed handshake, and so the session it made, by
// the first 8 bytes of the Noise handshake hash: both ends compute the
// same hash over the same transcript, it differs for every handshake
// (fresh ephemeral keys), and no one else can compute it. Never 0, so the
// caller can keep 0 for "none".
func handshakeID(hs *noise.HandshakeState) uint64 {
	return max(binary.LittleEndian.Uint64(hs.ChannelBinding()), 1)
}

func (s *session) usable(now time.Time, rejectAfter time.Duration) bool {
	return s != nil && !s.dead.Load() && !s.expired(now, rejectAfter)
}

func (s *session) expired(now time.Time, rejectAfter time.Duration) bool {
	return now.Sub(s.created) >= rejectAfter
}

// seal writes a transport datagram for the association packet plaintext
// with counter counter into dst. The header is the additional data and the
// nonce holds the counter, so every byte of the datagram is authenticated.
func (s *session) seal(counter uint64, plaintext, dst []byte) ([]byte, error) {
	if counter > MaxCounter {
		return nil, ErrCounter
	}
	hl := HeaderLen(counter)
	n := len(plaintext)
	if cap(dst) < hl+n+TagLen {
		return nil, ErrBufferTooSmall
	}
	if inexactOverlap(dst[hl:hl+n+TagLen], plaintext) || anyOverlap(dst[:hl], plaintext) {
		return nil, ErrBufferOverlap
	}
	for {
		next := s.sendNext.Load()
		if counter < next {
			return nil, ErrCounter
		}
		if s.sendNext.CompareAndSwap(next, counter+1) {
			break
		}
	}
	out := dst[:hl]
	putTransportHeader(out, s.remote, counter, false)
	nonce := nonces.Get().(*[12]byte)
	putNonce(nonce, domainData, counter)
	out = s.send.Seal(out, nonce[:], plaintext, out)
	nonces.Put(nonce)
	s.sendCount.Add(1)
	s.sendBytes.Add(uint64(n))
	return out, nil
}

// sealNext seals with the counter one above the last sealed.
func (s *session) sealNext(plaintext, dst []byte) ([]byte, error) {
	for {
		c := s.sendNext.Load()
		out, err := s.seal(c, plaintext, dst)
		if err == ErrCounter && c <= MaxCounter && s.sendNext.Load() > c {
			continue // another Seal took c first
		}
		return out, err
	}
}

// sealKeepalive writes the session's one keepalive into dst.
func (s *session) sealKeepalive(dst []byte) ([]byte, error) {
	if cap(dst) < keepaliveLen {
		return nil, ErrBufferTooSmall
	}
	if !s.keepaliveSent.CompareAndSwap(false, true) {
		return nil, ErrCounter
	}
	out := dst[:transportFixed]
	putTransportHeader(out, s.remote, 0, true)
	nonce := nonces.Get().(*[12]byte)
	putNonce(nonce, domainKeepalive, 0)
	out = s.send.Seal(out, nonce[:], nil, out)
	nonces.Put(nonce)
	return out, nil
}

// open authenticates and decrypts a transport datagram into dst, checking
// the replay window before (cheap rejection of duplicates) and after (two
// goroutines racing with the same packet) decryption. advanced reports
// whether the packet carried the highest counter seen so far (a keepalive:
// whether it came before any packet).
func (s *session) open(h transportHeader, dst []byte) (plain []byte, advanced bool, err error) {
	if h.keepalive {
		return s.openKeepalive(h, dst)
	}
	s.replayMu.Lock()
	fresh := s.replay.check(h.counter)
	s.replayMu.Unlock()
	if !fresh {
		return nil, false, ErrReplay
	}
	n := len(h.sealed) - TagLen
	if cap(dst) < n {
		return nil, false, ErrBufferTooSmall
	}
	if inexactOverlap(dst[:n], h.sealed) || anyOverlap(dst[:n], h.header) {
		return nil, false, ErrBufferOverlap
	}
	nonce := nonces.Get().(*[12]byte)
	putNonce(nonce, domainData, h.counter)
	plain, err = s.recv.Open(dst[:0], nonce[:], h.sealed, h.header)
	nonces.Put(nonce)
	if err != nil {
		return nil, false, ErrAuth
	}
	s.replayMu.Lock()
	advanced = !s.replay.any || h.counter > s.replay.last
	fresh = s.replay.update(h.counter)
	s.replayMu.Unlock()
	if !fresh {
		return nil, false, ErrReplay
	}
	return plain, advanced, nil
}

func (s *session) openKeepalive(h transportHeader, dst []byte) (plain []byte, advanced bool, err error) {
	if s.keepaliveSeen.Load() {
		return nil, false, ErrReplay
	}
	nonce := nonces.Get().(*[12]byte)
	putNonce(nonce, domainKeepalive, 0)
	_, err = s.recv.Open(dst[:0], nonce[:], h.sealed, h.header)
	nonces.Put(nonce)
	if err != nil {
		return nil, false, ErrAuth
	}
	if !s.keepaliveSeen.CompareAndSwap(false, true) {
		return nil, false, ErrReplay
	}
	s.replayMu.Lock()
	advanced = !s.replay.any
	s.replayMu.Unlock()
	return nil, advanced, nil
}

// anyOverlap and inexactOverlap mirror crypto/internal/alias: the AEAD
// panics on partially overlapping buffers, we return an error instead.
func anyOverlap(x, y []byte) bool {
	return len(x) > 0 && len(y) > 0 &&
		uintptr(unsafe.Pointer(&x[0])) <= uintptr(unsafe.Pointer(&y[len(y)-1])) &&
		uintptr(unsafe.Pointer(&y[0])) <= uintptr(unsafe.Pointer(&x[len(x)-1]))
}

func inexactOverlap(x, y []byte) bool {
	if len(x) == 0 || len(y) == 0 || &x[0] == &y[0] {
		return false
	}
	return anyOverlap(x, y)
}
