package scps

// This file owns tail parity (spec.md, PARITY): when a burst's data runs
// out (a page's last object, a response), the fate of the packets of the
// last round trip is unknown, and a loss among them is repaired a round
// trip after it was sent at best. Tail copies (send.go) repair the newest
// ones before their loss is known, but a copy costs a packet per packet,
// so in the time a loss's own repair takes they reach back only half a
// round trip: on GEO the last loss of a page cost (RTT + d)/2, 0.37 s, at
// best. A parity costs one packet per 32: the XOR of a block of
// consecutive packets, each as its 2-byte length and payload, from which
// the receiver rebuilds any one of them that did not arrive, the others
// being kept. So at idle the sender sends a parity over each block of its
// last round trip's packets (newest first), and no copies then: in the
// simulator the GEO page loaded as fast with the parities alone as with
// both (1.057x and 1.055x its floor), for 22 kB of parity against 315 kB
// of copies. Copies still go where no parity is due. The parities go
// after srtt/16 of idle (copies wait srtt/8: a copy costs a packet per
// packet at a false end mid-transfer, a parity one per block, once), and
// over blocks of 8 for the packets younger than 3/4 of the minimum RTT,
// of 32 for the older ones: 1.049x on 16 patterns where it was 1.057x
// (1.111x and 1.170x at worst) for 69 kB of parity per page instead of
// 22 kB.
//
// The sender keeps one XOR per block as it sends (not the packets), the
// receiver the payloads of its newest packets, each at most a
// MaxPacketSize: both bounded, and both counted in the association's
// memory budget (parityPart).

import (
	"crypto/subtle"
	"time"

	"scpsvpn/scps/internal/ackhandler"
	"scpsvpn/scps/internal/wire"
)

const (
	// parityGroup is how many consecutive packets a parity block covers
	// at most: at 0.5% loss, more than one loss in 32 packets is 1.1%.
	parityGroup = 32
	// parityFine is how many the sender's kept blocks cover: the newest
	// packets' parities go over blocks this small (two losses among them
	// cost the newer one's repair, a round trip after it was sent: the
	// most of any), the older ones' over parityGroup, four kept blocks
	// XORed into one (parityArm).
	parityFine = 8
	// parityRing is how many received payloads the receiver keeps at
	// most (spec.md): at most parityRing times the largest packet, fewer
	// where the memory budget is small (parityPart).
	parityRing = 512
	// parityReach bounds how far back from its next packet number a
	// sender covers, so that the blocks' packets are still in the
	// receiver's ring when the parities arrive (the parity packets and
	// whatever the receiver got after them fill the rest of it).
	parityReach = parityRing - 2*parityGroup
	// paritySlots is how many blocks the sender keeps: the reach and
	// the open block.
	paritySlots = parityReach/parityFine + 2
	// parityAssemblies is how many blocks in the making a receiver
	// keeps: a block spans two packets, which arrive in order.
	parityAssemblies = 4
)

// parityBlock is the sender's running XOR over a block of packets.
type parityBlock struct {
	first, count uint64
	size         int           // 2 + the longest payload
	lastAt       time.Duration // when its newest packet left
	sealed       bool          // its parity is queued or sent: it takes no more packets
	// data: a packet of it carried stream data or datagrams that may
	// still be unacknowledged. A block of ACKs and window updates alone
	// (a download's receiving side) is never eligible, nor one whose data
	// was all acknowledged, and parityEligible need not look its packets
	// up in the sent history: it did so on every deadline of a
	// download's receiving side, which is idle, and through the binary
	// at 250 Mbit/s that cost more of the receiving endpoint's time than
	// Receive itself (TestParityReceiverSkipsHistory).
	data bool
	buf  []byte // the XOR, size bytes
}

// paritySender is the sender's side: the blocks and what of them is queued.
type paritySender struct {
	blocks [paritySlots]parityBlock
	cur    int           // the open block's slot
	queue  []uint64      // first packet numbers of the blocks to send, in order
	armed  time.Duration // idleSince of the idle period whose parities went out (nextCopy)
	off    int           // bytes of queue[0]'s block sent
	most   int           // 2 + the largest payload (MaxPacketSize)
	walks  uint64        // blocks parityEligible looked up in the sent history
}

// onSent adds packet pn's payload to the open block, opening the next one
// when it is full, sealed or not contiguous; data says it carried stream
// data or datagrams.
func (s *paritySender) onSent(pn uint64, payload []byte, data bool, now time.Duration) {
	b := &s.blocks[s.cur]
	if b.count == 0 || b.sealed || b.count == parityFine || b.first+b.count != pn {
		s.cur = (s.cur + 1) % paritySlots
		b = &s.blocks[s.cur]
		*b = parityBlock{first: pn, buf: b.buf[:0]}
	}
	n := len(payload)
	if 2+n > len(b.buf) {
		if 2+n > cap(b.buf) {
			// Made once a slot, as large as a packet may be: the part
			// of the budget it takes (parityPart).
			nb := make([]byte, 2+n, max(2+n, s.most))
			copy(nb, b.buf)
			b.buf = nb
		} else {
			k := len(b.buf)
			b.buf = b.buf[:2+n]
			clear(b.buf[k:])
		}
	}
	b.buf[0] ^= byte(n >> 8)
	b.buf[1] ^= byte(n)
	subtle.XORBytes(b.buf[2:2+n], b.buf[2:2+n], payload)
	b.size = len(b.buf)
	b.count++
	b.lastAt = now
	b.data = b.data || data
}

// block returns the kept block that begins at packet first, or nil.
func (s *paritySender) block(first uint64) *parityBlock {
	for i := range s.blocks {
		if b := &s.blocks[i]; b.count > 0 && b.first == first {
			return b
		}
	}
	return nil
}

// parityEligible reports whether block b's parity is worth sending at
// now: not sent, all its packets within reach of the receiver's ring, its newest
// younger than the minimum RTT (an older packet's loss is known, and its
// repair on its way, before a parity would help), and a packet of it
// with stream data still unacknowledged.
func (a *Association) parityEligible(b *parityBlock) bool {
	if b.count == 0 || !b.data || b.sealed || b.first+parityReach < a.sent.NextPN() || a.sent.ElicitingInFlight() < 2 {
		// A lone packet in flight (a request) is the probe timeout's,
		// as for the copies.
		return false
	}
	rtt := a.sent.RTT()
	minRTT := rtt.Min()
	if minRTT <= 0 {
		minRTT = rtt.Smoothed()
	}
	if b.lastAt < a.now-minRTT {
		return false
	}
	a.parityOut.walks++
	// A packet once acknowledged or lost stays so: until the block
	// takes another packet with data, it need not be looked up again.
	b.data = a.sent.Unresolved(b.first, b.first+b.count)
	return b.data
}

// parityOn reports whether this association sends parities now: the peer
// takes them (Config.TailParity), the budget holds them (parityPart), and
// one path carries the packets (with several, a block's packets arrive
// apart and out of order).
func (a *Association) parityOn() bool {
	return a.cfg.TailParity && a.parityIn.slots > 0 && !a.paths.multi()
}

// parityDue reports whether parity is queued or would be at the next
// tail copy's moment; it changes nothing.
func (a *Association) parityDue() bool {
	if !a.parityOn() {
		return false
	}
	if len(a.parityOut.queue) > 0 {
		return true
	}
	for i := range a.parityOut.blocks {
		if a.parityEligible(&a.parityOut.blocks[i]) {
			return true
		}
	}
	return false
}

// parityArm queues the parities of the eligible blocks, newest first (the
// newest packets' own repair would come last), sealing the open block, and
// reports whether any parity is queued.
func (a *Association) parityArm() bool {
	s := &a.parityOut
	if !a.parityOn() {
		return false
	}
	if len(s.queue) == 0 {
		fine := a.now - a.parityFineAge()
		var into *parityBlock // an older block being merged into, queued
		for i := 0; i < paritySlots; i++ {
			b := &s.blocks[(s.cur-i+paritySlots)%paritySlots]
			if !a.parityEligible(b) {
				into = nil
				continue
			}
			b.sealed = true
			s.armed = a.idleSince
			if into != nil && b.first+b.count == into.first && b.count+into.count <= parityGroup {
				into.mergeOlder(b)
				s.queue[len(s.queue)-1] = into.first
				continue
			}
			s.queue = append(s.queue, b.first)
			if into = nil; b.lastAt < fine {
				into = b
			}
		}
		s.off = 0
	}
	return len(s.queue) > 0
}

// parityFineAge is how young a kept block is sent on its own: the newest
// packets of the last round trip, whose losses a repair would mend last
// (a round trip after they were sent); older ones' are merged up to
// parityGroup packets, their repair coming sooner. None on a path whose
// round trip is under parityFineRTT: there a parity waits the least idle
// (minCopyIdle), which a sender fed by a loaded host also falls into
// mid-transfer, and four times the parities at each such moment took
// its slow start's window (LEO through the binary: slow start ended at
// 0.37-0.67 of main's window on three loads of three), for a repair that
// costs a short round trip there.
func (a *Association) parityFineAge() time.Duration {
	rtt := a.sent.RTT()
	minRTT := rtt.Min()
	if minRTT <= 0 {
		minRTT = rtt.Smoothed()
	}
	if minRTT < parityFineRTT {
		return 0
	}
	// Through the binary a loss was found and repaired about 1.2 RTT
	// after it was sent (the queue, the packet threshold), so two losses
	// in a block sent 0.45 s before a GEO page's end still cost 0.3 s
	// over its parity: half the minimum RTT left them in a block of 32.
	return minRTT * 3 / 4
}

// parityFineRTT is the shortest round trip with fine blocks: the parity's
// wait (srtt/16) above the least (minCopyIdle).
const parityFineRTT = 16 * minCopyIdle

// mergeOlder makes b the parity of block o (sent just before it) and b
// together, in o's place: XOR is the same over any grouping of the
// packets, each padded with zeros to the longest.
func (b *parityBlock) mergeOlder(o *parityBlock) {
	if len(o.buf) < len(b.buf) {
		o.buf = append(o.buf, make([]byte, len(b.buf)-len(o.buf))...)
	}
	subtle.XORBytes(o.buf[:len(b.buf)], o.buf[:len(b.buf)], b.buf)
	b.buf, o.buf = o.buf, b.buf
	b.first, b.count = o.first, o.count+b.count
	b.size = len(b.buf)
	b.data = b.data || o.data
	o.count = 0
}

// appendParity fills b (up to limit) with PARITY frames of the queued
// blocks, a block's bytes running on into the next packet where they do
// not fit.
func (a *Association) appendParity(b []byte, limit int) []byte {
	s := &a.parityOut
	for len(s.queue) > 0 {
		blk := s.block(s.queue[0])
		if blk == nil || !blk.sealed {
			// Overwritten meanwhile (a long burst of copies or data).
			s.queue, s.off = s.queue[1:], 0
			continue
		}
		q := wire.Parity{First: blk.first, Count: blk.count, Size: uint64(blk.size), Offset: uint64(s.off)}
		left := blk.size - s.off
		n := min(left, limit-len(b)-wire.ParityHeaderLen(q, left))
		if n < left && n < 64 {
			break // the rest of the packet is too small to be worth a frame
		}
		b = wire.AppendParity(b, q, blk.buf[s.off:s.off+n])
		a.stats.ParityBytes += uint64(n)
		if s.off += n; s.off == blk.size {
			s.queue, s.off = s.queue[1:], 0
		}
	}
	if len(s.queue) == 0 {
		s.queue = s.queue[:0]
	}
	return b
}

// paritySlot is a received payload the receiver keeps.
type paritySlot struct {
	pn  uint64
	ok  bool
	buf []byte
}

// parityAssembly is a block whose PARITY frames are arriving.
type parityAssembly struct {
	q        wire.Parity // Offset unused
	have     uint64      // bytes from 0 on that arrived
	buf      []byte
	used     bool
	complete bool
}

// parityReceiver is the receiver's side: its newest payloads and the
// blocks being assembled.
type parityReceiver struct {
	slots int          // how many payloads it keeps (parityPart); 0: none
	most  int          // the largest payload it keeps (MaxPacketSize)
	ring  []paritySlot // slots slots, made with the first packet
	asm   [parityAssemblies]parityAssembly
	next  int // the assembly to reuse next
}

// store keeps packet pn's payload. A slot's buffer is made with the
// first payload it keeps; a payload larger than most is not kept (the
// budget counts most per slot), and its block cannot be rebuilt.
func (r *parityReceiver) store(pn uint64, pkt []byte) {
	if r.slots == 0 {
		return
	}
	if r.ring == nil {
		r.ring = make([]paritySlot, r.slots)
	}
	s := &r.ring[pn%uint64(len(r.ring))]
	if len(pkt) > r.most {
		s.ok = false
		return
	}
	if s.buf == nil {
		s.buf = make([]byte, 0, r.most)
	}
	s.pn, s.ok = pn, true
	s.buf = append(s.buf[:0], pkt...)
}

// slot is the kept payload of packet pn, or nil.
func (r *parityReceiver) slot(pn uint64) *paritySlot {
	if len(r.ring) == 0 {
		return nil // dropped by sizeParity since the block's frames came
	}
	if s := &r.ring[pn%uint64(len(r.ring))]; s.ok && s.pn == pn {
		return s
	}
	return nil
}

// held is the bytes the ring's buffers take.
func (r *parityReceiver) held() uint64 {
	var n uint64
	for i := range r.ring {
		n += uint64(cap(r.ring[i].buf))
	}
	return n
}

// parityPart is what tail parity takes of a budget (Config.Memory), and
// how many payloads the receiver then keeps: the sender's blocks
// (paritySlots of at most 2 + MaxPacketSize bytes) and the receiver's
// ring (a MaxPacketSize per payload kept). It comes out of the budget
// before the streams share the rest (Config.streamMemory), so an
// association holds its streams and its parity within Config.Memory and
// N associations within N budgets. The ring takes parityRing payloads
// (about 0.7 MB at the default packet size) where the budget has room
// beyond what the streams need (MinMemory); fewer where it has less, and
// none (no parity either way: the peer's parities go unused) where it
// has room for fewer than two blocks. Without a budget (0) or parity,
// nothing is taken.
func (c Config) parityPart() (bytes uint64, ring int) {
	if !c.TailParity {
		return 0, 0
	}
	per := uint64(c.MaxPacketSize)
	sender := uint64(paritySlots) * (2 + per)
	if c.Memory == 0 {
		return sender + parityRing*per, parityRing
	}
	spare := c.Memory - min(c.Memory, MinMemory)
	if spare < sender {
		return 0, 0
	}
	ring = int(min((spare-sender)/per, parityRing))
	if ring < 2*parityGroup {
		return 0, 0
	}
	return sender + uint64(ring)*per, ring
}

// streamMemory is the part of the budget the streams share: what parity
// leaves (0: no budget).
func (c Config) streamMemory() uint64 {
	part, _ := c.parityPart()
	return c.Memory - min(c.Memory, part)
}

// sizeParity sizes parity to the budget (parityPart): at start and when
// the budget changes (SetMemory). A ring of another size is dropped and
// made anew with the next packet (the payloads it kept can rebuild no
// more than the parities in flight would have); without a part, the
// sender's blocks go too.
func (a *Association) sizeParity() {
	_, ring := a.cfg.parityPart()
	r := &a.parityIn
	if ring != r.slots {
		r.slots, r.ring = ring, nil
	}
	r.most = a.cfg.MaxPacketSize
	if ring == 0 {
		a.parityOut = paritySender{}
	}
	a.parityOut.most = 2 + a.cfg.MaxPacketSize
}

// onFrame takes a PARITY frame's bytes into its block's assembly; a block
// complete is recovered after the packet (recoverParity).
func (a *Association) onParityFrame(f *wire.Frame) {
	r := &a.parityIn
	if r.ring == nil {
		a.stats.ParityUnused++ // not enabled here, or nothing received yet
		return
	}
	q := f.Parity
	var as *parityAssembly
	for i := range r.asm {
		if x := &r.asm[i]; x.used && x.q.First == q.First && x.q.Count == q.Count && x.q.Size == q.Size {
			as = x
			break
		}
	}
	if as == nil {
		as = &r.asm[r.next]
		r.next = (r.next + 1) % parityAssemblies
		*as = parityAssembly{q: q, used: true, buf: as.buf[:0]}
		as.q.Offset = 0
	}
	end := q.Offset + uint64(len(f.Data))
	if as.complete || q.Offset > as.have || end <= as.have {
		return // a gap before it (a lost part), or nothing new
	}
	if uint64(len(as.buf)) < end {
		as.buf = append(as.buf, make([]byte, end-uint64(len(as.buf)))...)
	}
	copy(as.buf[q.Offset:end], f.Data)
	as.have = end
	as.complete = as.have == as.q.Size
}

// recoverParity rebuilds, from each complete block, the one packet of it
// that did not arrive, and receives it.
func (a *Association) recoverParity() {
	r := &a.parityIn
	for i := range r.asm {
		as := &r.asm[i]
		if !as.complete {
			continue
		}
		as.complete, as.used = false, false
		if pn, pkt, ok := a.rebuild(as); ok {
			a.receiveRebuilt(pn, pkt)
			if a.state != stateOpen {
				return
			}
		}
	}
}

// rebuild XORs the kept packets of block as into its parity: with exactly
// one of them missing, what is left is that packet.
func (a *Association) rebuild(as *parityAssembly) (pn uint64, pkt []byte, ok bool) {
	r := &a.parityIn
	missing, found := uint64(0), false
	for p := as.q.First; p < as.q.First+as.q.Count; p++ {
		if r.slot(p) != nil {
			continue
		}
		if found || a.ack.Duplicate(p) {
			// Two missing, or arrived but no longer kept.
			a.stats.ParityUnused++
			return 0, nil, false
		}
		missing, found = p, true
	}
	if !found {
		return 0, nil, false // nothing was lost
	}
	buf := as.buf
	for p := as.q.First; p < as.q.First+as.q.Count; p++ {
		if p == missing {
			continue
		}
		s := r.slot(p).buf
		if 2+len(s) > len(buf) {
			a.stats.BadParity++
			return 0, nil, false
		}
		buf[0] ^= byte(len(s) >> 8)
		buf[1] ^= byte(len(s))
		subtle.XORBytes(buf[2:2+len(s)], buf[2:2+len(s)], s)
	}
	n := int(buf[0])<<8 | int(buf[1])
	if n == 0 || 2+n > len(buf) {
		a.stats.BadParity++
		return 0, nil, false
	}
	for _, c := range buf[2+n:] {
		if c != 0 {
			a.stats.BadParity++
			return 0, nil, false
		}
	}
	return missing, buf[2 : 2+n], true
}

// receiveRebuilt receives packet pn rebuilt from a parity: acknowledged
// (the sender need not repair it) and its frames applied but its ACKs
// (old news, which later ACKs carry too) and any PARITY.
func (a *Association) receiveRebuilt(pn uint64, pkt []byte) {
	eliciting, _, err := a.validate(pkt)
	if err != nil || a.ack.Duplicate(pn) {
		a.stats.BadParity++
		return
	}
	a.stats.ParityRepairs++
	a.ack.OnReceived(pn, a.rxAt, eliciting, a.cfg.AckEvery, a.ackDelay)
	a.parityIn.store(pn, pkt)
	var f wire.Frame
	for p := 0; p < len(pkt); {
		n, _ := wire.ParseFrame(pkt[p:], &f) // validated above
		p += n
		if f.Type == wire.FrameAck || f.Type == wire.FrameParity || f.Type == wire.FramePathRole {
			// PATH_ROLE speaks of the path a packet came on, which a
			// rebuilt one did not.
			continue
		}
		if err := a.apply(&f, pn); err != nil || a.state != stateOpen {
			return
		}
	}
}

// nextCopy is the next tail copy (NextCopy), none in an idle period
// whose parities went out: they cover the copies' packets for a
// thirtieth of the bytes.
func (a *Association) nextCopy() *ackhandler.SentPacket {
	if a.parityOn() && a.parityOut.armed == a.idleSince && a.idleSince != 0 {
		return nil
	}
	return a.sent.NextCopy(a.now)
}
