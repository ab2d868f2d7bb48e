// This file owns the link endpoint between gVisor and the TUN.
//
// Inbound: Inject copies the packet into a gVisor buffer and delivers it to
// the NIC on the caller's goroutine (no queue: gVisor's TCP dispatcher queues
// segments per endpoint itself). InjectBatch does the same for a batch
// through gVisor's GRO, which merges a flow's consecutive segments first.
//
// Outbound: WritePackets copies each packet into a pooled buffer with
// Headroom bytes in front and appends it to a bounded queue; one writer
// goroutine swaps the whole queue out and hands it to Output in batches of up
// to MaxBatch packets, so the TUN sees large batches without any per-packet
// allocation. wireguard's tun.Write merges a flow's segments (GRO) into the
// first segment's buffer, but only within that buffer's capacity, so data
// buffers get groRoom bytes of capacity: measured through a real TUN, this
// halves the CPU cost per GB towards the kernel (one write per ~11 segments
// instead of one per segment). Small packets (ACKs) use small buffers.
//
// When the queue is full, WritePackets BLOCKS (backpressure) rather than
// dropping. gVisor calls WritePackets from its TCP processing goroutines and
// treats an accepted packet as sent: a drop costs a retransmission and a
// congestion-window cut, and with a small queue TCP collapses (measured: a
// download fell from Gbit/s to 0.01 Gbit/s with the stock channel endpoint).
// Blocking instead slows the senders to exactly the writer's rate. Blocking
// too long would stall every TCP connection (timers and ACK processing share
// those goroutines), so the wait is bounded by OutBlockTimeout: when the
// writer makes no progress for that long, Output is considered stuck, and
// packets are dropped and counted until it moves again.

package stack

import (
	"encoding/binary"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/stack/gro"
)

// linkCounters are the endpoint's statistics, updated atomically.
type linkCounters struct {
	packetsIn     atomic.Uint64
	packetsOut    atomic.Uint64
	badPackets    atomic.Uint64
	queueBlocks   atomic.Uint64
	queueDrops    atomic.Uint64
	outputErrors  atomic.Uint64
	outputBatches atomic.Uint64
}

// dispatcherRef boxes the NIC's dispatcher so it can be swapped atomically.
type dispatcherRef struct{ d gstack.NetworkDispatcher }

// linkEndpoint implements gVisor's stack.LinkEndpoint for a TUN-like device
// carrying raw IPv4/IPv6 packets.
type linkEndpoint struct {
	mtu          atomic.Uint32
	output       func(bufs [][]byte, offset int) error
	log          *slog.Logger
	blockTimeout time.Duration
	caps         gstack.LinkEndpointCapabilities
	gsoMax       uint32 // Config.GSOMaxSize; 0: no GSO
	limit        int    // queue capacity in packets
	c            *linkCounters
	// filter sees every packet gVisor sends (IP header first) before it
	// is queued, and may rewrite it; true takes it out. partial says its
	// TCP checksum is a partial one the kernel completes (GSO).
	filter func(pkt []byte, partial bool) bool

	dispatcher atomic.Pointer[dispatcherRef]

	// groMu guards gro, which coalesces the segments of InjectBatch.
	groMu sync.Mutex
	gro   gro.GRO

	mu sync.Mutex
	// pending holds queued packets, oldest first; each is buf[:Headroom+len].
	pending [][]byte
	// freeSmall and freeLarge hold buffers returned by the writer for reuse,
	// by size class.
	freeSmall, freeLarge [][]byte
	largeCap             int // capacity of a large buffer after Headroom
	// outstanding counts buffers in pending or being written; <= limit.
	outstanding int
	// spaceCh is closed (and reset to nil) when the writer frees space; it is
	// only allocated while a sender waits.
	spaceCh chan struct{}
	// stuck is set when a sender timed out waiting; senders then drop at once
	// until the writer makes progress.
	stuck  bool
	closed bool

	wake      chan struct{} // capacity 1: pending became non-empty
	done      chan struct{} // closed by Close
	closeOnce sync.Once
	wg        sync.WaitGroup
}

var (
	_ gstack.LinkEndpoint = (*linkEndpoint)(nil)
	_ gstack.GSOEndpoint  = (*linkEndpoint)(nil)
)

// newLinkEndpoint creates the endpoint and starts its writer goroutine; Close
// (called by gVisor when the NIC is removed) stops it and Wait waits for it.
func newLinkEndpoint(cfg *Config, c *linkCounters) *linkEndpoint {
	e := &linkEndpoint{
		output:       cfg.Output,
		log:          cfg.Logger,
		blockTimeout: cfg.OutBlockTimeout,
		limit:        cfg.OutQueueLen,
		c:            c,
		pending:      make([][]byte, 0, cfg.OutQueueLen),
		freeSmall:    make([][]byte, 0, cfg.OutQueueLen),
		freeLarge:    make([][]byte, 0, cfg.OutQueueLen),
		largeCap:     max(cfg.MTU, groRoom),
		wake:         make(chan struct{}, 1),
		done:         make(chan struct{}),
	}
	e.mtu.Store(uint32(cfg.MTU))
	if cfg.GSOMaxSize > 0 {
		e.gsoMax = uint32(cfg.GSOMaxSize)
		e.largeCap = max(e.largeCap, cfg.GSOMaxSize)
	}
	if cfg.TrustRXChecksums {
		e.caps |= gstack.CapabilityRXChecksumOffload
	}
	// A coalesced segment keeps its first part's checksum, which the NIC
	// would check again (and drop) unless told checksums are trusted: GRO
	// only with trusted checksums, plain delivery otherwise.
	e.gro.Init(cfg.TrustRXChecksums)
	e.wg.Add(1)
	go e.writeLoop()
	return e
}

// inject delivers one raw IP packet (copied) to the attached NIC.
func (e *linkEndpoint) inject(pkt []byte) {
	pb, d := e.packetFor(pkt)
	if pb == nil {
		return
	}
	d.DeliverNetworkPacket(pb.NetworkProtocolNumber, pb)
	pb.DecRef()
}

// packetFor copies a raw IP packet into a packet buffer for the attached
// NIC's dispatcher; nil (counted) for a packet that is not IP or when no
// NIC is attached.
func (e *linkEndpoint) packetFor(pkt []byte) (*gstack.PacketBuffer, gstack.NetworkDispatcher) {
	var proto tcpip.NetworkProtocolNumber
	switch {
	case len(pkt) >= header.IPv4MinimumSize && header.IPVersion(pkt) == header.IPv4Version:
		proto = header.IPv4ProtocolNumber
	case len(pkt) >= header.IPv6MinimumSize && header.IPVersion(pkt) == header.IPv6Version:
		proto = header.IPv6ProtocolNumber
	default:
		e.c.badPackets.Add(1)
		return nil, nil
	}
	ref := e.dispatcher.Load()
	if ref == nil || ref.d == nil {
		e.c.badPackets.Add(1)
		return nil, nil
	}
	e.c.packetsIn.Add(1)
	pb := gstack.NewPacketBuffer(gstack.PacketBufferOptions{Payload: buffer.MakeWithData(pkt)})
	pb.NetworkProtocolNumber = proto
	pb.RXChecksumValidated = e.caps&gstack.CapabilityRXChecksumOffload != 0
	return pb, ref.d
}

// injectBatch coalesces the packets of one batch (see Stack.InjectBatch).
// gVisor's GRO state is not safe for concurrent use and holds packets
// until flushed, so a batch holds groMu from beginBatch to end.
type injectBatch struct{ e *linkEndpoint }

func (e *linkEndpoint) beginBatch() injectBatch {
	e.groMu.Lock()
	return injectBatch{e}
}

// add copies pkt and queues it for coalescing.
func (b injectBatch) add(pkt []byte) {
	pb, d := b.e.packetFor(pkt)
	if pb == nil {
		return
	}
	b.e.gro.Dispatcher = d
	b.e.gro.Enqueue(pb)
	pb.DecRef()
}

// flush delivers every coalesced packet held.
func (b injectBatch) flush() {
	if b.e.gro.Dispatcher != nil {
		b.e.gro.Flush()
	}
}

// end flushes and ends the batch.
func (b injectBatch) end() {
	b.flush()
	b.e.groMu.Unlock()
}

// WritePackets implements stack.LinkWriter. It copies every packet into the
// outbound queue, blocking while the queue is full (see the file comment).
func (e *linkEndpoint) WritePackets(pkts gstack.PacketBufferList) (int, tcpip.Error) {
	n := 0
	for _, pkt := range pkts.AsSlice() {
		if e.enqueue(pkt) {
			n++
		}
	}
	if n == 0 {
		e.mu.Lock()
		closed := e.closed
		e.mu.Unlock()
		if closed {
			return 0, &tcpip.ErrClosedForSend{}
		}
		return 0, &tcpip.ErrNoBufferSpace{}
	}
	return n, nil
}

// enqueue copies pkt into a queue buffer; false means it was dropped.
func (e *linkEndpoint) enqueue(pkt *gstack.PacketBuffer) bool {
	size := pkt.Size()
	b, ok := e.buffer(size, true)
	if !ok {
		return false
	}
	// Copy outside the lock so that several TCP goroutines copy in parallel.
	// Per-connection order is kept: gVisor holds the TCP endpoint's lock
	// across WritePackets.
	copyPacket(b[Headroom:], pkt)
	partial := false
	if e.gsoMax > 0 {
		putVirtioNetHdr(b[Headroom-VirtioNetHdrLen:Headroom], pkt)
		partial = pkt.GSOOptions.Type != gstack.GSONone && pkt.GSOOptions.NeedsCsum
	}
	if f := e.filter; f != nil && f(b[Headroom:], partial) {
		e.release([][]byte{b}) // taken out by the filter: as if written
		return true
	}
	e.push(b)
	return true
}

// enqueueRaw queues a packet built outside gVisor (a cookie SYN-ACK). It
// never waits for room: false means the queue was full and it was dropped.
func (e *linkEndpoint) enqueueRaw(pkt []byte) bool {
	b, ok := e.buffer(len(pkt), false)
	if !ok {
		return false
	}
	copy(b[Headroom:], pkt)
	if e.gsoMax > 0 {
		clear(b[Headroom-VirtioNetHdrLen : Headroom])
	}
	e.push(b)
	return true
}

// buffer takes a queue slot and a buffer for a packet of size bytes,
// waiting for room if wait; false (counted) when the packet must be
// dropped.
func (e *linkEndpoint) buffer(size int, wait bool) ([]byte, bool) {
	e.mu.Lock()
	if e.closed || (e.outstanding >= e.limit && (!wait || !e.waitSpaceLocked())) {
		e.mu.Unlock()
		e.c.queueDrops.Add(1)
		return nil, false
	}
	e.outstanding++
	free, classCap := &e.freeLarge, e.largeCap
	if size <= smallPacket {
		free, classCap = &e.freeSmall, smallPacket
	}
	var b []byte
	if n := len(*free); n > 0 {
		b = (*free)[n-1]
		*free = (*free)[:n-1]
	}
	e.mu.Unlock()
	need := Headroom + size
	if cap(b) < need {
		b = make([]byte, Headroom+max(classCap, size))
	}
	return b[:need], true
}

// push appends a filled buffer to the queue and wakes the writer.
func (e *linkEndpoint) push(b []byte) {
	e.mu.Lock()
	wasEmpty := len(e.pending) == 0
	e.pending = append(e.pending, b)
	e.mu.Unlock()
	if wasEmpty {
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
}

// waitSpaceLocked waits, with e.mu held (and released while waiting), until
// a buffer is free. It returns false when the packet must be dropped: the
// endpoint is closed, or the writer made no progress within blockTimeout.
func (e *linkEndpoint) waitSpaceLocked() bool {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for e.outstanding >= e.limit {
		if e.closed || e.stuck {
			return false
		}
		if timer == nil {
			e.c.queueBlocks.Add(1)
			timer = time.NewTimer(e.blockTimeout)
		}
		if e.spaceCh == nil {
			e.spaceCh = make(chan struct{})
		}
		ch := e.spaceCh
		e.mu.Unlock()
		select {
		case <-ch:
			e.mu.Lock()
		case <-timer.C:
			e.mu.Lock()
			if e.outstanding >= e.limit {
				if !e.stuck {
					e.log.Warn("stack: outbound queue stuck, dropping packets",
						"timeout", e.blockTimeout, "queued", e.outstanding)
				}
				e.stuck = true
				return false
			}
		case <-e.done:
			e.mu.Lock()
		}
	}
	return true
}

// copyPacket copies the whole packet (headers and payload) into dst without
// allocating, walking gVisor's view list directly.
func copyPacket(dst []byte, pkt *gstack.PacketBuffer) {
	views, off := pkt.AsViewList()
	n := 0
	for v := views.Front(); v != nil && n < len(dst); v = v.Next() {
		s := v.AsSlice()
		if off >= len(s) {
			off -= len(s)
			continue
		}
		n += copy(dst[n:], s[off:])
		off = 0
	}
}

// Linux's virtio-net header values (include/uapi/linux/virtio_net.h).
const (
	virtioNetHdrFNeedsCsum = 1
	virtioNetHdrGSOTCPv4   = 1
	virtioNetHdrGSOTCPv6   = 4
)

// putVirtioNetHdr writes the virtio-net header of pkt into h (10 bytes, the
// host's byte order as a TUN without TUNSETVNETLE reads it): for a TCP
// segment of the stack, where its checksum is to be completed and, when it
// is longer than the MSS, how the kernel is to cut it.
func putVirtioNetHdr(h []byte, pkt *gstack.PacketBuffer) {
	clear(h)
	gso := pkt.GSOOptions
	if gso.Type == gstack.GSONone {
		return
	}
	ne := binary.NativeEndian
	ne.PutUint16(h[2:], uint16(pkt.HeaderSize())) // hdr_len
	if gso.NeedsCsum {
		h[0] = virtioNetHdrFNeedsCsum
		ne.PutUint16(h[6:], gso.L3HdrLen)   // csum_start
		ne.PutUint16(h[8:], gso.CsumOffset) // csum_offset
	}
	if pkt.Data().Size() > int(gso.MSS) {
		switch gso.Type {
		case gstack.GSOTCPv4:
			h[1] = virtioNetHdrGSOTCPv4
		case gstack.GSOTCPv6:
			h[1] = virtioNetHdrGSOTCPv6
		}
		ne.PutUint16(h[4:], gso.MSS) // gso_size
	}
}

// GSOMaxSize implements stack.GSOEndpoint.
func (e *linkEndpoint) GSOMaxSize() uint32 { return e.gsoMax }

// SupportedGSO implements stack.GSOEndpoint: the kernel segments (host GSO)
// when Config.GSOMaxSize is set.
func (e *linkEndpoint) SupportedGSO() gstack.SupportedGSO {
	if e.gsoMax == 0 {
		return gstack.GSONotSupported
	}
	return gstack.HostGSOSupported
}

// writeLoop is the single writer stage: it drains the queue into Output.
func (e *linkEndpoint) writeLoop() {
	defer e.wg.Done()
	e.log.Debug("stack: writer started")
	defer e.log.Debug("stack: writer stopped")
	batch := make([][]byte, 0, e.limit)
	for {
		select {
		case <-e.wake:
			batch = e.flush(batch)
		case <-e.done:
			// Flush what is queued (e.g. the RSTs of Close) and stop.
			e.flush(batch)
			return
		}
	}
}

// flush writes every pending packet and returns the (empty) batch slice for
// reuse.
func (e *linkEndpoint) flush(batch [][]byte) [][]byte {
	for {
		e.mu.Lock()
		if len(e.pending) == 0 {
			e.mu.Unlock()
			return batch
		}
		batch, e.pending = e.pending, batch[:0]
		e.mu.Unlock()

		for b := batch; len(b) > 0; {
			k := min(len(b), MaxBatch)
			if err := e.output(b[:k], Headroom); err != nil {
				if n := e.c.outputErrors.Add(1); n&(n-1) == 0 { // log 1st, 2nd, 4th, ...
					e.log.Warn("stack: output failed", "err", err, "errors", n)
				}
			} else {
				e.c.packetsOut.Add(uint64(k))
			}
			e.c.outputBatches.Add(1)
			e.release(b[:k])
			b = b[k:]
		}
		clear(batch) // drop references; the buffers now live in the free lists
		batch = batch[:0]
	}
}

// release returns written buffers to the free list and wakes blocked senders.
func (e *linkEndpoint) release(bufs [][]byte) {
	e.mu.Lock()
	for _, b := range bufs {
		free := &e.freeSmall
		if cap(b) > Headroom+smallPacket {
			free = &e.freeLarge
		}
		if len(*free) < cap(*free) {
			*free = append(*free, b[:0])
		}
	}
	e.outstanding -= len(bufs)
	e.stuck = false
	if e.spaceCh != nil {
		close(e.spaceCh)
		e.spaceCh = nil
	}
	e.mu.Unlock()
}

// queued reports the number of packets queued or being written.
func (e *linkEndpoint) queued() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.outstanding
}

// MTU implements stack.LinkEndpoint.
func (e *linkEndpoint) MTU() uint32 { return e.mtu.Load() }

// SetMTU implements stack.LinkEndpoint.
func (e *linkEndpoint) SetMTU(mtu uint32) { e.mtu.Store(mtu) }

// MaxHeaderLength implements stack.LinkEndpoint: raw IP, no link header.
func (*linkEndpoint) MaxHeaderLength() uint16 { return 0 }

// LinkAddress implements stack.LinkEndpoint: a TUN has no link address.
func (*linkEndpoint) LinkAddress() tcpip.LinkAddress { return "" }

// SetLinkAddress implements stack.LinkEndpoint; ignored.
func (*linkEndpoint) SetLinkAddress(tcpip.LinkAddress) {}

// Capabilities implements stack.LinkEndpoint.
func (e *linkEndpoint) Capabilities() gstack.LinkEndpointCapabilities { return e.caps }

// Attach implements stack.LinkEndpoint.
func (e *linkEndpoint) Attach(d gstack.NetworkDispatcher) {
	e.dispatcher.Store(&dispatcherRef{d: d})
}

// IsAttached implements stack.LinkEndpoint.
func (e *linkEndpoint) IsAttached() bool {
	ref := e.dispatcher.Load()
	return ref != nil && ref.d != nil
}

// Wait implements stack.LinkEndpoint: it waits for the writer goroutine.
func (e *linkEndpoint) Wait() { e.wg.Wait() }

// ARPHardwareType implements stack.LinkEndpoint.
func (*linkEndpoint) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareNone }

// AddHeader implements stack.LinkEndpoint: no link header.
func (*linkEndpoint) AddHeader(*gstack.PacketBuffer) {}

// ParseHeader implements stack.LinkEndpoint: no link header.
func (*linkEndpoint) ParseHeader(*gstack.PacketBuffer) bool { return true }

// Close implements stack.LinkEndpoint: it wakes blocked senders and tells the
// writer to flush and stop. Safe to call more than once.
func (e *linkEndpoint) Close() {
	e.closeOnce.Do(func() {
		e.mu.Lock()
		e.closed = true
		if e.spaceCh != nil {
			close(e.spaceCh)
			e.spaceCh = nil
		}
		e.mu.Unlock()
		e.dispatcher.Store(nil)
		close(e.done)
	})
}

// SetOnCloseAction implements stack.LinkEndpoint; unused.
func (*linkEndpoint) SetOnCloseAction(func()) {}
