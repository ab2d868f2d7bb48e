package tunnel

// Each peer's receive work runs on that peer's own goroutine. The shared
// UDP reader only authenticates and decrypts (a fixed cost per datagram)
// and hands each peer's packets, in order, to the peer's bounded queue,
// like wireguard-go's per-peer sequential routines: a peer whose packets
// are slow to process (sparse frames, a flood, a slow TUN write on its
// datagrams) fills its own queue and loses its own packets, never another
// peer's time.

import (
	"context"
	"sync"
	"sync/atomic"

	"scpsvpn/configs"
)

// rxQueueLen bounds one peer's decrypted packets waiting for its
// association: about 1.5 MB, a few milliseconds of a fast link.
const rxQueueLen = 1024

// rxItem is a decrypted association packet (number pn), or a completed
// handshake, of peers session session.
type rxItem struct {
	session       uint64
	pn            uint64
	buf           *[]byte // pooled; the packet is (*buf)[:n]
	n             int
	established   bool
	local, remote []byte // the handshake's payloads, if established
}

// rxBufs hold packets of a 1500-byte path; rxBuf replaces one that is too
// small for a larger path's packet.
var rxBufs = sync.Pool{New: func() any { b := make([]byte, configs.DefaultPathMTU); return &b }}

// rxBuf returns a pooled buffer that holds at least n bytes. The UDP reader
// decrypts into it, and push hands it to the queue without a copy.
func rxBuf(n int) *[]byte {
	bp := rxBufs.Get().(*[]byte)
	if cap(*bp) < n {
		rxBufs.Put(bp)
		b := make([]byte, n)
		bp = &b
	}
	*bp = (*bp)[:cap(*bp)]
	return bp
}

// peerRx is one peer's receive queue and the routine that drains it.
type peerRx struct {
	q     chan rxItem
	drops *atomic.Uint64 // packets dropped because the queue was full
}

func newPeerRx(drops *atomic.Uint64) *peerRx {
	return &peerRx{q: make(chan rxItem, rxQueueLen), drops: drops}
}

// push queues packet (*bp)[:n], taking bp (from rxBuf): the queue returns
// it to the pool once the packet is handled. With the queue full it is
// dropped and counted, as a loss on the link would be (the association
// repairs it).
func (r *peerRx) push(session, pn uint64, bp *[]byte, n int) {
	select {
	case r.q <- rxItem{session: session, pn: pn, buf: bp, n: n}:
	default:
		rxBufs.Put(bp)
		r.drops.Add(1)
	}
}

// pushEstablished queues a completed handshake. It must not be lost (it
// tells a restarted peer from a rekey), so with the queue full the oldest
// items make room: packets that came before the new session, or an older
// handshake, whose news the newer one carries too (its instance is the
// peer's latest).
func (r *peerRx) pushEstablished(session uint64, local, remote []byte) {
	it := rxItem{session: session, established: true, local: local, remote: remote}
	for {
		select {
		case r.q <- it:
			return
		default:
		}
		select {
		case old := <-r.q:
			if old.buf != nil {
				rxBufs.Put(old.buf)
				r.drops.Add(1)
			}
		default:
		}
	}
}

// run hands the queued items to handle in order until ctx ends.
func (r *peerRx) run(ctx context.Context, handle func(rxItem)) {
	for {
		select {
		case <-ctx.Done():
			return
		case it := <-r.q:
			handle(it)
			if it.buf != nil {
				rxBufs.Put(it.buf)
			}
		}
	}
}
