// session.go owns one pair of transport keys made by a handshake: sealing
// with a counter nonce, opening with the replay window, and the limits after
// which a session must be replaced. Sealing and opening write into caller
// buffers and do not allocate.

package peers

import (
	"crypto/cipher"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/flynn/noise"
	"golang.org/x/crypto/chacha20poly1305"
)

// rejectAfterMessages is the hard limit on a session's counter, far below
// 2^64 so the counter can never wrap and reuse a nonce.
const rejectAfterMessages = math.MaxUint64 - (1 << 13)

type session struct {
	peer      *Peer
	id        uint64 // the handshake's, the same at both ends (see handshakeID)
	local     uint32 // our index: the peer writes it into packets to us
	remote    uint32 // the peer's index: we write it into packets to them
	send      cipher.AEAD
	recv      cipher.AEAD
	created   time.Time
	initiator bool // we sent the initiation that made this session

	sendCounter atomic.Uint64
	sendBytes   atomic.Uint64
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

// seal writes a transport datagram for plaintext into dst. The nonce is the
// receiver index and counter exactly as they appear in the header (12
// bytes), so it is unique per key and needs no scratch buffer.
func (s *session) seal(plaintext, dst []byte) ([]byte, error) {
	n := len(plaintext)
	if cap(dst) < n+Overhead {
		return nil, ErrBufferTooSmall
	}
	out := dst[:HeaderLen]
	if inexactOverlap(dst[HeaderLen:HeaderLen+n+TagLen], plaintext) || anyOverlap(dst[:HeaderLen], plaintext) {
		return nil, ErrBufferOverlap
	}
	ctr := s.sendCounter.Add(1) - 1
	if ctr >= rejectAfterMessages {
		return nil, ErrNoSession
	}
	putTransportHeader(out, s.remote, ctr)
	out = s.send.Seal(out, out[1:HeaderLen], plaintext, nil)
	s.sendBytes.Add(uint64(n))
	return out, nil
}

// open authenticates and decrypts a transport datagram into dst, checking
// the replay window before (cheap rejection of duplicates) and after (two
// goroutines racing with the same packet) decryption. advanced reports
// whether the packet carried the highest counter seen so far.
func (s *session) open(h transportHeader, dst []byte) (plain []byte, advanced bool, err error) {
	if h.counter >= rejectAfterMessages {
		return nil, false, ErrReplay
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
	if inexactOverlap(dst[:n], h.sealed) || anyOverlap(dst[:n], h.nonce) {
		return nil, false, ErrBufferOverlap
	}
	plain, err = s.recv.Open(dst[:0], h.nonce, h.sealed, nil)
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
