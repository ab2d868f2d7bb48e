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
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"scpsvpn/configs"
)

// rxQueueLen bounds one peer's decrypted packets waiting for its
// association, and rxQueueMax the bytes of their buffers: about 1.5 MB,
// a few milliseconds of a fast link. Counting packets alone let a peer
// whose path carries 64 KB datagrams hold 64 MB here; the bytes the
// queue may hold are also the peer's part of the memory budget
// (memory.go), which may be less.
const (
	rxQueueLen = 1024
	rxQueueMax = rxQueueLen * configs.DefaultPathMTU
)

// rxItem is a decrypted association packet (number pn), or a completed
// handshake, of peers session session.
type rxItem struct {
	session       uint64
	pn            uint64
	src           netip.AddrPort // where the packet came from
	via           int            // the peer's configured path whose socket took it; -1: the listen socket
	buf           *[]byte        // pooled; the packet is (*buf)[:n]
	n             int
	established   bool
	local, remote []byte        // the handshake's payloads, if established
	rtt           time.Duration // the handshake's round trip, if established
	responder     bool          // we answered the handshake, if established
	at            time.Time     // when the packet reached the host (zero: unknown)
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
	held  atomic.Int64   // bytes of the queued packets' buffers
	limit atomic.Int64   // the most held may reach
}

func newPeerRx(drops *atomic.Uint64, limit int64) *peerRx {
	r := &peerRx{q: make(chan rxItem, rxQueueLen), drops: drops}
	r.limit.Store(limit)
	return r
}

// push queues packet (*bp)[:n], which reached the host at at, taking bp (from rxBuf): the queue returns
// it to the pool once the packet is handled. With the queue full, in
// packets or in bytes, it is dropped and counted, as a loss on the link
// would be (the association repairs it).
func (r *peerRx) push(session, pn uint64, bp *[]byte, n int, src netip.AddrPort, via int, at time.Time) {
	size := int64(cap(*bp))
	if r.held.Add(size) > r.limit.Load() {
		r.held.Add(-size)
		rxBufs.Put(bp)
		r.drops.Add(1)
		return
	}
	select {
	case r.q <- rxItem{session: session, pn: pn, buf: bp, n: n, src: src, via: via, at: at}:
	default:
		r.held.Add(-size)
		rxBufs.Put(bp)
		r.drops.Add(1)
	}
}

// release returns a handled or dropped item's buffer to the pool.
func (r *peerRx) release(it rxItem) {
	if it.buf != nil {
		r.held.Add(-int64(cap(*it.buf)))
		rxBufs.Put(it.buf)
	}
}

// pushEstablished queues a completed handshake. It must not be lost (it
// tells a restarted peer from a rekey), so with the queue full the oldest
// items make room: packets that came before the new session, or an older
// handshake, whose news the newer one carries too (its instance is the
// peer's latest).
func (r *peerRx) pushEstablished(session uint64, local, remote []byte, rtt time.Duration, responder bool) {
	it := rxItem{session: session, established: true, local: local, remote: remote, rtt: rtt, responder: responder}
	for {
		select {
		case r.q <- it:
			return
		default:
		}
		select {
		case old := <-r.q:
			if old.buf != nil {
				r.release(old)
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
			r.release(it)
		}
	}
}
