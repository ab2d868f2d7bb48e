package cc

// This file owns careful resume (draft-ietf-tsvwg-careful-resume): an
// association to a peer whose path an earlier association measured starts
// from what that one learned instead of from slow start's initial window.
// The phases, as the draft names them:
//
//   - observe: the association reports its path (PathState: the best
//     delivery rate of the last rounds, the minimum RTT, the loss) for
//     the caller to keep, per peer, in memory and on disk;
//   - reconnaissance: the new association confirms the path with an RTT
//     sample (the handshake's, or the first ACK's): saved state older
//     than ResumeLifetime is not used, nor is a saved minimum RTT outside
//     [current/resumeRTTRange, current*resumeRTTRange] in resumeDecline
//     samples (one sample in range jumps at once);
//   - unvalidated: the window jumps to a third of the saved
//     bandwidth-delay product, paced over one RTT (a third of the saved
//     rate);
//   - validating: the ACKs of the jump deliver its rate with no queue and
//     no loss: the rate is confirmed at a third; the window opens to the
//     saved bandwidth-delay product, paced at the saved rate, for one
//     round trip, which the delay signal checks as it checks any slow
//     start round;
//   - normal: the window goes to what the path delivers (the
//     controller's target) and its own rules run from then on.
//
// Safe retreat: a congestion loss, a queue in the RTT (slow start's exit),
// an RTT sample above the saved minimum by resumeRetreatQueue, or the
// jump's ACKs arriving at less than resumeConfirm of its rate, while
// unvalidated or validating, ends the resume at once: within a quarter of
// a round trip of the jump's first ACK on a path whose rate fell. The
// controller's cut sets the window to what the path delivers now times the
// saved RTT, the safe rate the draft asks for (its PipeSize, measured
// rather than halved), and does not grow it until the jump's packets are
// acknowledged.

import "time"

// ResumeLifetime is how long saved path state is used. The draft leaves
// the lifetime to the implementation; an hour covers a working session
// and its idle breaks, while weather and beam load on a satellite path
// change over hours.
const ResumeLifetime = time.Hour

const (
	// resumeRTTRange: the saved minimum RTT and the current RTT must
	// agree within this factor for a jump. A GEO hop that doubles its RTT
	// is another route or a terrestrial fallback, whose capacity the
	// saved rate says nothing of (the draft allows a factor of 10 up; a
	// satellite path's RTT is its geometry, so two is plenty).
	resumeRTTRange = 2
	// resumeDecline is how many RTT samples outside resumeRTTRange decline
	// the resume. One is not evidence enough: a host stalled for 100 ms
	// over the handshake or the first ACK (a loaded machine's scheduling)
	// gave one sample over twice a LEO path's and switched the resume off
	// for the association, while the next sample was the path's. The
	// second sample is the next ACK's, within the same round trip on a
	// path that really changed; reconnaissance sends no more than slow
	// start while it waits, so the wait costs nothing.
	resumeDecline = 2
	// resumeJumpShare is the share of the saved rate the unvalidated
	// phase sends at. The draft allows up to half (jump_cwnd =
	// saved_cwnd/2); nothing can come back before the first ACK, so the
	// jump's round trip overshoots a path whose rate fell by all of
	// (share - new rate) x RTT. At a third that is two thirds of the
	// new bandwidth-delay product when the rate fell to a fifth, which a
	// modem queue of one product holds; at half it was one and a half
	// products and 5-8% of the packets were dropped. The validating round
	// runs at the saved rate, so a path as saved still reaches it after
	// one round trip.
	resumeJumpShare = 1.0 / 3
	// resumeRetreatQueue: an RTT sample above the saved minimum by this
	// share of it (and the RTT noise) while unvalidated or validating says
	// the path is not the one saved: the queue the jump built. An eighth
	// is what the loss-cause detector takes for congestion; waiting for
	// more lets a paced jump at five times a fallen rate queue for
	// seconds before the first sample shows it.
	resumeRetreatQueue = 0.125
	// resumeConfirm: the jump is confirmed once the ACKs deliver this
	// share of its rate; ACKs that deliver less over resumeJudge say the
	// path is not the one saved, and the sender retreats at once.
	resumeConfirm = 0.8
	// resumeJudge is the share of the saved RTT of the jump's arrivals
	// that is judged: paced, its packets arrive at the rate they were
	// sent at, or at the bottleneck's rate when that is less. A quarter
	// of a round trip: a host that stalls the receiver for a few
	// milliseconds spreads a shorter span's arrivals by as much as a
	// slower bottleneck would (a false retreat costs the start and the
	// saved rate). The delay signal of the packets sent into the queue
	// often tells first (slow start's exit, resumeRetreatQueue); the
	// arrivals are the next signal, for a path whose RTT noise hides the
	// queue's first growth.
	// At least resumeJudgePackets packets of the jump are judged, so a
	// slow path is not judged on one ACK.
	resumeJudge        = 4
	resumeJudgePackets = 8
)

// PathState is what an association learned of the path to its peer.
type PathState struct {
	Rate   float64       // bytes/s: the best delivery rate of the last rounds
	MinRTT time.Duration // the smallest RTT seen
	Loss   float64       // share of packets lost, 0..1
	At     time.Time     // when it was observed
	// Retreated: the association that observed it had resumed from saved
	// state and found the path different (not kept on disk).
	Retreated bool
}

// Usable reports whether p may seed a resume at now: it has a rate and an
// RTT and is younger than ResumeLifetime (and not from the future).
func (p PathState) Usable(now time.Time) bool {
	age := now.Sub(p.At)
	return p.Rate > 0 && p.MinRTT > 0 && age >= -time.Minute && age <= ResumeLifetime
}

// Resume is what a new association is given to resume at a saved rate.
type Resume struct {
	Saved PathState
	// RTT is a current RTT sample taken before the association's first
	// packet (the handshake's round trip); 0: the first ACK's sample
	// confirms the path instead, a round trip later.
	RTT time.Duration
}

// Resumer is a controller that reports its path for careful resume.
type Resumer interface {
	// PathRate is the best delivery rate of the last rounds in bytes/s
	// (0: none measured).
	PathRate() float64
	// ResumePhase names the careful resume phase (ResumeOff when none).
	ResumePhase() ResumePhase
	// RetreatCause names the signal a retreat came on (RetreatRTT, ...;
	// "" when none came).
	RetreatCause() string
}

// The signals a careful resume retreats on (Resumer.RetreatCause).
const (
	RetreatRTT        = "rtt"        // an RTT sample above the saved minimum by resumeRetreatQueue
	RetreatArrivals   = "arrivals"   // the jump's packets arrived slower than sent (careful.judge)
	RetreatQueue      = "queue"      // slow start's exit on the delay signal
	RetreatLoss       = "loss"       // a congestion loss
	RetreatPersistent = "persistent" // persistent congestion
)

// ResumePhase is a careful resume phase.
type ResumePhase uint8

const (
	ResumeOff         ResumePhase = iota // no saved state used: normal
	ResumeRecon                          // waiting for an RTT sample
	ResumeUnvalidated                    // jumped, no ACK of the jump yet
	ResumeValidating                     // the jump's ACKs confirm it
	ResumeRetreated                      // the path proved different
	resumeNormalAfter                    // validated, now normal
)

func (p ResumePhase) String() string {
	return [...]string{"off", "reconnaissance", "unvalidated", "validating", "retreated", "validated"}[p]
}

// careful is the careful resume state of a controller.
type careful struct {
	phase  ResumePhase
	saved  PathState
	rtt    time.Duration // a current RTT given up front
	noise  time.Duration // the RTT noise of the path (Params.RTTNoise)
	rate   float64       // bytes/s paced while unvalidated
	jump   time.Time     // when the jump began
	window float64       // the jump's window, bytes
	misses int           // RTT samples outside resumeRTTRange in reconnaissance
	// lastAck is when the latest ACK of the jump judged arrived (zero:
	// none yet); firstRecv and firstSent are when the packet the first
	// of them acknowledged arrived at the peer and was sent, and acked
	// the bytes acknowledged since (the first ACK's own excluded: they
	// arrived before the interval began).
	lastAck              time.Time
	firstRecv, firstSent time.Time
	acked                int
	check                time.Time // validating ends with the ACK of a packet sent after it
	// retreatRate is the delivery rate at the retreat (bytes/s): the
	// controller paces at no less than it until the queue the jump built
	// has drained (the smoothed RTT still holds that queue, and pacing by
	// it would leave the link idle once the queue is gone); 0 after.
	retreatRate float64
	retreatAt   time.Time
	cause       string // the signal the retreat came on (Retreat*)
}

func newCareful(p Params) careful {
	if p.Resume == nil || p.SendRate > 0 || p.Resume.Saved.Rate <= 0 || p.Resume.Saved.MinRTT <= 0 {
		// Told a rate, the controller starts at its bandwidth-delay
		// product already.
		return careful{}
	}
	return careful{phase: ResumeRecon, saved: p.Resume.Saved, rtt: p.Resume.RTT, noise: max(p.RTTNoise, HostNoise)}
}

// confirm runs reconnaissance at now with a current RTT sample and
// returns the window to jump to (0: no jump). A sample out of range
// declines the resume only when it is the resumeDecline-th (saved state
// past its lifetime declines at once).
func (r *careful) confirm(now time.Time, rtt time.Duration) float64 {
	s := r.saved
	if !r.inRange(now, rtt) {
		if r.misses++; r.misses >= resumeDecline || !s.Usable(now) {
			r.phase = ResumeOff
		}
		return 0
	}
	r.phase, r.jump = ResumeUnvalidated, now
	r.rate = resumeJumpShare * s.Rate
	r.window = r.rate * max(rtt, s.MinRTT).Seconds()
	return r.window
}

// inRange reports whether the saved path may be jumped on at now given a
// current RTT sample: usable, and its RTT within resumeRTTRange of it.
func (r *careful) inRange(now time.Time, rtt time.Duration) bool {
	s := r.saved
	return s.Usable(now) && rtt*resumeRTTRange >= s.MinRTT && rtt <= s.MinRTT*resumeRTTRange
}

// jumpsUpFront reports whether a first packet sent at now jumps
// (confirmUpFront).
func (r *careful) jumpsUpFront(now time.Time) bool {
	return r.phase == ResumeRecon && r.rtt > 0 && r.inRange(now, r.rtt)
}

// confirmUpFront runs reconnaissance at the first packet with the RTT
// given up front (the handshake's) and returns the window to jump to (0:
// no jump). The responder's handshake RTT runs from its response to the
// initiator's first packet on the session, which may leave only when the
// initiator has something to send: longer than the path's RTT by that
// wait, it says nothing of the path, and the first ACK's sample decides
// instead (a round trip later). One shorter than the range is the path's.
func (r *careful) confirmUpFront(now time.Time) float64 {
	rtt := r.rtt
	r.rtt = 0
	if rtt > r.saved.MinRTT*resumeRTTRange {
		return 0
	}
	return r.confirm(now, rtt)
}

// active reports whether a jump is unconfirmed or being validated.
func (r *careful) active() bool {
	return r.phase == ResumeUnvalidated || r.phase == ResumeValidating
}

// retreat ends the resume at now on the signal cause: the path proved
// different; it delivers rate (bytes/s, 0 if not measured).
func (r *careful) retreat(now time.Time, rate float64, cause string) {
	if r.active() {
		r.phase, r.retreatRate, r.retreatAt, r.cause = ResumeRetreated, rate, now, cause
	}
}

// drained ends the retreat's pacing floor once a packet sent after the
// retreat comes back with the jump's queue gone.
func (r *careful) drained(ev AckEvent) {
	if r.retreatRate > 0 && ev.RTT > 0 && ev.LargestSentAt.After(r.retreatAt) && ev.RTT <= r.queueLimit() {
		r.retreatRate = 0
	}
}

// queueLimit is the RTT above which the path is not the one saved.
func (r *careful) queueLimit() time.Duration {
	return r.saved.MinRTT + time.Duration(float64(r.saved.MinRTT)*resumeRetreatQueue) + r.noise
}

// onAck moves unvalidated -> validating -> normal as the jump's ACKs
// return, given the delivery rate they show (bytes/s), and retreats at
// the first sign that the path is not the one saved: an RTT above the
// saved one by more than an eighth (plus the path's noise), or the
// jump's ACKs arriving at less than resumeConfirm of the rate it was
// paced at (the bottleneck spaced them: its rate is less). A jump paced
// at a share of a rate the path still has builds no queue and arrives at
// its own rate. It reports whether the controller must retreat.
//
// One sample above the limit is not enough: a host that held a batch of
// ACKs (a loaded machine's scheduling, a stall the receive timestamps do
// not see) hands them over with RTTs that fall back to the path's within
// the batch, while the queue of a path that fell keeps every one of them
// up. On the first sample alone a run through the real binary retreated
// on the path as saved and lost the start (and the saved rate).
func (r *careful) onAck(now time.Time, ev AckEvent, rtt time.Duration, rate float64, mss int) bool {
	if !r.active() || ev.LargestSentAt.Before(r.jump) {
		return false
	}
	if ev.RTT > r.queueLimit() && rtt > r.queueLimit() {
		// The ACKs of the jump's start are few: over the last eighth
		// of a round trip they measured a sixth of the jump's rate on
		// a path that carried it, and the window went to that. What
		// arrived since the first of them did not arrive faster than
		// the jump was sent.
		r.retreat(now, max(rate, min(r.rate, r.arrivalRate(now, ev, ev.AckedBytes))), RetreatRTT)
		return true
	}
	switch {
	case r.phase == ResumeUnvalidated:
		if rate >= resumeConfirm*r.rate {
			r.phase, r.check = ResumeValidating, now
			break
		}
		if r.judge(now, ev, mss) {
			r.retreat(now, r.arrivalRate(now, ev, 0), RetreatArrivals)
			return true
		}
	case !ev.LargestSentAt.Before(r.check):
		r.phase = resumeNormalAfter
	}
	return false
}

// judge takes an ACK of the jump while unvalidated and reports whether
// the jump's packets, judged over resumeJudge of the saved RTT of their
// arrivals at the peer, arrived at less than resumeConfirm of the jump's
// rate and of the rate they were sent at, with the jump in flight: the
// bottleneck spaced them, its rate is less than the jump's. Arrivals
// spread because the sender itself stalled are spread as much when sent,
// and judge nothing. A gap in the ACKs longer than the span restarts the
// interval (the packets before it were not the paced jump: a request's
// answer, an idle sender), and ACKs with less than half the jump in
// flight judge nothing (the sender had less to send than the jump
// allowed, and its rate says nothing of the path).
func (r *careful) judge(now time.Time, ev AckEvent, mss int) bool {
	span := r.saved.MinRTT / resumeJudge
	recv := now.Add(-ev.AckDelay)
	if r.lastAck.IsZero() || now.Sub(r.lastAck) > span || float64(ev.PriorInFlight) < r.window/2 {
		r.lastAck, r.acked = now, 0
		r.firstRecv, r.firstSent = recv, ev.LargestSentAt
		return false
	}
	r.lastAck = now
	r.acked += ev.AckedBytes
	arrived, sent := recv.Sub(r.firstRecv), ev.LargestSentAt.Sub(r.firstSent)
	if arrived < span || r.acked < resumeJudgePackets*mss {
		return false
	}
	got := float64(r.acked) / arrived.Seconds()
	return got < resumeConfirm*r.rate && float64(sent) < resumeConfirm*float64(arrived)
}

// arrivalRate is the rate (bytes/s) at which the jump's packets judged
// so far (judge), and more bytes acknowledged by ev, arrived at the peer;
// 0 if none were.
func (r *careful) arrivalRate(now time.Time, ev AckEvent, more int) float64 {
	d := now.Add(-ev.AckDelay).Sub(r.firstRecv)
	if r.firstRecv.IsZero() || d <= 0 {
		return 0
	}
	return float64(r.acked+more) / d.Seconds()
}

// validated reports whether the ACK just taken (onAck) ended validating.
func (r *careful) validated() bool { return r.phase == resumeNormalAfter }
