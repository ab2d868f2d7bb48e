package ackhandler

// This file owns the per-path transport state of a multipath association:
// each path to the peer has its own RTT, congestion controller, pacer,
// loss-cause classifier, bytes in flight and loss detection, while the
// packet numbers, the sent-packet history and the frames are shared (one
// association, one number space). Every sent packet records its path; an
// ACK updates the state of the paths its packets went on, and a packet is
// judged lost only against later packets of its own path, so a slow path
// does not make a fast one's packets look lost (nor the other way round).
// Path 0 exists from Init; with it alone the handler is a single-path one.

import (
	"fmt"
	"time"

	"scpsvpn/scps/cc"
)

// MaxPaths bounds the paths of one handler.
const MaxPaths = 8

// pathState is one path's congestion, pacing, RTT and loss state.
type pathState struct {
	inUse    bool
	sendRate int64 // bit/s of the path's forward link; 0 = unknown
	rtt      *cc.RTTStats
	cc       cc.Controller
	pacer    bucket
	loss     lossClassifier

	bytesInFlight     int
	elicitingInFlight int
	largestAcked      uint64 // largest packet of this path acknowledged
	anyAcked          bool
	ackedAt           time.Duration // when a packet of it was last acknowledged (0: never)
	lastElicitingSent time.Duration
	lossTime          time.Duration // this path's loss timer; 0 = not armed
	// loopTimed: an ACK that came back over this path timed it; from then
	// on only such ACKs do (OnAckOn). crossTimed: an ACK that came back
	// over another path did before.
	loopTimed, crossTimed bool
}

// PathConfig is what a path other than path 0 takes of its own; the rest
// (packet size, controller, loss mode) is the handler's Config.
type PathConfig struct {
	SendRate   int64         // bit/s of the path's forward link; 0 = unknown
	InitialRTT time.Duration // 0: the handler's Config.InitialRTT
	Resume     *cc.Resume    // the path as an earlier association saved it (careful resume); nil = none
}

// initPath sets path i's state up afresh; its packets still in flight
// stay counted.
func (h *SentPacketHandler) initPath(i int, pc PathConfig, resume *cc.Resume, now time.Duration) error {
	if pc.InitialRTT <= 0 {
		pc.InitialRTT = h.cfg.InitialRTT
	}
	p := &h.paths[i]
	rtt := cc.NewRTTStats(pc.InitialRTT)
	ctl, err := cc.New(h.cfg.Congestion, cc.Params{
		MaxDatagramSize: h.cfg.MaxPacketSize,
		WireOverhead:    h.cfg.WireOverhead,
		RTT:             rtt,
		SendRate:        pc.SendRate,
		RTTNoise:        h.cfg.RTTNoise,
		Resume:          resume,
	})
	if err != nil {
		return err
	}
	*p = pathState{
		inUse: true, sendRate: pc.SendRate, rtt: rtt, cc: ctl,
		bytesInFlight: p.bytesInFlight, elicitingInFlight: p.elicitingInFlight,
		largestAcked: p.largestAcked, anyAcked: p.anyAcked, ackedAt: p.ackedAt,
		lastElicitingSent: now,
	}
	p.loss.mode, p.loss.noise = h.cfg.Loss, h.cfg.RTTNoise
	cur := h.cur
	h.cur = uint8(i)
	h.UpdatePacer(now)
	h.cur = cur
	p.pacer.tokens = p.pacer.maxBurst
	return nil
}

// SetPath gives path i (1 <= i < MaxPaths) a fresh state: a new
// controller and RTT, as a new path starts (from pc.Resume, if saved).
func (h *SentPacketHandler) SetPath(i int, pc PathConfig, now time.Duration) error {
	if i <= 0 || i >= MaxPaths {
		return fmt.Errorf("ackhandler: path %d: use 1..%d", i, MaxPaths-1)
	}
	return h.initPath(i, pc, pc.Resume, now)
}

// Use makes path i the one the next packet goes on: WindowOpen, Paced,
// PacedAt, UpdatePacer and OnPacketSent then speak of it. A path never set
// counts as path 0.
func (h *SentPacketHandler) Use(i int) {
	if i < 0 || i >= MaxPaths || !h.paths[i].inUse {
		i = 0
	}
	h.cur = uint8(i)
}

// Current is the path the next packet goes on (Use).
func (h *SentPacketHandler) Current() int { return int(h.cur) }

// cp is the path the next packet goes on.
func (h *SentPacketHandler) cp() *pathState { return &h.paths[h.cur] }

// PathRTT is path i's RTT statistics (path 0's for a path never set).
func (h *SentPacketHandler) PathRTT(i int) *cc.RTTStats {
	if i < 0 || i >= MaxPaths || !h.paths[i].inUse {
		i = 0
	}
	return h.paths[i].rtt
}

// PathController is path i's congestion controller (path 0's for a path
// never set).
func (h *SentPacketHandler) PathController(i int) cc.Controller {
	if i < 0 || i >= MaxPaths || !h.paths[i].inUse {
		i = 0
	}
	return h.paths[i].cc
}

// PathInFlight is the bytes in flight on path i.
func (h *SentPacketHandler) PathInFlight(i int) int {
	if i < 0 || i >= MaxPaths {
		return 0
	}
	return h.paths[i].bytesInFlight
}

// PathClockRate is what bonding shares a sender's data by, bytes/s (0 =
// unlimited): path i's pacing rate, and past slow start no more than its
// controller's estimate of its link (cc.LinkRater), which the pacing
// rate of a path the sender does not fill runs far above (a LEO's at
// 290 Mbit/s), but not below a clockDiscount-th of the pacing rate: a
// path that carried only a few requests estimates its link by them. In
// slow start the estimate may still be a first flight's, below the
// link's: a GEO held to it beside a LEO carried a fifth of its data
// before the LEO failed, and took seconds more to reach its rate after.
func (h *SentPacketHandler) PathClockRate(i int) float64 {
	const clockDiscount = 4
	r := h.PathPacingRate(i)
	if i < 0 || i >= MaxPaths || h.paths[i].cc.InSlowStart() {
		return r
	}
	if lr := linkRate(h.paths[i].cc); lr > 0 && (r == 0 || lr < r) {
		r = max(lr, r/clockDiscount)
	}
	return r
}

// LinkRate is the current path's controller's estimate of its link's
// rate, bytes/s (cc.LinkRater); 0 when it has none.
func (h *SentPacketHandler) LinkRate() float64 { return linkRate(h.cp().cc) }

// linkRate is ctl's estimate of its link's rate, bytes/s; 0 when it
// keeps none (not a cc.LinkRater) or has none yet.
func linkRate(ctl cc.Controller) float64 {
	if l, ok := ctl.(cc.LinkRater); ok {
		return l.LinkRate()
	}
	return 0
}

// PathAckedAt is when a packet sent on path i was last acknowledged for
// the first time (0: never).
func (h *SentPacketHandler) PathAckedAt(i int) time.Duration {
	if i < 0 || i >= MaxPaths {
		return 0
	}
	return h.paths[i].ackedAt
}

// PathPacingRate is the bytes/s path i's pacer releases at (0 = unlimited).
func (h *SentPacketHandler) PathPacingRate(i int) float64 {
	if i < 0 || i >= MaxPaths {
		return 0
	}
	return h.paths[i].pacer.rate
}

// LosePath declares everything outstanding on path i lost to the path's
// failure (no window change: cause outage), as LoseAll does for all.
func (h *SentPacketHandler) LosePath(now time.Duration, i int) {
	h.lose(now, func(p *SentPacket) bool { return int(p.Path) == i })
}

// multi reports whether a path other than path 0 is set.
func (h *SentPacketHandler) multi() bool {
	for i := 1; i < MaxPaths; i++ {
		if h.paths[i].inUse {
			return true
		}
	}
	return false
}
