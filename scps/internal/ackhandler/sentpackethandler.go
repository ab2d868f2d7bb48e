package ackhandler

// This file owns SentPacketHandler, the sending side of reliability (RFC
// 9002 in spirit, shaped like quic-go's ackhandler): the sent-packet
// history, the bytes in flight, the RTT statistics, processing ACK frames,
// loss detection by packet threshold (3) and time threshold (9/8 RTT), the
// probe timeout with a MinRTO floor and its backoff capped at the probe
// interval, persistent congestion, the loss-cause classifier, and the
// congestion controller and pacer those feed. What the frames of an
// acknowledged or lost packet carried is the caller's business: the
// handler hands each frame to its FrameHandler. Retransmissions always go
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

// FrameHandler acts on the frames of packets the SentPacketHandler
// resolved: an acknowledged frame is done with, a lost one may have to be
// sent again.
type FrameHandler interface {
	FrameAcked(f *SentFrame)
	FrameLost(f *SentFrame)
}

// Config is what the handlers take from the association's configuration
// (defaults filled in).
type Config struct {
	MaxPacketSize int
	WireOverhead  int           // bytes each packet costs on the wire beyond its payload
	SendRate      int64         // bit/s of the forward link; 0 = unknown
	RecvRate      int64         // bit/s of the return link; 0 = unknown
	InitialRTT    time.Duration // the RTT assumed before the first sample
	MinRTO        time.Duration // the floor of the probe timeout
	ProbeInterval time.Duration // the cap of the probe timeout's backoff
	MaxAckDelay   time.Duration // the longest the peer holds back an ACK
	Congestion    string        // the congestion controller's name (cc.New)
	Loss          LossMode
	RTTNoise      time.Duration // the RTT variation the path shows without a queue
	Resume        *cc.Resume    // a path saved by an earlier association (careful resume); nil = none
}

// SentPacketHandler is the sending side of reliability of one
// association. It is not safe for concurrent use.
type SentPacketHandler struct {
	epoch         time.Time // the association's: cc gets absolute times
	minRTO        time.Duration
	maxAckDelay   time.Duration
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

	copies tailCopies // redundant copies of a burst's last packets (tailcopy.go)

	frames FrameHandler
	stats  Stats
}

// Stats are the counters the SentPacketHandler keeps.
type Stats struct {
	PacketsLost          uint64 // in-flight packets declared lost
	BytesLost            uint64
	PTOs                 uint64 // probe timeouts fired
	CongestionEvents     uint64 // loss batches reported to congestion control
	LossEventsCongestion uint64 // loss batches by the cause they were attributed to
	LossEventsCorruption uint64
	LossEventsOutage     uint64
}

// Init sets h up for cfg at internal time now (a duration since epoch).
func (h *SentPacketHandler) Init(cfg Config, epoch time.Time, now time.Duration, frames FrameHandler) error {
	h.epoch = epoch
	h.minRTO, h.probeInterval, h.maxAckDelay = cfg.MinRTO, cfg.ProbeInterval, cfg.MaxAckDelay
	h.sendRate, h.wireOverhead = cfg.SendRate, cfg.WireOverhead
	h.fullPacket = cfg.MaxPacketSize + cfg.WireOverhead
	h.frames = frames
	h.rtt = cc.NewRTTStats(cfg.InitialRTT)
	h.lastElicitingSent = now
	h.loss.mode = cfg.Loss
	h.loss.noise = cfg.RTTNoise
	ctl, err := cc.New(cfg.Congestion, cc.Params{
		MaxDatagramSize: cfg.MaxPacketSize,
		WireOverhead:    cfg.WireOverhead,
		RTT:             h.rtt,
		SendRate:        cfg.SendRate,
		RTTNoise:        cfg.RTTNoise,
		Resume:          cfg.Resume,
	})
	if err != nil {
		return err
	}
	h.cc = ctl
	h.UpdatePacer(now)
	h.pacer.tokens = h.pacer.maxBurst
	return nil
}

func (h *SentPacketHandler) abs(d time.Duration) time.Time { return h.epoch.Add(d) }

// Controller is the congestion controller.
func (h *SentPacketHandler) Controller() cc.Controller { return h.cc }

// RTT is the RTT statistics.
func (h *SentPacketHandler) RTT() *cc.RTTStats { return h.rtt }

// ElicitingInFlight is the number of ack-eliciting packets outstanding.
func (h *SentPacketHandler) ElicitingInFlight() int { return h.elicitingInFlight }

// Probes is how many ack-eliciting probes the probe timeout still asks
// for: they go out whatever the window and pacer say.
func (h *SentPacketHandler) Probes() int { return h.probes }

// OnResume resets the probe timeout's backoff (the link is back from an
// outage).
func (h *SentPacketHandler) OnResume() { h.ptoCount = 0 }

// NextPN is the packet number the next packet gets.
func (h *SentPacketHandler) NextPN() uint64 { return h.hist.nextPN() }

// FrameEnd is the index the next frame record gets: a packet's FirstFrame.
func (h *SentPacketHandler) FrameEnd() uint64 { return h.hist.frameEnd() }

// AddFrame appends a frame record for the packet being built and returns
// it, zeroed, to be filled in.
func (h *SentPacketHandler) AddFrame() *SentFrame { return h.hist.addFrame() }

// DropFramesFrom forgets the frame records from abs on (a packet that was
// built and then abandoned).
func (h *SentPacketHandler) DropFramesFrom(abs uint64) { h.hist.dropFramesFrom(abs) }

// UpdatePacer sets the pacer to min(SendRate, controller rate).
func (h *SentPacketHandler) UpdatePacer(now time.Duration) {
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

// WindowOpen reports whether the congestion window has room.
func (h *SentPacketHandler) WindowOpen() bool { return h.bytesInFlight < h.cc.Window() }

// Paced reports whether the pacer lets a full packet go now (call
// UpdatePacer first).
func (h *SentPacketHandler) Paced() bool { return h.pacer.ready(h.fullPacket) }

// PacedAt is when the pacer lets a full packet go: 0 if now.
func (h *SentPacketHandler) PacedAt(now time.Duration) time.Duration {
	h.UpdatePacer(now)
	if h.Paced() {
		return 0
	}
	return h.pacer.readyAt(now, h.fullPacket)
}

// OnPacketSent records p, the packet just built with the next packet number
// and the frames added since p.FirstFrame, and charges the pacer with it.
// flightStart reports that p is the first ack-eliciting packet outstanding.
func (h *SentPacketHandler) OnPacketSent(now time.Duration, p SentPacket) (flightStart bool) {
	h.hist.add(p)
	if p.AckEliciting && !p.Copy {
		h.copies.lastOriginal = h.hist.nextPN()
	}
	size := int(p.Size)
	h.pacer.take(size + h.wireOverhead)
	if !p.AckEliciting {
		return false
	}
	flightStart = h.elicitingInFlight == 0
	h.copyCredit(size, p.Copy)
	h.elicitingInFlight++
	h.lastElicitingSent = now
	if p.InFlight {
		h.bytesInFlight += size
		h.cc.OnPacketSent(h.abs(now), size, h.bytesInFlight)
	}
	if h.probes > 0 {
		h.probes--
	}
	return flightStart
}

// SkipPacket uses up the next packet number for a packet nothing in which
// is tracked (a CLOSE: it is never retransmitted).
func (h *SentPacketHandler) SkipPacket(now time.Duration) {
	h.hist.add(SentPacket{SentAt: now, FirstFrame: h.hist.frameEnd(), state: pktAcked})
	h.hist.popResolved()
}

// OldestSentAt is when the oldest packet in the history was sent; ok is
// false when the history is empty.
func (h *SentPacketHandler) OldestSentAt() (at time.Duration, ok bool) {
	if h.hist.pcount == 0 {
		return 0, false
	}
	return h.hist.get(h.hist.basePN).SentAt, true
}

// OnAck processes an ACK frame received at now. newly reports whether it
// acknowledged any packet for the first time.
func (h *SentPacketHandler) OnAck(now time.Duration, f *wire.Ack) (newly bool) {
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
					if p.InFlight {
						h.bytesInFlight -= int(p.Size)
						ackedBytes += int(p.Size)
					}
					if p.AckEliciting {
						h.elicitingInFlight--
						newlyEliciting = true
					}
					if !newly || pn > largestNewly {
						largestNewly, largestNewlyAt = pn, p.SentAt
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
		delay := min(peerDelay, max(h.maxAckDelay, h.rtt.Smoothed()/4))
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
func (h *SentPacketHandler) detectLoss(now time.Duration) {
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
	persistentSpan := h.rtt.PTO(h.maxAckDelay, h.minRTO) * persistentFactor
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
		if h.largestAcked-pn >= packetThreshold || p.SentAt <= lostBefore {
			h.markLost(p)
			if p.InFlight {
				lostBytes += int(p.Size)
				largestLostAt = p.SentAt
			}
			if p.AckEliciting {
				if runStart < 0 {
					runStart = p.SentAt
				}
				runEnd = p.SentAt
				if h.rtt.Samples() > 0 && runEnd-runStart > persistentSpan {
					persistent = true
				}
			}
			continue
		}
		if t := p.SentAt + lossDelay; h.lossTime == 0 || t < h.lossTime {
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

// LoseAll declares everything outstanding lost to an outage (no window
// change: cause outage) and stops the loss and probe timers.
func (h *SentPacketHandler) LoseAll(now time.Duration) {
	var lostBytes int
	for pn := h.hist.basePN; pn < h.hist.nextPN(); pn++ {
		p := h.hist.get(pn)
		if p.state != pktOutstanding {
			continue
		}
		if p.InFlight {
			lostBytes += int(p.Size)
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
func (h *SentPacketHandler) reportLoss(now time.Duration, lostBytes int, largestLostAt time.Duration, persistent bool, cause cc.Cause) {
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

func (h *SentPacketHandler) markLost(p *SentPacket) {
	p.state = pktLost
	if p.InFlight {
		h.bytesInFlight -= int(p.Size)
		h.stats.PacketsLost++
		h.stats.BytesLost += uint64(p.Size)
	}
	if p.AckEliciting {
		h.elicitingInFlight--
	}
	if !p.Copy {
		h.framesLost(p)
	}
}

func (h *SentPacketHandler) framesAcked(p *SentPacket) {
	for i := uint64(0); i < uint64(p.NFrames); i++ {
		h.frames.FrameAcked(h.hist.frame(p.FirstFrame + i))
	}
}

func (h *SentPacketHandler) framesLost(p *SentPacket) {
	for i := uint64(0); i < uint64(p.NFrames); i++ {
		h.frames.FrameLost(h.hist.frame(p.FirstFrame + i))
	}
}

// TimerDeadline is when OnTimer has something to do: the loss timer if
// armed, else the probe timeout; 0 when neither is.
func (h *SentPacketHandler) TimerDeadline() time.Duration {
	if h.lossTime != 0 {
		return h.lossTime
	}
	return h.ptoDeadline()
}

// OnTimer runs the loss timer or the probe timeout if due at now.
// dataQueued says whether stream data waits to be sent (a probe then
// carries it).
func (h *SentPacketHandler) OnTimer(now time.Duration, dataQueued bool) {
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
func (h *SentPacketHandler) ptoDeadline() time.Duration {
	if h.elicitingInFlight == 0 {
		return 0
	}
	base := h.rtt.PTO(h.maxAckDelay, h.minRTO)
	pto := min(base<<min(h.ptoCount, maxPTOBackoff), max(base, h.probeInterval))
	return h.lastElicitingSent + pto
}

// onPTO asks for two probes. They carry data waiting for repair or new
// data; failing that, the oldest outstanding packet's data is queued again
// (not declared lost), and failing that a PING.
func (h *SentPacketHandler) onPTO(dataQueued bool) {
	h.ptoCount++
	h.stats.PTOs++
	h.probes = 2
	if dataQueued {
		return
	}
	for pn := h.hist.basePN; pn < h.hist.nextPN(); pn++ {
		p := h.hist.get(pn)
		if p.state == pktOutstanding && p.AckEliciting {
			h.framesLost(p)
			return
		}
	}
}

// Stats returns the counters.
func (h *SentPacketHandler) Stats() Stats { return h.stats }

// BytesInFlight is the bytes of packets counted in flight.
func (h *SentPacketHandler) BytesInFlight() int { return h.bytesInFlight }

// PacingRate is the bytes/s the pacer releases at (0 = unlimited).
func (h *SentPacketHandler) PacingRate() float64 { return h.pacer.rate }

// QueueDelay is the latest RTT sample (less ACK delay) above the minimum.
func (h *SentPacketHandler) QueueDelay() time.Duration { return h.loss.lastQueue }

// DeliveryRate is the bytes/s acknowledged over the last round trip.
func (h *SentPacketHandler) DeliveryRate() float64 { return h.loss.rate }
