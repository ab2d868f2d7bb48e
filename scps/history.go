package scps

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

// Kinds of frames remembered per packet.
const (
	sfStream uint8 = iota
	sfReset
	sfMaxData
	sfMaxStreamData
	sfMaxStreams
	sfDatagram
	sfAck
	sfPing
)

type sentPacket struct {
	sentAt       time.Duration
	firstFrame   uint64 // absolute index into the frame ring
	size         int32  // bytes (counted in flight when inFlight)
	nFrames      uint16
	ackEliciting bool
	inFlight     bool
	state        uint8
}

type sentFrame struct {
	id   uint64 // stream id
	off  uint64 // stream offset; MAX_* value; largest acknowledged for ACK
	n    uint64 // stream data length
	kind uint8
	fin  bool
}

type history struct {
	pkts   []sentPacket // power-of-two ring
	phead  int
	pcount int
	basePN uint64 // packet number of pkts[phead]

	frames []sentFrame // power-of-two ring
	fhead  int
	fcount int
	fbase  uint64 // absolute index of frames[fhead]
}

func (h *history) nextPN() uint64 { return h.basePN + uint64(h.pcount) }

// get returns the record of pn, or nil when pn is not in the history.
func (h *history) get(pn uint64) *sentPacket {
	if pn < h.basePN || pn >= h.nextPN() {
		return nil
	}
	return &h.pkts[(h.phead+int(pn-h.basePN))&(len(h.pkts)-1)]
}

// frame returns frame record abs.
func (h *history) frame(abs uint64) *sentFrame {
	return &h.frames[(h.fhead+int(abs-h.fbase))&(len(h.frames)-1)]
}

// addFrame appends a frame record for the packet being built and returns
// it.
func (h *history) addFrame() *sentFrame {
	if h.fcount == len(h.frames) {
		n := max(64, 2*len(h.frames))
		nf := make([]sentFrame, n)
		for i := 0; i < h.fcount; i++ {
			nf[i] = h.frames[(h.fhead+i)&(len(h.frames)-1)]
		}
		h.frames, h.fhead = nf, 0
	}
	f := &h.frames[(h.fhead+h.fcount)&(len(h.frames)-1)]
	h.fcount++
	*f = sentFrame{}
	return f
}

// frameEnd is the absolute index the next frame record will get.
func (h *history) frameEnd() uint64 { return h.fbase + uint64(h.fcount) }

// dropFramesFrom forgets frame records from abs on (a packet that was
// built and then abandoned).
func (h *history) dropFramesFrom(abs uint64) { h.fcount = int(abs - h.fbase) }

// add records the next packet number; its frames are those added since
// firstFrame.
func (h *history) add(p sentPacket) {
	if h.pcount == len(h.pkts) {
		n := max(64, 2*len(h.pkts))
		np := make([]sentPacket, n)
		for i := 0; i < h.pcount; i++ {
			np[i] = h.pkts[(h.phead+i)&(len(h.pkts)-1)]
		}
		h.pkts, h.phead = np, 0
	}
	h.pkts[(h.phead+h.pcount)&(len(h.pkts)-1)] = p
	h.pcount++
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
		end := p.firstFrame + uint64(p.nFrames)
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
