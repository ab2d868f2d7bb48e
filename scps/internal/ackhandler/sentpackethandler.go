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
	cfg           Config
	minRTO        time.Duration
	maxAckDelay   time.Duration
	probeInterval time.Duration
	wireOverhead  int
	fullPacket    int // MaxPacketSize + WireOverhead: what the pacer waits for

	hist  history
	paths [MaxPaths]pathState // per-path state (pathstate.go); path 0 always
	cur   uint8               // the path the next packet goes on (Use)

	bytesInFlight     int // all paths'
	elicitingInFlight int
	lastElicitingSent time.Duration
	ptoCount          int
	probes            int    // ack-eliciting probes the probe timeout asked for
	ackFloor          uint64 // the smallest packet the latest ACK's ranges reach
	// rxPacket counts the packets received (OnPacketReceived): the ACK
	// frames of one carry its count to congestion control
	// (cc.AckEvent.Packet).
	rxPacket uint64

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
	h.epoch, h.cfg = epoch, cfg
	h.minRTO, h.probeInterval, h.maxAckDelay = cfg.MinRTO, cfg.ProbeInterval, cfg.MaxAckDelay
	h.wireOverhead = cfg.WireOverhead
	h.fullPacket = cfg.MaxPacketSize + cfg.WireOverhead
	h.frames = frames
	h.lastElicitingSent = now
	return h.initPath(0, PathConfig{SendRate: cfg.SendRate, InitialRTT: cfg.InitialRTT}, cfg.Resume, now)
}

func (h *SentPacketHandler) abs(d time.Duration) time.Time { return h.epoch.Add(d) }

// Controller is path 0's congestion controller (the only one of a
// single-path association).
func (h *SentPacketHandler) Controller() cc.Controller { return h.paths[0].cc }

// TimingMark reports whether the next full-size packet on the current
// path opens its controller's timed first flight (cc.FlightTimer).
func (h *SentPacketHandler) TimingMark(now time.Duration) bool {
	t, ok := h.cp().cc.(cc.FlightTimer)
	return ok && t.TimingMark(h.abs(now))
}

// FirstFlight is how many bytes the timed first flight carries when the
// next full-size packet on the current path opens it (TimingMark); ok is
// false otherwise.
func (h *SentPacketHandler) FirstFlight(now time.Duration) (bytes int, ok bool) {
	t, ok := h.cp().cc.(cc.FlightTimer)
	if !ok || !t.TimingMark(h.abs(now)) {
		return 0, false
	}
	return t.FirstFlight(), true
}

// TrainSent tells the current path's controller that its timed first
// flight went as a path train of bytes without data (cc.PathTrainer).
func (h *SentPacketHandler) TrainSent(now time.Duration, bytes int) {
	if t, ok := h.cp().cc.(cc.PathTrainer); ok {
		t.OnTrainSent(h.abs(now), bytes)
	}
}

// RTT is path 0's RTT statistics.
func (h *SentPacketHandler) RTT() *cc.RTTStats { return h.paths[0].rtt }

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
	ps := h.cp()
	rate := ps.cc.PacingRate()
	if ps.sendRate > 0 {
		link := float64(ps.sendRate) / 8
		if rate <= 0 || link < rate {
			rate = link
		}
	}
	burst := max(pacerMinBurst*float64(h.fullPacket), rate*PacerBurstTime.Seconds())
	ps.pacer.catchUp = min(pacerCatchUpMax, ps.rtt.Smoothed()/16)
	if rate == ps.pacer.rate && burst == ps.pacer.maxBurst {
		ps.pacer.refill(now)
		return
	}
	ps.pacer.setRate(now, rate, burst)
}

// WindowOpen reports whether the congestion window of the path in use has
// room.
func (h *SentPacketHandler) WindowOpen() bool { ps := h.cp(); return ps.bytesInFlight < ps.cc.Window() }

// Paced reports whether the pacer lets a full packet go now (call
// UpdatePacer first).
func (h *SentPacketHandler) Paced() bool { return h.cp().pacer.ready(h.fullPacket) }

// PacedAt is when the pacer lets a full packet go: 0 if now.
func (h *SentPacketHandler) PacedAt(now time.Duration) time.Duration {
	h.UpdatePacer(now)
	if h.Paced() {
		return 0
	}
	return h.cp().pacer.readyAt(now, h.fullPacket)
}

// PacedWake is PacedAt for a sender with data waiting that will sleep
// until then: a later wake-up is then made up (bucket.due).
func (h *SentPacketHandler) PacedWake(now time.Duration) time.Duration {
	at := h.PacedAt(now)
	h.cp().pacer.due = at
	return at
}

// OnPacketSent records p, the packet just built with the next packet number
// and the frames added since p.FirstFrame, and charges the pacer with it.
// flightStart reports that p is the first ack-eliciting packet outstanding.
func (h *SentPacketHandler) OnPacketSent(now time.Duration, p SentPacket) (flightStart bool) {
	ps := h.cp()
	p.Path = h.cur
	h.hist.add(p)
	if p.AckEliciting && !p.Copy {
		h.copies.lastOriginal = h.hist.nextPN()
	}
	size := int(p.Size)
	ps.pacer.take(size + h.wireOverhead)
	if !p.AckEliciting {
		return false
	}
	flightStart = h.elicitingInFlight == 0
	h.copyCredit(size, p.Copy)
	h.elicitingInFlight++
	ps.elicitingInFlight++
	h.lastElicitingSent, ps.lastElicitingSent = now, now
	if p.InFlight {
		h.bytesInFlight += size
		ps.bytesInFlight += size
		ps.cc.OnPacketSent(h.abs(now), size, ps.bytesInFlight)
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

// pathAck is what one ACK frame did to one path.
type pathAck struct {
	priorInFlight  int
	ackedBytes     int
	newlyEliciting bool
	newly          bool
	largestNewly   uint64
	largestNewlyAt time.Duration
	largestAcked   uint64 // the path's largest acknowledged before the ACK
	anyAcked       bool
}

// OnPacketReceived notes that the ACK frames that follow, up to the next
// call, came in one packet (cc.AckEvent.Packet).
func (h *SentPacketHandler) OnPacketReceived() { h.rxPacket++ }

// OnAck processes an ACK frame received at now on path 0 (OnAckOn).
func (h *SentPacketHandler) OnAck(now time.Duration, f *wire.Ack) (newly bool) {
	return h.OnAckOn(now, f, 0)
}

// OnAckOn processes an ACK frame received at now on path on. newly reports
// whether it acknowledged any packet for the first time.
//
// A path's RTT is the loop out over it and back over the path the ACK
// took. An ACK that came back over another path times another loop: a
// packet out over a 600 ms GEO path and acknowledged over a 40 ms LEO one
// took 320 ms. Such samples count only until an ACK back over the path
// itself times it, which then starts the path's RTT afresh: once the LEO
// was cut and the GEO's ACKs came back over the GEO, its minimum of
// 320 ms read every round trip as half a window of queue, and the window
// shrank to the delivery rate times 320 ms each round, down to
// 0.3 Mbit/s of a 10 Mbit/s link.
func (h *SentPacketHandler) OnAckOn(now time.Duration, f *wire.Ack, on int) (newly bool) {
	var pa [MaxPaths]pathAck
	for i := range h.paths {
		ps := &h.paths[i]
		pa[i] = pathAck{priorInFlight: ps.bytesInFlight, largestAcked: ps.largestAcked, anyAcked: ps.anyAcked}
	}
	largestPath, largestWasNewly := -1, false
	base := h.hist.basePN
	h.ackFloor = f.Largest
	it := f.Iter()
	for {
		r, ok := it.Next()
		if ok {
			h.ackFloor = min(h.ackFloor, r.Smallest)
		}
		if !ok || r.Largest < base {
			break
		}
		lo := max(r.Smallest, base)
		for pn := r.Largest; ; pn-- {
			p := h.hist.get(pn)
			if p.state != pktAcked {
				wasOutstanding := p.state == pktOutstanding
				p.state = pktAcked
				ps, a := &h.paths[p.Path], &pa[p.Path]
				ps.ackedAt = now
				if !ps.anyAcked || pn > ps.largestAcked {
					ps.largestAcked, ps.anyAcked = pn, true
				}
				if pn == f.Largest {
					largestPath = int(p.Path)
				}
				if wasOutstanding {
					if p.InFlight {
						h.bytesInFlight -= int(p.Size)
						ps.bytesInFlight -= int(p.Size)
						a.ackedBytes += int(p.Size)
					}
					if p.AckEliciting {
						h.elicitingInFlight--
						ps.elicitingInFlight--
						a.newlyEliciting = true
					}
					if !a.newly || pn > a.largestNewly {
						a.largestNewly, a.largestNewlyAt = pn, p.SentAt
					}
					a.newly, newly = true, true
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
	peerDelay := time.Duration(f.Delay) * time.Microsecond
	for i := range h.paths {
		ps, a := &h.paths[i], &pa[i]
		if !ps.inUse {
			continue
		}
		// An RTT sample: the path's newest packet acknowledged, newly.
		// The peer's delay is that of the ACK's largest; an earlier
		// packet of another path waited at least as long.
		var sample time.Duration
		fresh := a.newlyEliciting && (i == largestPath && largestWasNewly ||
			i != largestPath && a.newly && (!a.anyAcked || a.largestNewly > a.largestAcked))
		switch {
		case !fresh:
		case i != on:
			fresh = !ps.loopTimed
			ps.crossTimed = ps.crossTimed || fresh
		case !ps.loopTimed:
			if ps.crossTimed {
				ps.rtt.Reset()
			}
			ps.loopTimed = true
		}
		if fresh {
			// The peer's reported delay is trusted up to a quarter RTT
			// beyond MaxAckDelay: the ACK budget of a narrow return link
			// can hold an ACK back that long, and counting it as path
			// delay would look like a queue.
			delay := min(peerDelay, max(h.maxAckDelay, ps.rtt.Smoothed()/4))
			ps.rtt.Update(now-a.largestNewlyAt, delay)
			sample = ps.rtt.Adjusted()
		}
		ps.loss.onAck(now, a.ackedBytes, sample, ps.rtt.Min(), ps.rtt.Smoothed())
		if a.ackedBytes > 0 {
			pd := time.Duration(0)
			if fresh {
				pd = peerDelay
			}
			ps.cc.OnAck(h.abs(now), cc.AckEvent{
				AckedBytes:    a.ackedBytes,
				PriorInFlight: a.priorInFlight,
				LargestSentAt: h.abs(a.largestNewlyAt),
				RTTUpdated:    sample > 0,
				RTT:           sample,
				AckDelay:      pd,
				Packet:        h.rxPacket,
			})
		}
	}
	if newly {
		h.ptoCount = 0
	}
	h.detectLoss(now)
	return newly
}

// lossRun is what detectLoss gathers of one path's losses.
type lossRun struct {
	lostBytes     int
	largestLostAt time.Duration
	runStart      time.Duration // first lost ack-eliciting packet of the current run; -1: none
	runEnd        time.Duration
	persistent    bool
}

// detectLoss declares outstanding packets below their path's largest
// acknowledged lost by packet or time threshold, arms the loss timers for
// the others, and reports the losses to each path's congestion control.
func (h *SentPacketHandler) detectLoss(now time.Duration) {
	var (
		runs           [MaxPaths]lossRun
		lossDelay      [MaxPaths]time.Duration
		persistentSpan [MaxPaths]time.Duration
		end            uint64
		any            bool
	)
	for i := range h.paths {
		ps := &h.paths[i]
		ps.lossTime = 0
		runs[i].runStart = -1
		if !ps.inUse || !ps.anyAcked {
			continue
		}
		any = true
		lossDelay[i] = ps.rtt.LossDelay()
		persistentSpan[i] = ps.rtt.PTO(h.maxAckDelay, h.minRTO) * persistentFactor
		end = max(end, min(ps.largestAcked, h.hist.nextPN()))
	}
	if !any {
		return
	}
	for pn := h.hist.basePN; pn < end; pn++ {
		p := h.hist.get(pn)
		ps, run := &h.paths[p.Path], &runs[p.Path]
		switch p.state {
		case pktAcked:
			run.runStart = -1
			continue
		case pktLost:
			continue
		}
		if !ps.anyAcked || pn >= ps.largestAcked {
			continue
		}
		// With several paths the ACK's ranges may not reach down to an
		// old packet of a slow path (the holes of the packets in flight
		// on it use them up): it says nothing of the packets below them.
		byCount := ps.largestAcked-pn >= packetThreshold && (!h.multi() || pn >= h.ackFloor)
		if byCount || p.SentAt <= now-lossDelay[p.Path] {
			h.markLost(p)
			if p.InFlight {
				run.lostBytes += int(p.Size)
				run.largestLostAt = p.SentAt
			}
			if p.AckEliciting {
				if run.runStart < 0 {
					run.runStart = p.SentAt
				}
				run.runEnd = p.SentAt
				if ps.rtt.Samples() > 0 && run.runEnd-run.runStart > persistentSpan[p.Path] {
					run.persistent = true
				}
			}
			continue
		}
		if t := p.SentAt + lossDelay[p.Path]; ps.lossTime == 0 || t < ps.lossTime {
			ps.lossTime = t
		}
	}
	h.hist.popResolved()
	for i := range h.paths {
		run := &runs[i]
		if run.lostBytes == 0 {
			continue
		}
		ps := &h.paths[i]
		fallback := ps.pacer.rate
		if fallback == 0 && ps.rtt.Smoothed() > 0 {
			fallback = float64(ps.cc.Window()) / ps.rtt.Smoothed().Seconds()
		}
		cause := ps.loss.cause(now, ps.rtt.Smoothed(), ps.rtt.Min(), h.fullPacket, fallback)
		h.reportLoss(now, i, run.lostBytes, run.largestLostAt, run.persistent, cause)
	}
}

// LoseAll declares everything outstanding lost to an outage (no window
// change: cause outage) and stops the loss and probe timers.
func (h *SentPacketHandler) LoseAll(now time.Duration) {
	h.lose(now, func(*SentPacket) bool { return true })
	h.probes, h.ptoCount = 0, 0
}

// lose declares the outstanding packets that match lost to an outage.
func (h *SentPacketHandler) lose(now time.Duration, match func(*SentPacket) bool) {
	var lostBytes [MaxPaths]int
	for pn := h.hist.basePN; pn < h.hist.nextPN(); pn++ {
		p := h.hist.get(pn)
		if p.state != pktOutstanding || !match(p) {
			continue
		}
		if p.InFlight {
			lostBytes[p.Path] += int(p.Size)
		}
		h.markLost(p)
	}
	h.hist.popResolved()
	for i, n := range lostBytes {
		if n > 0 {
			h.reportLoss(now, i, n, now, false, cc.CauseOutage)
		}
		if match(&SentPacket{Path: uint8(i)}) {
			h.paths[i].lossTime = 0
		}
	}
}

// reportLoss tells path i's congestion control about lostBytes lost
// together and counts the event by cause.
func (h *SentPacketHandler) reportLoss(now time.Duration, i, lostBytes int, largestLostAt time.Duration, persistent bool, cause cc.Cause) {
	h.stats.CongestionEvents++
	switch cause {
	case cc.CauseCongestion:
		h.stats.LossEventsCongestion++
	case cc.CauseCorruption:
		h.stats.LossEventsCorruption++
	case cc.CauseOutage:
		h.stats.LossEventsOutage++
	}
	ps := &h.paths[i]
	ps.cc.OnCongestionEvent(h.abs(now), cc.LossEvent{
		LostBytes:     lostBytes,
		PriorInFlight: ps.bytesInFlight + lostBytes,
		LargestSentAt: h.abs(largestLostAt),
		Cause:         cause,
		Persistent:    persistent,
	})
}

func (h *SentPacketHandler) markLost(p *SentPacket) {
	p.state = pktLost
	ps := &h.paths[p.Path]
	if p.AckEliciting {
		ps.elicitingInFlight--
	}
	if p.InFlight {
		ps.bytesInFlight -= int(p.Size)
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

// lossTime is the earliest armed loss timer of the paths; 0 = none.
func (h *SentPacketHandler) lossTime() time.Duration {
	var t time.Duration
	for i := range h.paths {
		if lt := h.paths[i].lossTime; lt != 0 && (t == 0 || lt < t) {
			t = lt
		}
	}
	return t
}

// TimerDeadline is when OnTimer has something to do: a loss timer if
// armed, else the probe timeout; 0 when neither is.
func (h *SentPacketHandler) TimerDeadline() time.Duration {
	if t := h.lossTime(); t != 0 {
		return t
	}
	return h.ptoDeadline()
}

// OnTimer runs the loss timers or the probe timeout if due at now.
// dataQueued says whether stream data waits to be sent (a probe then
// carries it).
func (h *SentPacketHandler) OnTimer(now time.Duration, dataQueued bool) {
	if lt := h.lossTime(); lt != 0 && now >= lt {
		h.detectLoss(now)
	} else if pto := h.ptoDeadline(); pto != 0 && now >= pto {
		h.onPTO(dataQueued)
	}
}

// ptoDeadline is when the probe timeout fires: the earliest of the paths
// with ack-eliciting packets in flight, each by its own RTT; 0 when
// nothing ack-eliciting is in flight. The backoff doubles the timeout but
// stops at the probe interval: a link that went quiet for a moment is
// probed at a fixed pace, so its return is noticed within the interval,
// not after a backed-off timeout (an outage proper then takes over).
func (h *SentPacketHandler) ptoDeadline() time.Duration {
	if h.elicitingInFlight == 0 {
		return 0
	}
	var d time.Duration
	for i := range h.paths {
		ps := &h.paths[i]
		if !ps.inUse || ps.elicitingInFlight == 0 {
			continue
		}
		base := ps.rtt.PTO(h.maxAckDelay, h.minRTO)
		pto := min(base<<min(h.ptoCount, maxPTOBackoff), max(base, h.probeInterval))
		if t := ps.lastElicitingSent + pto; d == 0 || t < d {
			d = t
		}
	}
	if d == 0 {
		// In flight on a path since removed: path 0's clock.
		base := h.paths[0].rtt.PTO(h.maxAckDelay, h.minRTO)
		d = h.lastElicitingSent + min(base<<min(h.ptoCount, maxPTOBackoff), max(base, h.probeInterval))
	}
	return d
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

// Resend queues the frames of packet pn again if it still awaits its
// acknowledgement, and lets the next packet go past the window and the
// pacer as a probe's would, so the repair does not wait behind the packets
// in flight with it (a path that went silent holds its window full until
// the probe timeout). The packet stays in flight: its own ACK, if it
// comes, counts as ever. It reports whether it queued anything.
func (h *SentPacketHandler) Resend(pn uint64) bool {
	p := h.hist.get(pn)
	if p == nil || p.state != pktOutstanding || !p.AckEliciting {
		return false
	}
	h.framesLost(p)
	h.probes = max(h.probes, 1)
	return true
}

// Outstanding reports whether packet pn still awaits its acknowledgement
// (neither acknowledged nor declared lost).
func (h *SentPacketHandler) Outstanding(pn uint64) bool {
	p := h.hist.get(pn)
	return p != nil && p.state == pktOutstanding
}

// Stats returns the counters.
func (h *SentPacketHandler) Stats() Stats { return h.stats }

// BytesInFlight is the bytes of packets counted in flight.
func (h *SentPacketHandler) BytesInFlight() int { return h.bytesInFlight }

// PacingRate is the bytes/s path 0's pacer releases at (0 = unlimited).
func (h *SentPacketHandler) PacingRate() float64 { return h.paths[0].pacer.rate }

// QueueDelay is path 0's latest RTT sample (less ACK delay) above its
// minimum.
func (h *SentPacketHandler) QueueDelay() time.Duration { return h.paths[0].loss.lastQueue }

// DeliveryRate is the bytes/s acknowledged on path 0 over the last round
// trip.
func (h *SentPacketHandler) DeliveryRate() float64 { return h.paths[0].loss.rate }
