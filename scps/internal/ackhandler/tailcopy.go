package ackhandler

// This file owns the choice of tail copies: when the association has
// nothing new to send but the window and pacer have room (the end of a
// burst: a page's last object, a response, a request), the link would sit
// idle for a round trip while the last packets' ACKs come back, and a loss
// among those packets would be found only by its absence: a probe timeout
// after more than a round trip, and the repair half a round trip after
// that. Sending those packets' data a second time into the idle link,
// newest first, repairs such a loss before it is even noticed. A packet is
// copied at most once, copies are never copied, and only packets younger
// than the minimum RTT qualify: an older packet's ACK, or the evidence of
// its loss and so its repair, is due before its copy would leave. A copy
// leaving before that arrives before the repair would (copies go out as
// fast as the packets did, newest first, so a packet's age grows twice as
// fast as the copies get to it: with 3/4 of the minimum RTT, on GEO the
// copies stopped 0.2 s back from a page's end). A lone packet
// in flight (a short request) is not copied: the probe timeout covers it.
// Copies spend a credit that new packets earn (a quarter of their bytes),
// capped at half the congestion window, except that the newest packet of
// a burst may always be copied: a sender that is application-limited all
// the time (a video stream slower than the link) pays at most a quarter
// more and a packet per burst, and a page's end needs far less. Toward a
// peer that takes parities (scps/parity.go) the association sends those
// instead, and copies only in an idle period with no parity due.

import "time"

// tailCopies scans the sent history newest first for packets to copy.
type tailCopies struct {
	below        uint64 // the scan looks at below-1 next; at or under basePN: done
	top          uint64 // nextPN when the scan began
	lastOriginal uint64 // nextPN just after the latest ack-eliciting packet that is not a copy
	credit       int    // bytes copies may still take
	primed       bool   // credit was set for the first packet
}

// copyCreditShare: new packets earn this share of their bytes as copy
// credit.
const copyCreditShare = 4

// copyCredit earns or spends copy credit for a packet of size bytes just
// sent.
func (h *SentPacketHandler) copyCredit(size int, copy bool) {
	c := &h.copies
	limit := max(h.cp().cc.Window()/2, 2*h.fullPacket)
	if !c.primed {
		// A new association starts with the credit a busy one keeps:
		// its first response (a page's HTML) has its tail covered as
		// any later one.
		c.credit, c.primed = limit, true
	}
	if copy {
		c.credit -= size
		return
	}
	c.credit = min(c.credit+size/copyCreditShare, limit)
}

// NextCopy returns the newest packet whose stream data should go out again
// as a tail copy at now, or nil; it does not mark it (TakeCopy does).
func (h *SentPacketHandler) NextCopy(now time.Duration) *SentPacket {
	c := &h.copies
	if h.elicitingInFlight < 2 {
		return nil
	}
	if c.lastOriginal > c.top {
		// Something new went out since the scan began: start again
		// from the newest packet.
		c.top = h.hist.nextPN()
		c.below = c.top
	}
	rtt := h.cp().rtt
	minRTT := rtt.Min()
	if minRTT <= 0 {
		minRTT = rtt.Smoothed()
	}
	oldest := now - minRTT
	for c.below > h.hist.basePN {
		p := h.hist.get(c.below - 1)
		if p.SentAt < oldest {
			break
		}
		if p.state == pktOutstanding && p.AckEliciting && !p.Copy && !p.copied && h.hasStreamData(p) {
			if c.credit > 0 || c.below == h.hist.nextPN() {
				return p
			}
			break
		}
		c.below--
	}
	c.below = 0 // nothing left until something new is sent
	return nil
}

// TakeCopy marks p (from NextCopy) copied and appends its stream frames to
// dst for the caller to send again.
func (h *SentPacketHandler) TakeCopy(p *SentPacket, dst []SentFrame) []SentFrame {
	p.copied = true
	for i := uint64(0); i < uint64(p.NFrames); i++ {
		if f := h.hist.frame(p.FirstFrame + i); f.Kind == KindStream {
			dst = append(dst, *f)
		}
	}
	return dst
}

// hasStreamData reports whether p carried stream data: a packet of
// control frames or a lone FIN is not worth a copy (the data it ends has
// arrived, or is in a packet of its own).
func (h *SentPacketHandler) hasStreamData(p *SentPacket) bool {
	for i := uint64(0); i < uint64(p.NFrames); i++ {
		if f := h.hist.frame(p.FirstFrame + i); f.Kind == KindStream && f.N > 0 {
			return true
		}
	}
	return false
}

// TakeCopyOf is TakeCopy for packet pn, if it still awaits its
// acknowledgement, is no copy itself and was not copied: dst unchanged
// otherwise.
func (h *SentPacketHandler) TakeCopyOf(pn uint64, dst []SentFrame) []SentFrame {
	p := h.hist.get(pn)
	if p == nil || p.state != pktOutstanding || p.Copy || p.copied {
		return dst
	}
	return h.TakeCopy(p, dst)
}

// AnyStream reports whether packet pn carried data of a stream for which
// f is true.
func (h *SentPacketHandler) AnyStream(pn uint64, f func(id uint64) bool) bool {
	p := h.hist.get(pn)
	if p == nil {
		return false
	}
	for i := uint64(0); i < uint64(p.NFrames); i++ {
		if fr := h.hist.frame(p.FirstFrame + i); fr.Kind == KindStream && fr.N > 0 && f(fr.ID) {
			return true
		}
	}
	return false
}

// Unresolved reports whether a packet in [lo, hi) that carried stream
// data still awaits its acknowledgement: a parity over those packets
// (scps/parity.go) may yet repair it.
func (h *SentPacketHandler) Unresolved(lo, hi uint64) bool {
	for pn := max(lo, h.hist.basePN); pn < hi; pn++ {
		if p := h.hist.get(pn); p != nil && p.state == pktOutstanding && !p.Copy && h.hasStreamData(p) {
			return true
		}
	}
	return false
}
