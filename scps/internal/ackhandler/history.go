package ackhandler

// This file owns the sent-packet history: one record per packet number
// (packet numbers are consecutive, so a ring indexed by pn - base), and per
// packet the frames that must be acted on when it is acknowledged or lost.
// Both rings are reused, so recording a packet allocates nothing once they
// have grown to the window.

import "time"

// Packet states.
const (
	pktOutstanding uint8 = iota
	pktAcked
	pktLost
)

// Kinds of frames remembered per packet (SentFrame.Kind).
const (
	KindStream uint8 = iota
	KindReset
	KindMaxData
	KindMaxStreamData
	KindMaxStreams
	KindDatagram
	KindAck
	KindPing
)

// SentPacket is the record of one sent packet.
type SentPacket struct {
	SentAt       time.Duration
	FirstFrame   uint64 // absolute index into the frame ring (FrameEnd before the first was added)
	Size         int32  // bytes (counted in flight when InFlight)
	NFrames      uint16
	AckEliciting bool
	InFlight     bool
	// Copy marks a redundant copy of another packet's stream data
	// (tailcopy.go): it is never copied itself, and its loss queues
	// nothing, since the original's own fate decides the repair.
	Copy   bool
	Path   uint8 // the path it went on (set by OnPacketSent)
	copied bool  // a copy of it went out
	state  uint8
}

// SentFrame is the record of one frame of a sent packet: what must be
// acted on when the packet is acknowledged or lost.
type SentFrame struct {
	ID   uint64 // stream id
	Off  uint64 // stream offset; MAX_* value; largest acknowledged for ACK
	N    uint64 // stream data length
	Kind uint8
	Fin  bool
}

type history struct {
	pkts   []SentPacket // power-of-two ring
	phead  int
	pcount int
	basePN uint64 // packet number of pkts[phead]

	frames []SentFrame // power-of-two ring
	fhead  int
	fcount int
	fbase  uint64 // absolute index of frames[fhead]
}

func (h *history) nextPN() uint64 { return h.basePN + uint64(h.pcount) }

// get returns the record of pn, or nil when pn is not in the history.
func (h *history) get(pn uint64) *SentPacket {
	if pn < h.basePN || pn >= h.nextPN() {
		return nil
	}
	return &h.pkts[(h.phead+int(pn-h.basePN))&(len(h.pkts)-1)]
}

// frame returns frame record abs.
func (h *history) frame(abs uint64) *SentFrame {
	return &h.frames[(h.fhead+int(abs-h.fbase))&(len(h.frames)-1)]
}

// addFrame appends a frame record for the packet being built and returns
// it.
func (h *history) addFrame() *SentFrame {
	if h.fcount == len(h.frames) {
		h.frames, h.fhead = grow(h.frames, h.fhead, h.fcount), 0
	}
	f := &h.frames[(h.fhead+h.fcount)&(len(h.frames)-1)]
	h.fcount++
	*f = SentFrame{}
	return f
}

// frameEnd is the absolute index the next frame record will get.
func (h *history) frameEnd() uint64 { return h.fbase + uint64(h.fcount) }

// dropFramesFrom forgets frame records from abs on (a packet that was
// built and then abandoned).
func (h *history) dropFramesFrom(abs uint64) { h.fcount = int(abs - h.fbase) }

// add records the next packet number; its frames are those added since
// FirstFrame.
func (h *history) add(p SentPacket) {
	if h.pcount == len(h.pkts) {
		h.pkts, h.phead = grow(h.pkts, h.phead, h.pcount), 0
	}
	h.pkts[(h.phead+h.pcount)&(len(h.pkts)-1)] = p
	h.pcount++
}

// grow returns a full power-of-two ring of count entries from head,
// copied in order to the front of one twice its size (at least 64).
func grow[T any](ring []T, head, count int) []T {
	n := make([]T, max(64, 2*len(ring)))
	for i := 0; i < count; i++ {
		n[i] = ring[(head+i)&(len(ring)-1)]
	}
	return n
}

// popResolved drops acknowledged and lost packets (and their frames) from
// the front.
func (h *history) popResolved() {
	for h.pcount > 0 {
		p := &h.pkts[h.phead]
		if p.state == pktOutstanding {
			return
		}
		// Frames of this packet are at the front of the frame ring.
		end := p.FirstFrame + uint64(p.NFrames)
		if end > h.fbase {
			k := int(end - h.fbase)
			h.fhead = (h.fhead + k) & (len(h.frames) - 1)
			h.fcount -= k
			h.fbase = end
		}
		h.phead = (h.phead + 1) & (len(h.pkts) - 1)
		h.pcount--
		h.basePN++
	}
}
