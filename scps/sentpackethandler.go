package scps

// This file owns sentPacketHandler, the sending side of reliability (RFC
// 9002 in spirit, shaped like quic-go's ackhandler): the sent-packet
// history, the bytes in flight, the RTT statistics, processing ACK frames,
// loss detection by packet threshold (3) and time threshold (9/8 RTT), the
// probe timeout with a MinRTO floor and its backoff capped at the probe
// interval, persistent congestion, the loss-cause classifier, and the
// congestion controller and pacer those feed. What the frames of an
// acknowledged or lost packet carried is the Association's business: the
// handler hands each frame to its frameHandler. Retransmissions always go
// in new packets, so a repair can only be declared lost again once its own
// packet is: one loss costs one repair (the SNACK embargo of SCPS-TP).

import (
	"time"

	"scpsvpn/scps/cc"
	"scpsvpn/scps/internal/wire"
)

const (
	packetThreshold = 3
	// maxPTOBackoff bounds the exponential backoff of the probe timeout.
	maxPTOBackoff = 6
	// persistentFactor: losses spanning this many PTOs with nothing
	// acknowledged between them are persistent congestion.
	persistentFactor = 3
)

// frameHandler acts on the frames of packets the sentPacketHandler
// resolved: an acknowledged frame is done with, a lost one may have to be
// sent again.
type frameHandler interface {
	frameAcked(f *sentFrame)
	frameLost(f *sentFrame)
}

type sentPacketHandler struct {
	epoch         time.Time // the Association's: cc gets absolute times
	minRTO        time.Duration
	probeInterval time.Duration
	sendRate      int64 // Config.SendRate: the pacer never exceeds it
	wireOverhead  int
	fullPacket    int // MaxPacketSize + WireOverhead: what the pacer waits for

	hist  history
	rtt   *cc.RTTStats
	cc    cc.Controller
	pacer bucket
	loss  lossClassifier

	largestAcked      uint64
	anyAcked          bool
	bytesInFlight     int
	elicitingInFlight int
	lastElicitingSent time.Duration
	lossTime          time.Duration // loss timer of the time threshold; 0 = not armed
	ptoCount          int
	probes            int // ack-eliciting probes the probe timeout asked for

	frames frameHandler
	stats  *Stats
}

// init sets h up for cfg (defaults filled in) at internal time now.
// rttNoise is the RTT variation the path shows without a queue.
func (h *sentPacketHandler) init(cfg Config, epoch time.Time, now, rttNoise time.Duration, frames frameHandler, stats *Stats) error {
	h.epoch = epoch
	h.minRTO, h.probeInterval = cfg.MinRTO, cfg.ProbeInterval
	h.sendRate, h.wireOverhead = cfg.SendRate, cfg.WireOverhead
	h.fullPacket = cfg.MaxPacketSize + cfg.WireOverhead
	h.frames, h.stats = frames, stats
	h.rtt = cc.NewRTTStats(cfg.InitialRTT)
	h.lastElicitingSent = now
	h.loss.mode = parseLossMode(cfg.Loss)
	h.loss.noise = rttNoise
	ctl, err := cc.New(cfg.Congestion, cc.Params{
		MaxDatagramSize: cfg.MaxPacketSize,
		RTT:             h.rtt,
		SendRate:        cfg.SendRate,
		RTTNoise:        rttNoise,
	})
	if err != nil {
		return err
	}
	h.cc = ctl
	h.updatePacer(now)
	h.pacer.tokens = h.pacer.maxBurst
	return nil
}

func (h *sentPacketHandler) abs(d time.Duration) time.Time { return h.epoch.Add(d) }

// updatePacer sets the pacer to min(SendRate, controller rate).
func (h *sentPacketHandler) updatePacer(now time.Duration) {
	rate := h.cc.PacingRate()
	if h.sendRate > 0 {
		link := float64(h.sendRate) / 8
		if rate <= 0 || link < rate {
			rate = link
		}
	}
	burst := max(pacerMinBurst*float64(h.fullPacket), rate*pacerBurstTime.Seconds())
	if rate == h.pacer.rate && burst == h.pacer.maxBurst {
		h.pacer.refill(now)
		return
	}
	h.pacer.setRate(now, rate, burst)
}

// windowOpen reports whether the congestion window has room.
func (h *sentPacketHandler) windowOpen() bool { return h.bytesInFlight < h.cc.Window() }

// paced reports whether the pacer lets a full packet go now (call
// updatePacer first).
func (h *sentPacketHandler) paced() bool { return h.pacer.ready(h.fullPacket) }

// pacedAt is when the pacer lets a full packet go: 0 if now.
func (h *sentPacketHandler) pacedAt(now time.Duration) time.Duration {
	h.updatePacer(now)
	if h.paced() {
		return 0
	}
	return h.pacer.readyAt(now, h.fullPacket)
}

// onPacketSent records p, the packet just built with the next packet number
// and the frames added since p.firstFrame, and charges the pacer with it.
// flightStart reports that p is the first ack-eliciting packet outstanding.
func (h *sentPacketHandler) onPacketSent(now time.Duration, p sentPacket) (flightStart bool) {
	h.hist.add(p)
	size := int(p.size)
	h.pacer.take(size + h.wireOverhead)
	if !p.ackEliciting {
		return false
	}
	flightStart = h.elicitingInFlight == 0
	h.elicitingInFlight++
	h.lastElicitingSent = now
	if p.inFlight {
		h.bytesInFlight += size
		h.cc.OnPacketSent(h.abs(now), size, h.bytesInFlight)
	}
	if h.probes > 0 {
		h.probes--
	}
	return flightStart
}

// skipPacket uses up the next packet number for a packet nothing in which
// is tracked (a CLOSE: it is never retransmitted).
func (h *sentPacketHandler) skipPacket(now time.Duration) {
	h.hist.add(sentPacket{sentAt: now, firstFrame: h.hist.frameEnd(), state: pktAcked})
	h.hist.popResolved()
}

// oldestSentAt is when the oldest packet in the history was sent; ok is
// false when the history is empty.
func (h *sentPacketHandler) oldestSentAt() (at time.Duration, ok bool) {
	if h.hist.pcount == 0 {
		return 0, false
	}
	return h.hist.get(h.hist.basePN).sentAt, true
}

// onAck processes an ACK frame received at now. newly reports whether it
// acknowledged any packet for the first time.
func (h *sentPacketHandler) onAck(now time.Duration, f *wire.Ack) (newly bool) {
	priorInFlight := h.bytesInFlight
	var (
		ackedBytes      int
		newlyEliciting  bool
		largestNewly    uint64
		largestNewlyAt  time.Duration
		largestWasNewly bool
	)
	base := h.hist.basePN
	it := f.Iter()
	for {
		r, ok := it.Next()
		if !ok || r.Largest < base {
			break
		}
		lo := max(r.Smallest, base)
		for pn := r.Largest; ; pn-- {
			p := h.hist.get(pn)
			if p.state != pktAcked {
				wasOutstanding := p.state == pktOutstanding
				p.state = pktAcked
				if wasOutstanding {
					if p.inFlight {
						h.bytesInFlight -= int(p.size)
						ackedBytes += int(p.size)
					}
					if p.ackEliciting {
						h.elicitingInFlight--
						newlyEliciting = true
					}
					if !newly || pn > largestNewly {
						largestNewly, largestNewlyAt = pn, p.sentAt
					}
					newly = true
					if pn == f.Largest {
						largestWasNewly = true
					}
				}
				h.framesAcked(p)
			}
			if pn == lo {
				break
			}
		}
	}
	if !h.anyAcked || f.Largest > h.largestAcked {
		h.largestAcked, h.anyAcked = f.Largest, true
	}
	var sample, peerDelay time.Duration
	if largestWasNewly && newlyEliciting {
		peerDelay = time.Duration(f.Delay) * time.Microsecond
		// The peer's reported delay is trusted up to a quarter RTT beyond
		// MaxAckDelay: the ACK budget of a narrow return link can hold an
		// ACK back that long, and counting it as path delay would look like
		// a queue.
		delay := min(peerDelay, max(MaxAckDelay, h.rtt.Smoothed()/4))
		h.rtt.Update(now-largestNewlyAt, delay)
		sample = h.rtt.Adjusted()
	}
	h.loss.onAck(now, ackedBytes, sample, h.rtt.Min(), h.rtt.Smoothed())
	if ackedBytes > 0 {
		h.cc.OnAck(h.abs(now), cc.AckEvent{
			AckedBytes:    ackedBytes,
			PriorInFlight: priorInFlight,
			LargestSentAt: h.abs(largestNewlyAt),
			RTTUpdated:    sample > 0,
			RTT:           sample,
			AckDelay:      peerDelay,
		})
	}
	if newly {
		h.ptoCount = 0
	}
	h.detectLoss(now)
	return newly
}

// detectLoss declares outstanding packets below the largest acknowledged
// lost by packet or time threshold, arms the loss timer for the others,
// and reports the losses to congestion control.
func (h *sentPacketHandler) detectLoss(now time.Duration) {
	h.lossTime = 0
	if !h.anyAcked {
		return
	}
	lossDelay := h.rtt.LossDelay()
	lostBefore := now - lossDelay
	var (
		lostBytes     int
		largestLostAt time.Duration
		runStart      time.Duration = -1 // first lost ack-eliciting packet of the current run
		runEnd        time.Duration
		persistent    bool
	)
	persistentSpan := h.rtt.PTO(MaxAckDelay, h.minRTO) * persistentFactor
	end := min(h.largestAcked, h.hist.nextPN())
	for pn := h.hist.basePN; pn < end; pn++ {
		p := h.hist.get(pn)
		switch p.state {
		case pktAcked:
			runStart = -1
			continue
		case pktLost:
			continue
		}
		if h.largestAcked-pn >= packetThreshold || p.sentAt <= lostBefore {
			h.markLost(p)
			if p.inFlight {
				lostBytes += int(p.size)
				largestLostAt = p.sentAt
			}
			if p.ackEliciting {
				if runStart < 0 {
					runStart = p.sentAt
				}
				runEnd = p.sentAt
				if h.rtt.Samples() > 0 && runEnd-runStart > persistentSpan {
					persistent = true
				}
			}
			continue
		}
		if t := p.sentAt + lossDelay; h.lossTime == 0 || t < h.lossTime {
			h.lossTime = t
		}
	}
	h.hist.popResolved()
	if lostBytes > 0 {
		fallback := h.pacer.rate
		if fallback == 0 && h.rtt.Smoothed() > 0 {
			fallback = float64(h.cc.Window()) / h.rtt.Smoothed().Seconds()
		}
		cause := h.loss.cause(now, h.rtt.Smoothed(), h.rtt.Min(), h.fullPacket, fallback)
		h.reportLoss(now, lostBytes, largestLostAt, persistent, cause)
	}
}

// loseAll declares everything outstanding lost to an outage (no window
// change: cause outage) and stops the loss and probe timers.
func (h *sentPacketHandler) loseAll(now time.Duration) {
	var lostBytes int
	for pn := h.hist.basePN; pn < h.hist.nextPN(); pn++ {
		p := h.hist.get(pn)
		if p.state != pktOutstanding {
			continue
		}
		if p.inFlight {
			lostBytes += int(p.size)
		}
		h.markLost(p)
	}
	h.hist.popResolved()
	if lostBytes > 0 {
		h.reportLoss(now, lostBytes, now, false, cc.CauseOutage)
	}
	h.lossTime, h.probes, h.ptoCount = 0, 0, 0
}

// reportLoss tells congestion control about lostBytes lost together and
// counts the event by cause.
func (h *sentPacketHandler) reportLoss(now time.Duration, lostBytes int, largestLostAt time.Duration, persistent bool, cause cc.Cause) {
	h.stats.CongestionEvents++
	switch cause {
	case cc.CauseCongestion:
		h.stats.LossEventsCongestion++
	case cc.CauseCorruption:
		h.stats.LossEventsCorruption++
	case cc.CauseOutage:
		h.stats.LossEventsOutage++
	}
	h.cc.OnCongestionEvent(h.abs(now), cc.LossEvent{
		LostBytes:     lostBytes,
		PriorInFlight: h.bytesInFlight + lostBytes,
		LargestSentAt: h.abs(largestLostAt),
		Cause:         cause,
		Persistent:    persistent,
	})
}

func (h *sentPacketHandler) markLost(p *sentPacket) {
	p.state = pktLost
	if p.inFlight {
		h.bytesInFlight -= int(p.size)
		h.stats.PacketsLost++
		h.stats.BytesLost += uint64(p.size)
	}
	if p.ackEliciting {
		h.elicitingInFlight--
	}
	h.framesLost(p)
}

func (h *sentPacketHandler) framesAcked(p *sentPacket) {
	for i := uint64(0); i < uint64(p.nFrames); i++ {
		h.frames.frameAcked(h.hist.frame(p.firstFrame + i))
	}
}

func (h *sentPacketHandler) framesLost(p *sentPacket) {
	for i := uint64(0); i < uint64(p.nFrames); i++ {
		h.frames.frameLost(h.hist.frame(p.firstFrame + i))
	}
}

// timerDeadline is when onTimer has something to do: the loss timer if
// armed, else the probe timeout; 0 when neither is.
func (h *sentPacketHandler) timerDeadline() time.Duration {
	if h.lossTime != 0 {
		return h.lossTime
	}
	return h.ptoDeadline()
}

// onTimer runs the loss timer or the probe timeout if due at now.
// dataQueued says whether stream data waits to be sent (a probe then
// carries it).
func (h *sentPacketHandler) onTimer(now time.Duration, dataQueued bool) {
	if h.lossTime != 0 && now >= h.lossTime {
		h.detectLoss(now)
	} else if pto := h.ptoDeadline(); pto != 0 && now >= pto {
		h.onPTO(dataQueued)
	}
}

// ptoDeadline is when the probe timeout fires; 0 when nothing
// ack-eliciting is in flight. The backoff doubles the timeout but stops at
// the probe interval: a link that went quiet for a moment is probed at a
// fixed pace, so its return is noticed within the interval, not after a
// backed-off timeout (an outage proper then takes over).
func (h *sentPacketHandler) ptoDeadline() time.Duration {
	if h.elicitingInFlight == 0 {
		return 0
	}
	base := h.rtt.PTO(MaxAckDelay, h.minRTO)
	pto := min(base<<min(h.ptoCount, maxPTOBackoff), max(base, h.probeInterval))
	return h.lastElicitingSent + pto
}

// onPTO asks for two probes. They carry data waiting for repair or new
// data; failing that, the oldest outstanding packet's data is queued again
// (not declared lost), and failing that a PING.
func (h *sentPacketHandler) onPTO(dataQueued bool) {
	h.ptoCount++
	h.stats.PTOs++
	h.probes = 2
	if dataQueued {
		return
	}
	for pn := h.hist.basePN; pn < h.hist.nextPN(); pn++ {
		p := h.hist.get(pn)
		if p.state == pktOutstanding && p.ackEliciting {
			h.framesLost(p)
			return
		}
	}
}

// fillStats copies the congestion and RTT state into s.
func (h *sentPacketHandler) fillStats(s *Stats) {
	s.InSlowStart = h.cc.InSlowStart()
	s.Cwnd = h.cc.Window()
	s.BytesInFlight = h.bytesInFlight
	s.PacingRate = h.pacer.rate
	s.SRTT = h.rtt.Smoothed()
	s.RTTVar = h.rtt.Var()
	s.MinRTT = h.rtt.Min()
	s.LatestRTT = h.rtt.Latest()
	s.QueueDelay = h.loss.lastQueue
	s.DeliveryRate = h.loss.rate
}
