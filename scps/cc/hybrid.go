package cc

// This file owns "hybrid", the controller the paper (README) proposes for
// SCPS-TP: Hybla's slow start (2^rho - 1 packets per packet acknowledged,
// so a long round trip opens as fast per second as a short one), Vegas'
// measure of the queue (diff = inFlight * (RTT - BaseRTT) / RTT) to leave
// slow start and to steer congestion avoidance, and window reductions only
// for losses the association attributes to congestion.
//
// The queue is judged on the freshest samples (the smallest RTT of the last
// eighth of a round trip), less the burst an ACK releases (rounds.burst)
// and the RTT noise (Params.RTTNoise: the return link's ACK serialization,
// at least HostNoise, the hosts' own processing delay). Slow start ends
// when more than gamma packets queue. Congestion avoidance runs once per
// round, and grows the window at most every other round (a growth shows in
// the RTT a round later):
//   - diff < alpha: the link is underused: with no queue at all grow fast,
//     by cwnd/10 (one round of it cannot add more queue than a tenth of
//     the round trip), and straight back to the pipe the best delivery
//     rate of the last ten rounds filled (maxPipe), so a cut the delay
//     signal did not confirm is undone in a round instead of climbed back,
//     with a little queue by one packet, as Vegas;
//   - alpha <= diff <= beta: hold;
//   - diff > beta: jump to the target window, what the pipe holds plus
//     (alpha+beta)/2 packets, so a capacity drop is followed within a
//     round, not one packet per round as in Vegas (see target).
//
// A congestion loss sets the window to min(target, 0.85 cwnd), but not
// below the link's pipe when the application held the sender back (the
// delivery rate then is the application's).
//
// Slow start is paced at the configured link rate when there is one (the
// association's pacer), and starts at that rate's bandwidth-delay
// product, so a known link is full from the first round trip. Without a
// configured rate the pacer is held to twice the recent delivery rate
// (from an initial window scaled with the RTT), so the sending rate at
// most doubles per round trip and the delay signal arrives before the
// queue has grown by more than about one bandwidth-delay product.

import (
	"math"
	"slices"
	"time"
)

func init() { Register("hybrid", func(p Params) Controller { return NewHybrid(p) }) }

// Hybrid thresholds in packets.
const (
	// stallGapMin is the shortest silence of the ACKs taken for a stall
	// (ackStall): many times the ACK spacing of a sender that fills
	// even a slow link.
	stallGapMin = 20 * time.Millisecond
	hybridAlpha = 2
	hybridBeta  = 4
	hybridGamma = 2
	// hybridLossFactor is the most a congestion loss leaves of the window:
	// a loss the delay measure did not see coming (a shallow buffer, a
	// loss-mode "congestion" link) still costs something.
	hybridLossFactor = 0.85
	// queueSamples: the queue is judged on the smallest RTT of the last
	// eighth of a round trip, and of at least this many samples.
	queueSamples = 4
	// hybridGrowthDivisor bounds fast growth to cwnd/10 per round: the
	// queue one round of growth can build (a tenth of the round trip)
	// stays below what the loss-cause detector takes for congestion (an
	// eighth).
	hybridGrowthDivisor = 10
	// hybridIWRefRTT and hybridIWMaxScale scale the initial window with
	// the initial RTT (initialWindow).
	hybridIWRefRTT   = 200 * time.Millisecond
	hybridIWMaxScale = 4
	// hybridIWMinPackets is the least initial window (initialWindow),
	// on any path: a web page's 30 kB HTML (21 packets and its headers)
	// in the first round trip.
	hybridIWMinPackets = 24
	// rateRounds is how many rounds' delivery rates are remembered: the
	// best of them paces slow start and bounds how far congestion
	// avoidance may jump back after a cut (maxPipe).
	rateRounds = 10
	// rateSamples: the delivery rate is measured over the last quarter
	// round trip, and at least this many ACKs.
	rateSamples = 8
	// capacityOvershoot bounds slow start's pacing once the first flight
	// timed the bottleneck (capacity): it jumps to that rate at once and
	// grows beyond the larger of it and the delivery rate by at most
	// capacityOvershoot, so the queue it builds before the delay signal
	// returns is a quarter of the bandwidth-delay product, not one. It
	// used to start at half the estimate (in case the estimate were twice
	// too high), which held a 10 Mbit/s GEO link at half its rate for a
	// round trip and a half; a burst through a FIFO bottleneck leaves it
	// spaced by what the link has left beside other traffic, and an
	// estimate too high shows in the delay signal one round trip later
	// as any slow start round's overshoot does.
	capacityOvershoot = 1.25
	// capacityBeaten and capacityRegrowth: once the delivery rate is
	// beyond capacityBeaten times the estimate with no queue (slow
	// start still on), the estimate was low, and slow start grows by
	// capacityRegrowth per round trip instead of capacityOvershoot. A
	// busy sending host spreads its first flight as a slower link
	// would (through the binary at a load average of 16 the 47 kB of a
	// 250 Mbit/s link's first flight left over 9 ms and timed it at
	// 0.9 MB/s of 30), and a thin return link's queue spreads the ACKs;
	// a quarter per round trip from that far below took 15 round trips.
	// Half per round trip overshoots the link by at most half a
	// bandwidth-delay product of queue before the delay signal returns,
	// which a modem's one-product queue holds.
	capacityBeaten   = 1.2
	capacityRegrowth = 1.5
	// quietRounds: after this many rounds in a row that showed no queue
	// while the window was full, the link has more to give (a rain fade
	// ended, a competitor left) and slow start resumes.
	quietRounds = 2
	// belowPeak: told a rate, a quiet round resumes slow start at once
	// when the delivery rate is below this share of the best seen.
	belowPeak = 0.8
	// resumeRateHeld: slow start resumes only while the delivery rate
	// is at least this share of the one at the end of the round before.
	resumeRateHeld = 0.95
	// fullWindowSlack: the window counts as full with this many packets
	// of it unused.
	fullWindowSlack = 3
	// reprobeBelow: told a rate, slow start resumes only while the
	// delivery rate is below this share of it.
	reprobeBelow = 0.85
	// resumeGain and maxFutile: a resumed slow start that ends with the
	// best rate seen not above resumeGain of what it was finds nothing,
	// and doubles the quiet rounds the next one needs, up to maxFutile
	// times.
	resumeGain = 1.05
	maxFutile  = 4
	// sharedGain: a resumed slow start that raised the delivery rate by
	// more than this, but not to belowPeak of the best seen, took the
	// rate from another flow in the bottleneck's queue, not from a link
	// that recovered (Hybrid.shared).
	sharedGain = 1.15
	// sharedJudgeRounds: the rate a resume reached is judged again this
	// many rounds after it ended, when the rounds' rate carries it.
	sharedJudgeRounds = 2
)

// Hybrid is the "hybrid" controller.
type Hybrid struct {
	p             Params
	mss           int
	cwnd          int
	ssthresh      int  // slow start ends here (or earlier, on delay)
	ss            bool // in slow start: the window only moves up, until ssthresh or a queue shows
	r             rounds
	rates         [rateRounds]float64 // delivery rates of the last rounds (ring)
	rateIdx       int
	ackRate       float64 // delivery rate over the last half round trip
	grew          bool    // the window grew at the end of the last round
	recoveryStart time.Time
	inRecovery    bool
	capa          capacity // the bottleneck's rate, timed by ACK trains
	// resumed: slow start was resumed from avoidance; it is paced from
	// the delivery rate as without a configured rate.
	resumed bool
	quiet   int // rounds in a row that ended with no queue and the window in use
	// peakRate is the best delivery rate of any round so far: where a
	// resumed slow start begins.
	peakRate     float64
	roundAckRate float64 // ackRate at the end of the last round
	resumePeak   float64 // peakRate when slow start last resumed
	resumeRate   float64 // ackRate when slow start last resumed
	futile       int     // resumes in a row that found no more rate
	// shared: the last resume found the link shared: it raised the
	// delivery rate only by pushing another flow's share aside, not to
	// the best seen as when a fade ends. Two sites behind one beam each
	// deliver half the best rate they saw alone, which looked like a
	// fade: told a rate, each resumed every third round trip, rammed a
	// bandwidth-delay product into the other's queue and both cut; the
	// beam was idle 4-7% of the time (10/2 Mbit/s, 600 ms: together
	// 92.5%). While shared, the fade's shortcut (one quiet round when far
	// below the best rate) is off and resumes back off as futile ones do;
	// growth with no queue is additive (a tenth of the others' part of
	// the link's pipe) and a cut for a queue keeps Vegas' target, so two
	// sites converge to equal shares and keep the pipe full together.
	shared bool
	// judge: rounds left until the rate the last resume reached is
	// judged once more for shared (the ACKs at its end still carry the
	// rate of before).
	judge int
	// sentFull counts the bytes of full-size packets sent, up to the
	// initial window: the first flight goes out as one burst (PacingRate)
	// whether or not keep-alives already measured the RTT.
	sentFull int
	// flight is the size of the last timed flight when it began (or as
	// it ended, once ended: flightEnded), and retimes counts the
	// flights timed again, each larger than the one before, after one
	// that arrived too fast to time (retime).
	flight, retimes int
	// flightEnded: the timed flight ended short of its size, its data
	// having run out (endFlight); flight is what it sent.
	flightEnded bool
	// flightAcked counts the bytes acknowledged of packets sent since
	// the timed flight began: once it holds the flight (but for
	// retimeSlack), its ACKs are in and a flight too fast to time is
	// timed again at once (retime).
	flightAcked int
	// flightAt is when the first full-size packet left: ACK trains are
	// timed from it (capacity). A small packet before it (a response's
	// header, a window update) reached the peer while the link was idle,
	// and a host stall that delayed the flight behind it by twice their
	// gap made the two one "train": a 50 Mbit/s link timed at 1.3 MB/s.
	flightAt     time.Time
	lastDecrease time.Time // when the window last shrank
	// lastAckAt is when the last ACK of a newer packet came, lastAckSent
	// when that packet was sent; stallSent: packets sent before it were
	// in flight through an ACK stall (ackStall), and their RTT samples
	// measure the stall, not a queue.
	lastAckAt, lastAckSent, stallSent time.Time
	comp                              compete // beside a loss-based flow (compete.go)
	// fadeLoss: told a rate, a congestion loss came (even one a cut
	// already answered) while the link delivered far below the best
	// rate seen (belowPeak): the queue overflowed at a rate the link no
	// longer has, so a resumed slow start doubles the delivery rate per
	// round trip instead of going straight back to the best rate
	// (PacingRate). Told 50 Mbit/s, faded to 10 behind a 1.5 MB modem
	// queue, each resume at the best rate cost a loss episode of a
	// thousand packets. Cleared once a round delivers near that rate
	// again.
	fadeLoss bool
	// drainRate and drainRound: told a rate and far below the best rate
	// seen (a fade, not a share), the bottleneck rate a cut for a queue
	// sized the window by, and the round it was cut in. Until that round
	// and the next have ended the RTT samples still hold the queue the
	// cut drains, and pacing the window over them (PacingRate) left the
	// link at half its faded rate for a round trip once the queue was
	// gone (4.8 Mbit/s on a 10 Mbit/s link): the pacer runs at no less
	// than this rate meanwhile.
	drainRate  float64
	drainRound uint64
	cr         careful // careful resume from a saved path (resume.go)
	// lowDelay: the path is the lowest-delay one of several that bond a
	// transfer (SetLowDelay).
	lowDelay bool
	// jitter is the mean change of the RTT from one sample to the next
	// (an EWMA of a sixteenth), the hosts' noise: a queue of ours grows
	// and drains at the pace of the window, not from packet to packet.
	jitter  time.Duration
	lastRTT time.Duration // the last RTT sample, for jitter
	// drift is the mean signed change of the RTT from one sample to the
	// next (same gain as jitter): a queue that grows or drains moves it,
	// a host's noise does not.
	drift time.Duration
	// randomLoss is the share of the bytes the link carried that it lost
	// at random (losses not attributed to congestion), an EWMA over
	// rounds; roundLost counts such bytes in the current round
	// (linkCarried).
	randomLoss float64
	// lossFree counts the rounds ended since a packet was last lost
	// (ackBurstAllowance).
	lossFree  int
	roundLost int
	// trainBurst: the first flight went as a path train (OnTrainSent);
	// data that comes before its ACKs leaves this much as a burst, as
	// it would have without the train (a page's HTML whole, not paced
	// at twice the initial window per round trip).
	trainBurst int
	// trainBurstEnd is when the last packet of that burst left: its
	// samples, as the flight's own, carry the burst's queue
	// (flightSample).
	trainBurstEnd time.Time
}

// SetLowDelay implements LowDelayer. On the lowest-delay path of several
// every light stream's packet (a request, a reply) waits behind the queue
// the bulk keeps there, and the other paths carry the bulk too, so this
// path keeps the least queue that still fills it. In congestion avoidance
// its queue is judged with lowDelayMinNoise, or three times the RTT's
// jitter where the hosts' delays vary more (up to the RTT noise), and without
// the allowance for the burst each ACK releases: with them hybrid kept
// 5-15 ms of queue on a 20 Mbit/s cellular link. And it is paced at no
// more than the best delivery rate of the last rounds, the round of
// every lowDelayProbe-th excepted, while three times the jitter is below
// the RTT noise: pacing at 1.25 times the window per RTT filled the queue
// the window allowed within each round. In virtual
// time beside a GEO link (scps TestPathLatencyTold) the cellular link's
// queue at the 95th percentile went from 16 ms to 6-7 ms; the bonded
// downloads fill the links as before, also where the hosts' delays vary
// by 3 ms each way (TestBondTold).
func (c *Hybrid) SetLowDelay(on bool) { c.lowDelay = on }

// lowDelayMinNoise is the least RTT noise a low-delay path judges its
// queue with (SetLowDelay): the timers' and the hosts' least.
const lowDelayMinNoise = time.Millisecond

// lowDelayProbe and lowDelayProbeGain: a low-delay path is paced at its
// best delivery rate but for one round in lowDelayProbe, paced at up to
// lowDelayProbeGain times it, so a link that can carry more shows it (a
// tenth more per probe).
const (
	lowDelayProbe     = 8
	lowDelayProbeGain = 1.1
)

// lowDelayNoise is the RTT noise of a low-delay path: lowDelayJitters
// times its jitter, at least lowDelayMinNoise and at most the RTT noise
// of any other path.
func (c *Hybrid) lowDelayNoise() time.Duration {
	return min(max(lowDelayMinNoise, lowDelayJitters*c.jitter), c.p.RTTNoise)
}

// lowDelayJitters: a low-delay path's RTT noise is this many times its
// jitter (the mean change from one RTT sample to the next). With twice,
// a LEO beside a GEO whose hosts' delays varied by up to 4 ms each way
// read the hosts' noise as its queue: its window was cut below the pipe
// and the bulk download filled 78-93% of the summed limits (four seeds,
// scps latencyBesideBulk), 94-96% with three times, the request's p95
// the same (1.15-1.27x the LEO's RTT and the hosts' mean against
// 1.16-1.31x). Beside it on GEO+CELL the request's p95 rose from
// 1.14-1.18x to 1.16-1.21x with 2 ms of such noise, from 1.17-1.21x to
// 1.21-1.25x with 4 ms; with none, unchanged. Four times cost GEO+CELL
// more (1.21-1.26x at 2 ms).
const lowDelayJitters = 3

// NewHybrid builds a hybrid controller.
func NewHybrid(p Params) *Hybrid {
	p.RTTNoise = max(p.RTTNoise, HostNoise)
	c := &Hybrid{p: p, mss: p.MaxDatagramSize, ssthresh: maxWindow, ss: true}
	c.cwnd = c.initialWindow()
	c.cr = newCareful(p)
	if p.SendRate > 0 {
		// A configured rate fills the first round trip too: one
		// bandwidth-delay product, paced at that rate. If the rate is
		// wrong this overshoots no more than slow start would a round
		// trip later (both send one round trip at the configured rate
		// before the first delay sample returns).
		bdp := float64(p.SendRate) / 8 * p.RTT.Smoothed().Seconds()
		c.cwnd = c.clamp(max(float64(c.cwnd), bdp))
	}
	return c
}

// initialWindow is the usual ten packets, times the initial RTT over
// hybridIWRefRTT (at most hybridIWMaxScale times): the first round trip
// then sends as many packets per second on a 600 ms path as on a 200 ms
// one, in Hybla's spirit, and slow start without a configured rate needs
// 1.6 fewer round trips to fill a GEO link. It is never below
// hybridIWMinPackets: with ten packets a 30 kB object (a web page's HTML)
// took a second round trip on a path shorter than 480 ms, on LEO (40 ms)
// 0.08 of the page's floor. The window goes out as one burst whose ACKs
// time the bottleneck (firstFlight): a longer train times it better.
func (c *Hybrid) initialWindow() int {
	k := min(max(c.p.RTT.Smoothed().Seconds()/hybridIWRefRTT.Seconds(), 1), hybridIWMaxScale)
	return max(int(k*float64(initialWindow(c.mss))), hybridIWMinPackets*c.mss)
}

// Name implements Controller.
func (c *Hybrid) Name() string { return "hybrid" }

// OnPacketSent implements Controller. With a current RTT given up front
// (the handshake's), careful resume confirms the path and jumps before the
// first packet leaves.
func (c *Hybrid) OnPacketSent(now time.Time, bytes, _ int) {
	if c.trainBurst > 0 && c.sentFull >= c.flight && c.capa.estimate() == 0 {
		c.trainBurst -= bytes
		c.trainBurstEnd = now
	}
	if bytes >= c.mss/2 {
		c.endFlight(now)
	}
	if bytes >= c.mss/2 && c.sentFull < c.flightSize() {
		if c.sentFull == 0 {
			c.flightAt, c.capa.flightAt = now, now
			c.flight, c.flightAcked = c.flightSize(), 0
		}
		if c.sentFull < c.flight {
			// The flight as it began: the initial window follows the
			// smoothed RTT, and packets let out as it grew are paced.
			c.capa.flightEnd = now
		}
		c.sentFull += bytes
	}
	if c.cr.phase == ResumeRecon && c.cr.rtt > 0 {
		c.jump(c.cr.confirmUpFront(now))
	}
}

// endFlight ends the timed flight as sent so far when a full-size packet
// leaves at now, more than flightBurst after the flight began, while the
// flight is short of its size but holds at least half of it: its data ran
// out and what came later (tail copies of its end, a page's objects a
// round trip after its HTML) is no part of the burst. Left open, the
// flight's ACKs were not all in until those later packets' came back: on
// LEO (40 ms) the 30 kB HTML's 20 packets left as one burst, four tail
// copies 20 ms later completed the flight, and a flight the link
// emulator handed over in one batch (too fast to time) was timed again
// only on the copies' ACK, half a round trip after its own, with the
// objects paced meanwhile at twice the initial window per round trip.
// A flight that sent less than half its size waits for its data as
// before: a short response's few packets time nothing, and the next
// transfer's first packets complete its burst. So does one whose data
// comes within flightBurst: a sending host that takes its data from a
// TCP connection in chunks (ten packets, then twice as many every few
// ms) still sends one burst.
func (c *Hybrid) endFlight(now time.Time) {
	if c.flightEnded || c.sentFull == 0 || c.sentFull >= c.flight || 2*c.sentFull < c.flight ||
		now.Sub(c.flightAt) <= flightBurst {
		return
	}
	c.flight, c.flightEnded = c.sentFull, true
}

// OnTrainSent implements PathTrainer: the window grows by the train, so
// a transfer that starts before the train's ACKs are back sends its
// initial window beside it (paced at twice it per round trip, as any
// round before an estimate), and the train's ACKs then set the rate as a
// first flight's would.
func (c *Hybrid) OnTrainSent(_ time.Time, bytes int) {
	c.cwnd = c.clamp(float64(c.cwnd + bytes))
	c.trainBurst = c.initialWindow()
}

// jump raises the window to w, careful resume's unvalidated jump.
func (c *Hybrid) jump(w float64) {
	if w > 0 {
		c.cwnd = c.clamp(max(float64(c.cwnd), w))
	}
}

// PathRate implements Resumer.
func (c *Hybrid) PathRate() float64 { return c.bestRate() }

// ResumePhase implements Resumer.
func (c *Hybrid) ResumePhase() ResumePhase { return c.cr.phase }

// RetreatCause implements Resumer.
func (c *Hybrid) RetreatCause() string { return c.cr.cause }

// InSlowStart implements Controller.
func (c *Hybrid) InSlowStart() bool { return c.ss }

// Window implements Controller.
func (c *Hybrid) Window() int { return c.cwnd }

// Diff is the queue estimate of the last completed round, in packets.
func (c *Hybrid) Diff() float64 {
	return queued(c.r.lastMaxIn, c.r.lastMinRTT, c.p.RTT.Min(), c.p.RTTNoise) / float64(c.mss)
}

// target is the window that leaves (alpha+beta)/2 packets queued: what the
// pipe holds plus that. The pipe is the recent delivery rate times BaseRTT
// plus the RTT noise (the hosts' processing delay carries packets as the
// link does: on a LAN whose base RTT is tens of microseconds it is most of
// the round trip, and a window of rate x BaseRTT alone starves it) when
// enough ACKs measure it, counting what the link lost at random
// (linkCarried): that is right at once after a capacity drop,
// when the RTT has not caught up with the queue yet, and right when flow
// control rather than the window held the sender back. Otherwise it is
// Vegas' inFlight * BaseRTT / RTT.
func (c *Hybrid) target(now time.Time, inFlight int, rtt time.Duration) int {
	base := c.p.RTT.Min()
	if rtt <= 0 || base <= 0 {
		return c.cwnd
	}
	rate := c.r.recentRate(now, c.p.RTT.Smoothed()/4, rateSamples)
	if rate <= 0 {
		return c.vegasTarget(inFlight, rtt)
	}
	pipe := c.linkCarried(rate) * (base + c.p.RTTNoise).Seconds()
	return int(pipe+c.ackBurstAllowance()) + (hybridAlpha+hybridBeta)*c.mss/2
}

// ackBurstLossFree is how many rounds in a row without a lost packet
// let the ACK burst into the cut's target (ackBurstAllowance).
const ackBurstLossFree = 8

// ackBurstAllowance is what the cut's target keeps beyond the pipe, told
// no rate, on a path that lost nothing for ackBurstLossFree rounds: the
// bytes one ACK acknowledged over the last round. The receiver
// acknowledges every few packets (on a 64 kbit/s return link about 23 of
// them, 33 kB), so what the sender counts in flight holds packets that
// already arrived and wait for their ACK; cut to the pipe and three
// packets, the window let the bottleneck's queue run dry after each cut:
// told nothing after start-up, 20M/64k idle 0.88% of the time (98.0% of
// the payload limit), GEO 50/0.5 0.13% (98.8%), in the simulator. Not
// where the path loses packets: there the queue the burst leaves standing
// took random losses past the loss-cause threshold on a shared lossy
// beam (two untold sites, Jain's index 0.93 on one seed), and GEO 10/2
// 1% gained nothing. Not when told a rate: the told fades then kept a
// queue of a burst measured at the rate before the fade (96.8% of what
// the link carried before, 76.5% with it).
func (c *Hybrid) ackBurstAllowance() float64 {
	if c.p.SendRate > 0 || c.lossFree < ackBurstLossFree {
		return 0
	}
	return c.r.lastBurst
}

// maxRandomLoss bounds the random loss linkCarried adds back: beyond it
// the losses are not a link's bit errors.
const maxRandomLoss = 0.1

// linkCarried is what the link carried at a delivery rate of rate: the
// packets it lost at random took their turn at the bottleneck too, and
// stay in flight until their loss is known, so the window that keeps the
// bottleneck busy is the pipe of this rate, not of the delivery rate
// (target). Cut to the delivery rate's pipe, GEO 10/2 with 1% loss told
// nothing (725-737 kB where the link's pipe is 727 kB and the lost
// packets in flight 7 kB more) left the bottleneck idle 1.2% of the time
// after start-up, in the simulator and through the binary alike (docs/
// startup.md, "After start-up"). Not for maxPipe, the growth back after a
// cut: that changed nothing on one flow and took two sites told nothing on
// one lossy beam to 94.9-96.5% of it together, from 95.1-97.6, on seeds
// 1-4 (TestTwoSitesFillBeam).
func (c *Hybrid) linkCarried(rate float64) float64 {
	return rate / (1 - min(c.randomLoss, maxRandomLoss))
}

// resumePipe is the window rate (bytes/s) needs over the saved RTT, as
// target counts it.
func (c *Hybrid) resumePipe(rate float64) int {
	return int(rate*(c.cr.saved.MinRTT+c.p.RTTNoise).Seconds()) + (hybridAlpha+hybridBeta)*c.mss/2
}

// vegasTarget is Vegas' target: inFlight * (BaseRTT + noise) / rtt, what
// the pipe holds of the bytes in flight, plus (alpha+beta)/2 packets.
func (c *Hybrid) vegasTarget(inFlight int, rtt time.Duration) int {
	base := c.p.RTT.Min()
	if rtt <= 0 || base <= 0 {
		return c.cwnd
	}
	pipe := float64(inFlight) * float64(min(base+c.p.RTTNoise, rtt)) / float64(rtt)
	return int(pipe) + (hybridAlpha+hybridBeta)*c.mss/2
}

func (c *Hybrid) clamp(w float64) int {
	return int(max(float64(minWindowPackets*c.mss), min(w, float64(windowCap(&c.p)))))
}

// randomLossGain is the EWMA gain of randomLoss per round.
const randomLossGain = 1.0 / 8

// trackRandomLoss folds the round that just ended (rounds' last fields)
// into randomLoss.
func (c *Hybrid) trackRandomLoss() {
	acked := c.r.lastBytes
	if acked+c.roundLost <= 0 {
		return
	}
	f := float64(c.roundLost) / float64(acked+c.roundLost)
	c.randomLoss += (f - c.randomLoss) * randomLossGain
	c.lossFree++
	c.roundLost = 0
}

// queueNoise is the RTT variation the queue estimate ignores: the path's
// noise (Params.RTTNoise) or, told the link's rate, twice the RTT's
// jitter that no trend explains (jitter less |drift|), if more. A loaded
// host delays packets at random by tens of milliseconds, which the delay
// signal read as a queue: with 0-30 ms each way on GEO 10/2, told, the
// window stayed below the pipe, 1,000 downloads at 78.6% of the limit and
// one at 77.6% in the simulator; judged so, 98.2% and 93.6%. A queue that
// grows or drains moves the RTT in one direction, so its steps are drift,
// not noise: a fade from 50 to 10 Mbit/s is still found at once
// (TestFadeSmallQueue). Not told: two untold senders sharing a lossy beam
// then took each other's queue for noise (TestTwoSitesFillBeam, Jain
// 0.948, want 0.97).
func (c *Hybrid) queueNoise() time.Duration {
	if c.p.SendRate == 0 {
		return c.p.RTTNoise
	}
	return max(c.p.RTTNoise, 2*(c.jitter-max(c.drift, -c.drift)))
}

// trackJitter updates the RTT's jitter with ev's sample.
func (c *Hybrid) trackJitter(ev AckEvent) {
	if !ev.RTTUpdated || ev.RTT <= 0 {
		return
	}
	if c.lastRTT > 0 {
		d := ev.RTT - c.lastRTT
		c.jitter += (max(d, -d) - c.jitter) / 16
		c.drift += (d - c.drift) / 16
	}
	c.lastRTT = ev.RTT
}

// OnAck implements Controller.
func (c *Hybrid) OnAck(now time.Time, ev AckEvent) {
	stalled := c.ackStall(now, ev)
	c.trackJitter(ev)
	if c.cr.phase == ResumeRecon && ev.RTTUpdated {
		c.jump(c.cr.confirm(now, ev.RTT))
	}
	ended := c.r.onAck(now, ev)
	c.cr.drained(ev)
	if ended {
		c.trackRandomLoss()
	}
	if ended && c.r.lastRate > 0 {
		c.rates[c.rateIdx] = c.r.lastRate
		c.rateIdx = (c.rateIdx + 1) % len(c.rates)
		c.peakRate = max(c.peakRate, c.r.lastRate)
		if c.r.lastRate >= belowPeak*c.peakRate {
			c.fadeLoss = false
		}
		if c.judge > 0 {
			if c.judge--; c.judge == 0 && !c.shared {
				c.shared = c.tookShare(c.r.lastRate)
			}
		}
	}
	if !c.flightAt.IsZero() && !ev.LargestSentAt.Before(c.flightAt) && !c.inTrainBurst(ev) {
		// Timed again, the link hands packets over in batches: a later
		// train of paced packets (two ACKs a batch apart) times the
		// batches, not the link, and lowered the estimate to a sixth.
		c.capa.rising = c.ss && c.retimes > 0 && !c.resumed
		c.flightAcked += ev.AckedBytes
		c.capa.onAck(now, ev, c.r.delivered, c.mss)
		c.retime(ev)
	}
	if r := c.r.deliveryRate(now, c.p.RTT.Smoothed()/2); r > 0 {
		c.ackRate = r
	}
	if c.inRecovery && !ev.LargestSentAt.After(c.recoveryStart) {
		return
	}
	c.inRecovery = false
	base := c.p.RTT.Min()
	rtt := c.r.recentMinRTT(now, c.p.RTT.Smoothed()/8, queueSamples)
	in := ev.PriorInFlight
	queue := 0.0
	if rtt > 0 {
		queue = queued(in, rtt, base, c.queueNoise()) - c.r.burst(ev)
	}
	if phase := c.cr.phase; c.ss && c.cr.active() {
		// The jump is paced: an eighth of a round trip of its ACKs
		// measures the rate it arrives at.
		rate := c.r.deliveryRate(now, c.p.RTT.Smoothed()/8)
		retreat := c.cr.onAck(now, ev, rtt, rate, c.mss)
		switch {
		case retreat:
			// The path is not the one saved: the window goes to what
			// it delivers now over the saved RTT, and the queue the
			// jump built drains.
			w := c.target(now, in, rtt)
			if r := c.cr.retreatRate; r > 0 {
				w = min(w, c.resumePipe(r))
			}
			c.decrease(now, float64(min(c.cwnd, w)))
			c.ss, c.resumed, c.quiet = false, false, 0
			c.recoveryStart, c.inRecovery = now, true
			return
		case c.cr.validated():
			// The jump's rate held and the validating round, paced at
			// the saved rate, is in flight: avoidance takes over (the
			// slow start of a confirmed rate would only overshoot it)
			// with the saved pipe. The ACKs at hand are still the
			// jump's: cut to what they deliver, the window fell to a
			// third of the pipe and a resumed start delivered less
			// over its first seconds than a cold one.
			w := max(c.target(now, in, rtt), c.resumePipe(c.cr.saved.Rate))
			c.decrease(now, float64(min(c.cwnd, w)))
			c.ss, c.resumed, c.quiet = false, false, 0
			return
		case phase == ResumeUnvalidated && c.cr.phase == ResumeValidating:
			// The jump's first ACK: open the window to the saved
			// bandwidth-delay product for the validating round.
			c.jump(c.cr.saved.Rate * max(rtt, c.cr.saved.MinRTT).Seconds())
		}
	}
	if c.ss {
		if queue > hybridGamma*float64(c.mss) && !stalled && !c.flightSample(ev) && !c.toldHeld(now) {
			c.cr.retreat(now, c.ackRate, RetreatQueue)
			c.resumeFound()
			// Not beyond what is in flight: a queue shows it is more
			// than the pipe. The delivery rate target sizes the window
			// by can read a batch of ACKs a stalled host released at
			// once as a burst of rate: through the binary (250/3 untold,
			// load 16) the cut to it left slow start's unbounded window
			// as it was, 1 GiB with 15 MB in flight, avoidance paced at
			// 1.25 times it per RTT (16 Gbit/s) and the modem queue
			// dropped 3.6% of the transfer.
			w := float64(min(c.cwnd, c.target(now, in, rtt), max(in, c.mss)))
			if c.appGrowing() && c.appUnderPipe(in) {
				// A queue a fraction of the window shows is as
				// likely a loaded host's late ACKs (keepAppPipe).
				w = max(w, min(float64(c.cwnd), c.linkPipe()))
			}
			c.decrease(now, w)
			c.ss, c.resumed, c.quiet = false, false, 0
			// The packets already sent overshot: losses among them are
			// that overshoot, which the cut above has answered.
			c.recoveryStart, c.inRecovery = now, true
			return
		}
		if c.cr.active() {
			// A resume's window is its own: the jump, then the saved
			// product, each for one round trip.
			return
		}
		if in*2 >= c.cwnd {
			grow := (math.Exp2(rhoOf(c.p.RTT)) - 1) * float64(ev.AckedBytes)
			c.cwnd = c.clamp(float64(c.cwnd) + grow)
		}
		if est := c.capa.estimate(); est > 0 && c.p.SendRate == 0 && !c.resumed && base > 0 {
			// The pacer jumped to the rate the first flight timed:
			// the window lets it out, a round trip of that rate with
			// slow start's overshoot, where doubling from the first
			// flight's window took four round trips on a short path
			// (LEO: 40 ms, 100 Mbit/s) at a fraction of the timed
			// rate. It opens on the ACK that brings the estimate,
			// whether or not the window is in use then: at 150
			// Mbit/s a flight's first ten packets span less than
			// capacityMinSpan, the estimate came with its last ACKs,
			// and a page's objects a round trip later left with the
			// HTML's window alone.
			c.jump(min(capacityOvershoot*est*base.Seconds(), float64(c.ssthresh)))
		}
		c.ss = c.ssthresh == maxWindow || c.cwnd < c.ssthresh
		return
	}
	if !ended || rtt == 0 || stalled {
		return
	}
	if c.lowDelay {
		queue = queued(in, rtt, base, c.lowDelayNoise())
	}
	diff := queue / float64(c.mss)
	grew := c.grew
	c.grew = false
	if c.competing(now, rtt, in) || c.resume(now, diff, in) {
		return
	}
	switch {
	case diff < hybridAlpha:
		// Not application limited, and the last growth has had a round
		// to show in the RTT: the packets it let out are acknowledged a
		// round trip after it, so growing again before would double the
		// overshoot.
		if in*2 >= c.cwnd && !grew {
			step := float64(c.mss)
			if diff <= 0 {
				// No queue at all: far from capacity, grow fast: by a
				// tenth (one round of it queues at most a tenth of the
				// round trip, below the loss-cause threshold), and at
				// once back to a pipe a recent round filled (a cut for
				// a loss the delay signal did not confirm, or a
				// transient, need not be climbed back in small steps).
				step = max(step, float64(c.cwnd)/hybridGrowthDivisor)
				if c.shared {
					// Beside other flows, by at least a tenth of
					// what the others hold of the link's pipe: the
					// smaller flow then grows as fast as the bigger,
					// and cuts that scale with each window (below)
					// bring the two together.
					step = max(step, (c.linkPipe()-float64(c.cwnd))/hybridGrowthDivisor)
				}
				if p := c.maxPipe(); p > float64(c.cwnd)+step {
					step = p - float64(c.cwnd)
				}
			}
			c.cwnd = c.clamp(float64(c.cwnd) + step)
			c.grew = true
		}
	case diff > hybridBeta:
		w := c.target(now, in, rtt)
		if c.shared || c.p.SendRate == 0 && c.lossFree >= ackBurstLossFree {
			// Not below Vegas' target of what is in flight: the queue
			// the delay shows drains, no more. Beside other flows the
			// delivery rate of a quarter round trip swings with their
			// bursts, and the window cut to it often left the windows
			// together below the pipe. Told nothing on a path that
			// lost nothing for a while, the rate is that of the latest
			// ACKs (recentSamples of them: a few ms at 250 Mbit/s),
			// which through a loaded host come in bunches with gaps
			// between: cut to it, the window fell to half of what was
			// in flight or less (250/3 through the binary: 19.6 MB,
			// 10.4, then 4.7 with 10 MB in flight), the link at a
			// fraction of its rate for seconds. Not where the path
			// loses packets: tried there before (docs/startup.md), the
			// queue the cut left took random losses for congestion and
			// two untold sites on a lossy beam kept unequal shares.
			w = max(w, c.vegasTarget(in, rtt))
		}
		if c.appGrowing() {
			// Not below what the last round delivered: a sender of
			// bursts a round trip apart (QUIC through a repaired flow)
			// delivers over a quarter round trip at a fraction of its
			// round's rate, and cut to that the association held it
			// under the link once it filled the window.
			w = max(w, int(c.r.lastRate*(base+c.p.RTTNoise).Seconds())+(hybridAlpha+hybridBeta)*c.mss/2)
		}
		if c.appGrowing() && c.appUnderPipe(in) {
			// Not the link's queue as a rule (keepAppPipe), nor its
			// rate.
			c.decrease(now, max(float64(min(c.cwnd, w)), min(float64(c.cwnd), c.linkPipe())))
			break
		}
		c.decrease(now, float64(min(c.cwnd, w)))
		// A queue says the pipe is at most what is delivered now: rounds
		// remembered from before a capacity drop must not lead back.
		if r := c.r.recentRate(now, c.p.RTT.Smoothed()/4, rateSamples); r > 0 {
			for i := range c.rates {
				c.rates[i] = min(c.rates[i], r)
			}
			if c.inFade() {
				c.drainRate, c.drainRound = r, c.r.count
			}
		}
	}
}

// toldHeld reports whether, told the link's rate and in the slow start
// paced at it (not a resumed one), the ACKs of the last eighth of a round
// trip (those the queue is judged on) came at reprobeBelow of it or more:
// the link delivers the told rate, so a queue seen now is not one of a
// rate it lacks (a fade, a share, a rate told too high all deliver less)
// but one its near end let build while it stalled (a userspace link
// emulator or a modem's scheduler that holds 40-160 ms of packets, the
// link idle meanwhile, and sends them on back to back). Slow start does
// not end on such a queue. Through the binary (GEO told, 10/2 Mbit/s 1%,
// a loaded host) it ended on one 10-18 s into the transfer in some runs,
// the window went to the pipe and later below it (563-614 kB of 750),
// and the window-limited sender lost link time at every later stall:
// 86-90% of the payload limit over 30 s where runs without the exit gave
// 93%. In the simulator (scps TestToldNearEndStalls, 60 ms stalls every
// 1.5 s) 83.7% of the limit after start-up, now 98.7%. A stall of 100 ms
// or more still ends it where the loss-cause detector takes the random
// losses in its queue for congestion.
func (c *Hybrid) toldHeld(now time.Time) bool {
	if c.p.SendRate == 0 || c.resumed {
		return false
	}
	r := c.r.recentRate(now, c.p.RTT.Smoothed()/8, queueSamples)
	return r >= reprobeBelow*float64(c.p.SendRate)/8
}

// ackStall reports whether ev acknowledges a packet that was in flight
// through a stall of the ACKs, noting the stall when ev ends it: the ACKs
// came more than an eighth of a round trip (at least stallGapMin) further
// apart than the packets they acknowledge were sent. A queue at the
// bottleneck does not do that: the ACKs keep coming at the rate it
// serves, the RTT growing packet by packet. A stall on the way does (a
// loaded host or emulator, a handover), and the RTT samples of every
// packet in flight through it carry its whole length: a sender held back
// by the silence (the association's silence hold) sent nothing newer to
// measure by. Judged as a queue, such stalls of 250 ms ended slow start
// with the window cut to what a tenth of the pipe delivered, and the
// link climbed back for seconds. The samples of packets sent after the
// stall are judged as before.
func (c *Hybrid) ackStall(now time.Time, ev AckEvent) bool {
	lastAck, lastSent := c.lastAckAt, c.lastAckSent
	if !ev.LargestSentAt.After(lastSent) {
		return ev.LargestSentAt.Before(c.stallSent)
	}
	c.lastAckAt, c.lastAckSent = now, ev.LargestSentAt
	gap := max(c.p.RTT.Smoothed()/8, stallGapMin)
	if !lastAck.IsZero() && now.Sub(lastAck)-ev.LargestSentAt.Sub(lastSent) > gap {
		c.stallSent = now
	}
	return ev.LargestSentAt.Before(c.stallSent)
}

// resume decides at the end of an avoidance round whose queue was diff
// packets with in bytes in flight whether slow start resumes: after
// quietRounds rounds in a row (told a rate, one) with no queue while the
// window was full and the delivery rate held, at least two round trips
// after the window last shrank, and, told a rate, only below reprobeBelow
// of it. A window that shrank to the pipe drains its own queue: that says
// nothing of the link; a queue that goes while the window and the rate
// hold says the link has more to give (a rain fade ended, a competitor
// left). Resumed slow start goes straight back to the best rate the link
// has delivered and grows beyond it carefully (PacingRate), so a wrong
// guess costs a quarter of a bandwidth-delay product of queue. Avoidance
// alone climbed back from a fade by a tenth of the window every other
// round: 20 s from 10 to 50 Mbit/s at 600 ms.
func (c *Hybrid) resume(now time.Time, diff float64, in int) bool {
	held := c.ackRate >= resumeRateHeld*c.roundAckRate
	c.roundAckRate = c.ackRate
	if diff > 0 || in+fullWindowSlack*c.mss < c.cwnd || !held || now.Sub(c.lastDecrease) < 2*c.p.RTT.Min() {
		c.quiet = 0
		return false
	}
	c.quiet++
	if c.p.SendRate > 0 && c.ackRate >= reprobeBelow*float64(c.p.SendRate)/8 {
		return false
	}
	// Told a rate, and far below what the link carried before, one round
	// suffices: a fade has ended. Growing beyond the best rate seen
	// needs the evidence of quietRounds.
	// Each resume that found nothing beyond the best rate seen doubles
	// the evidence the next one needs (resumeFound), unless the link
	// delivers far less than it did (a fade) and the last resume did not
	// find the link shared.
	need := quietRounds << c.futile
	if c.ackRate < belowPeak*c.peakRate && !c.shared {
		need = quietRounds
		if c.p.SendRate > 0 {
			need = 1
		}
	}
	if c.cr.cause == RetreatRTT && c.futile == 0 {
		// Careful resume retreated on the RTT alone: a quiet round
		// says the rate the path carried is still there.
		need = 1
	}
	if c.quiet < need {
		return false
	}
	c.ss, c.resumed, c.quiet, c.ssthresh = true, true, 0, maxWindow
	c.resumePeak, c.resumeRate = c.peakRate, c.ackRate
	return true
}

// resumeFound ends a resumed slow start: if the link delivered no more
// than resumeGain of the best rate seen before it, the probe was futile
// (a link with random loss whose window losses keep below the pipe, a
// configured rate above the link's) and the next needs twice the quiet
// rounds, up to maxFutile doublings; one that found more resets that.
// It also decides whether the link is shared (Hybrid.shared): the
// delivery rate rose by more than sharedGain but stayed below belowPeak of
// the best seen. A fade that goes on leaves the rate where it was; one
// that ended gives back the best rate.
func (c *Hybrid) resumeFound() {
	if !c.resumed {
		return
	}
	if c.peakRate > resumeGain*c.resumePeak {
		c.futile = 0
	} else {
		c.futile = min(c.futile+1, maxFutile)
	}
	c.shared, c.judge = c.tookShare(c.ackRate), sharedJudgeRounds
}

// tookShare reports whether a resume that brought the delivery rate to
// rate took it from another flow: it rose by more than sharedGain but not
// to belowPeak of the best seen.
func (c *Hybrid) tookShare(rate float64) bool {
	return rate > sharedGain*c.resumeRate && rate < belowPeak*c.peakRate
}

// inFade reports whether, told a rate, the link delivers far below the
// best rate seen and no resume found it shared: a fade of the link itself
// as one sender sees it.
func (c *Hybrid) inFade() bool {
	return c.p.SendRate > 0 && !c.shared && c.ackRate < belowPeak*c.peakRate
}

// decrease sets the window to w (clamped) at now and remembers when it
// shrank.
func (c *Hybrid) decrease(now time.Time, w float64) {
	if n := c.clamp(w); n < c.cwnd {
		c.cwnd, c.lastDecrease = n, now
	}
}

// maxPipe is the window the best delivery rate of the last rateRounds
// rounds needs: that rate times BaseRTT plus the RTT noise.
func (c *Hybrid) maxPipe() float64 {
	return c.bestRate() * (c.p.RTT.Min() + c.p.RTTNoise).Seconds()
}

// bestRate is the best delivery rate of the last rateRounds rounds.
func (c *Hybrid) bestRate() float64 { return slices.Max(c.rates[:]) }

// OnCongestionEvent implements Controller. A congestion loss means the
// queue overflowed: the window drops to what the pipe holds by the latest
// delay measure (draining the queue without emptying the pipe), and by at
// least 1 - hybridLossFactor; while application-limited, to no less than
// the link's pipe (appLimited).
func (c *Hybrid) OnCongestionEvent(now time.Time, ev LossEvent) {
	c.lossFree = 0
	if ev.Cause == CauseCorruption {
		c.roundLost += ev.LostBytes
	}
	if ev.Cause != CauseCongestion {
		return
	}
	if ev.Persistent {
		// The path may have changed: start over, slow start up to half
		// the old window.
		c.cr.retreat(now, 0, RetreatPersistent)
		c.ssthresh = max(c.cwnd/2, minWindowPackets*c.mss)
		c.cwnd, c.ss, c.resumed, c.lastDecrease = minWindowPackets*c.mss, true, false, now
		c.rates, c.ackRate, c.peakRate = [rateRounds]float64{}, 0, 0 // pace the new slow start from scratch
		c.comp = compete{}
		c.recoveryStart, c.inRecovery = now, true
		return
	}
	if c.p.SendRate > 0 && c.ackRate < belowPeak*c.peakRate {
		c.fadeLoss = true
	}
	if c.inRecovery && !ev.LargestSentAt.After(c.recoveryStart) {
		return
	}
	c.recoveryStart, c.inRecovery = now, true
	w := float64(c.cwnd) * hybridLossFactor
	if rtt := c.r.recentMinRTT(now, c.p.RTT.Smoothed()/8, 1); rtt > 0 && !c.comp.on {
		w = min(w, float64(c.target(now, ev.PriorInFlight, rtt)))
	}
	c.decrease(now, c.keepAppPipe(w, ev.PriorInFlight))
	c.cr.retreat(now, c.ackRate, RetreatLoss)
	if c.ss {
		c.resumeFound()
	}
	c.ss, c.resumed = false, false
}

// PacingRate implements Controller. Told a rate, slow start runs at it
// (the association's pacer). Otherwise, and when slow start resumed, the
// first flight goes out as one burst (its ACKs time the bottleneck), then
// the rate is twice the recent delivery rate, within the bounds the
// bottleneck's estimated rate sets (a jump to it, capacityOvershoot), so
// it at most doubles per round trip and the delay signal arrives before
// the queue has grown by a bandwidth-delay product.
func (c *Hybrid) PacingRate() float64 {
	r := pacing(c.p.RTT, c.cwnd, c.ss)
	if !c.ss {
		// The window per the freshest round trip: the smoothed one
		// still remembers a queue that has drained (after a capacity
		// drop, seconds of it), and pacing by it would leave the window
		// unused and the link idle.
		if m := c.r.currentMinRTT(); m > 0 && m < c.p.RTT.Smoothed() {
			r = 1.25 * float64(c.cwnd) / m.Seconds()
		}
		if c.cr.retreatRate > 0 {
			r = max(r, 1.25*c.cr.retreatRate)
		}
		if c.drainRate > 0 && c.r.count <= c.drainRound+2 && c.inFade() {
			r = max(r, c.drainRate)
		}
		if b := c.bestRate(); c.lowDelay && b > 0 && c.lowDelayNoise() < c.p.RTTNoise {
			// Not beyond the best delivery rate, but for one round in
			// lowDelayProbe, which may go lowDelayProbeGain beyond it.
			// Not where the hosts' delays vary by the RTT noise or
			// more: a sender that lost its turn for that long could
			// not catch up, and the link would idle with its queue
			// gone.
			g := 1.0
			if c.r.count%lowDelayProbe == 0 {
				g = lowDelayProbeGain
			}
			r = min(r, g*b*c.wireShare())
		}
		return r
	}
	if c.p.SendRate > 0 && !c.resumed {
		return r
	}
	switch c.cr.phase {
	case ResumeUnvalidated:
		// A share of the saved rate, paced over the round trip.
		return c.cr.rate
	case ResumeValidating:
		// The jump arrived at its rate without a queue: this round runs
		// at the saved rate, which the delay signal checks as it checks
		// any slow start round.
		return c.cr.saved.Rate
	}
	if c.firstFlight() || c.trainBurst > 0 && c.capa.estimate() == 0 {
		return 0
	}
	// Before a round was measured, the initial window per RTT. The ACKs
	// of the last half round trip tell the rate sent a round trip ago, so
	// twice it doubles the rate every round trip.
	dr := max(float64(c.initialWindow())/c.p.RTT.Smoothed().Seconds(), c.ackRate, c.bestRate())
	r = min(r, 2*dr)
	switch est := c.capa.estimate() * c.wireShare(); {
	case c.resumed && !c.shared && (c.fadeLoss || c.cr.cause == RetreatRTT):
		// A fade overflowed the queue (a modem's of less than the
		// best rate's bandwidth-delay product): the best rate seen is
		// not there, and a round trip of it into that queue costs a
		// loss episode per resume. Double the delivery rate per round
		// trip, as an untold start does. So too after careful resume
		// retreated on the RTT alone (the jump arrived at its rate
		// with no queue: a loaded host's stall, another route): the
		// best rate seen is the jump's third of the saved one, and
		// growing by a quarter of it per round trip took 7 round trips
		// back to a rate the path had all along.
		r = min(r, 2*max(c.ackRate, float64(c.initialWindow())/c.p.RTT.Smoothed().Seconds()))
	case c.resumed:
		// The link carried that much before (a fade has ended, a
		// competitor left): go straight back to it, and beyond it
		// carefully.
		r = min(max(r, c.peakRate), capacityOvershoot*max(c.peakRate, dr))
	case est > 0 && c.ackRate > capacityBeaten*c.capa.estimate():
		r = min(r, capacityRegrowth*dr)
	case est > 0:
		r = min(max(r, est), capacityOvershoot*max(est, dr))
	}
	return r
}

// flightSample reports whether ev's RTT sample is of a packet of the timed
// flight (told no rate): a burst of one initial window, whose own queue at
// the bottleneck and whose ACKs' queue on a thin return link its samples
// carry. Such a queue says nothing of the rate the link has beyond the
// flight, and the cut it caused left the window at the flight's size:
// through the binary (20M/64k told nothing, load 2-3) the flight's ACKs
// and the receiver's window updates queued 70-210 ms on the 64 kbit/s
// return link, slow start ended 1.1 s after connect() at a window of
// 45-65 kB (the pipe: 1.5 MB), and the link took 22-33 round trips to
// 90% in half the runs. The next round's samples judge the queue.
func (c *Hybrid) flightSample(ev AckEvent) bool {
	end := c.capa.flightEnd
	if c.trainBurstEnd.After(end) {
		// After a path train, the data burst that followed it too.
		end = c.trainBurstEnd
	}
	return c.p.SendRate == 0 && !c.resumed && !c.flightAt.IsZero() &&
		!ev.LargestSentAt.Before(c.flightAt) && !ev.LargestSentAt.After(end)
}

// inTrainBurst reports whether ev acknowledges a packet of the data burst
// that followed a path train before its ACKs came (trainBurst): sent
// unmarked, its ACKs go as the receiver's policy has them, one every
// few packets, and on a thin return link (64 kbit/s) they queue there;
// timed across ACK packets they read as a fraction of the link (20M/64k:
// 9 of 20 Mbit/s for a round trip). The train timed the link.
func (c *Hybrid) inTrainBurst(ev AckEvent) bool {
	return !c.trainBurstEnd.IsZero() && ev.LargestSentAt.After(c.capa.flightEnd) && !ev.LargestSentAt.After(c.trainBurstEnd)
}

// firstFlight reports whether the next packet belongs to the first flight
// of a sender told no rate: no estimate of the bottleneck yet and less
// than an initial window of full-size packets sent. It goes out as one
// burst so that its ACKs time the bottleneck (capacity); keep-alives
// before it are too small to.
func (c *Hybrid) firstFlight() bool {
	return c.capa.estimate() == 0 && c.sentFull < c.flightSize()
}

// flightSize is the size of the timed flight: the initial window, or
// twice the last flight once it arrived too fast to time (retime).
func (c *Hybrid) flightSize() int {
	if c.retimes > 0 || c.flightEnded {
		return c.flight
	}
	return c.initialWindow()
}

// maxRetimes bounds how often a flight is timed again (retime): the
// fourth is eight initial windows (380 kB on GEO, 12 ms at 250 Mbit/s).
const maxRetimes = 3

// retimeFirstGrowth is how much larger than the first flight the first
// one timed again is. A flight that arrived too fast to time fit in one
// of the batches the path hands packets over in, and one twice as long
// still fits one where the batches come more than twice the flight's
// time on the link apart: the LEO page's 20-packet HTML (2.4 ms at 100
// Mbit/s) released every 5 ms arrived in one batch, so did the 41
// packets timed again, and only the third flight, a round trip later,
// was timed (docs/pageload.md). Four times spans at least two such
// batches, and a link that took the first flight within one batch's
// time carries four times it within four.
const retimeFirstGrowth = 4

// retimeSlack is how many of a flight's packets may still be unacknowledged
// (lost on the way) when its ACKs count as in (retime).
const retimeSlack = 2

// retime times the link again, with a burst twice the last flight (four
// times the first: retimeFirstGrowth), once
// ev acknowledges a packet sent after a full timed flight that gave no
// estimate because its packets arrived faster than a train can be timed
// (capacity.fast). A link emulator whose writer woke a millisecond late
// wrote the 1.5 ms first flight of a 250 Mbit/s link in one batch, the
// receiving endpoint stamped it as one burst, and slow start then
// doubled up from the initial window for ten round trips: 13-20 RTTs to
// 90% of the link in some runs of the binary, 6 in others. A flight that
// arrives that fast says the link is fast (or the hosts batch), so a
// burst twice as long queues no more than the one before did at any
// rate the hosts could have hidden; slow start sends as much over the
// next round trip anyway.
//
// It goes once the flight's ACKs are in: with the ACK of a packet sent
// after it, or as soon as all of the flight but retimeSlack packets (lost
// ones) is acknowledged. Waiting for the ACK of a packet sent after the
// flight cost a round trip, as those leave only once the flight's ACKs
// are back: the second flight's estimate came two round trips after the
// first flight's ACKs, not one (250/3, 2.0 s after connect() through the
// binary and in TestUntoldStartupCompressedFlight).
func (c *Hybrid) retime(ev AckEvent) {
	in := ev.LargestSentAt.After(c.capa.flightEnd) || c.flightAcked+retimeSlack*c.mss >= c.sentFull
	if c.capa.estimate() > 0 || !c.capa.fast || c.sentFull < c.flight || c.retimes >= maxRetimes ||
		!in || !c.ss || c.resumed || c.p.SendRate > 0 {
		return
	}
	c.retimes++
	c.flight *= 2
	if c.retimes == 1 {
		c.flight *= retimeFirstGrowth / 2
	}
	c.sentFull, c.flightAt, c.flightEnded = 0, time.Time{}, false
	c.capa = capacity{}
}

// TimingMark implements FlightTimer: told no rate and not jumping to a
// saved path's rate, the first full-size packet of the first flight (it
// opens the burst whose ACKs time the bottleneck). A resume's jump is
// paced and judged on its own ACKs (resume.go): it is not marked.
func (c *Hybrid) TimingMark(now time.Time) bool {
	resuming := c.cr.phase != ResumeOff && c.cr.phase != ResumeRecon || c.cr.jumpsUpFront(now)
	return c.p.SendRate == 0 && !resuming && c.sentFull == 0 && c.firstFlight()
}

// FirstFlight implements FlightTimer: the initial window (flightSize).
func (c *Hybrid) FirstFlight() int { return c.flightSize() }

// wireShare converts a rate of packet bytes, as ACKs measure it, to the
// rate the pacer counts with each packet's wire overhead.
func (c *Hybrid) wireShare() float64 {
	return float64(c.mss+c.p.WireOverhead) / float64(c.mss)
}

// appGrowing reports whether an application-limited window is the
// application's own growth (QUIC's slow start through a repaired flow)
// rather than the pacer's or a fade's: told a rate (the pacer let the
// window out at it from the first round), past the first round, not in
// a resumed slow start, not beside another site's flows, and delivering
// near the best rate seen (a fade delivers far below it), over the last
// half round trip or the last round: a sender of bursts a round trip
// apart delivers over half a round trip at a fraction of its round's
// rate.
func (c *Hybrid) appGrowing() bool {
	return c.p.SendRate > 0 && !c.resumed && !c.shared && c.peakRate > 0 && max(c.ackRate, c.r.lastRate) >= belowPeak*c.peakRate
}

// keepAppPipe is the window w a cut leaves, with in bytes in flight: while
// application-limited (appLimited), no less than the link's pipe (or the
// window, if smaller). The delivery rate the cut's target measured then
// is the application's, not the link's: as BBR treats such samples, it
// may not lower the estimate of the pipe. Cut to it on a loss, the window
// of a QUIC flow repaired over GEO (docs/quic.md) fell to 82 kB at
// 10 Mbit/s and grew back by a tenth every other round trip once the load
// rose: 32.9 s for a download of about 10. Cut to it on the delay a loaded
// host adds to the ACKs (a queue of a few packets is 10 ms at a tenth of
// the link's rate), to 262 kB in QUIC's slow start: the association then
// held QUIC to 4 Mbit/s for seconds. If others fill the link, the delay
// signal cuts the window to the target once it is in use.
func (c *Hybrid) keepAppPipe(w float64, in int) float64 {
	if c.appLimited(in) {
		w = max(w, min(float64(c.cwnd), c.linkPipe()))
	}
	return w
}

// appUnderPipe reports whether the application, not the link, bounds
// what is in flight while it grows (appGrowing): it is application
// limited (appLimited), or the most in flight over this round and the
// last (and in) left the window unfilled and is below the told link's
// pipe. A window cut below the pipe and full is the controller's own
// limit (beside a competitor's queue), not the application's. A sender
// that grows as QUIC's slow start does (bursts a round trip apart,
// doubling) through a repaired flow has a few hundred kB in flight of a
// 750 kB pipe at 10 Mbit/s over 600 ms, more than half the window, while
// a loaded host's late ACKs read as a queue of several packets: cut to
// the rate of a quarter round trip of its bursts, the association held
// QUIC under the link for seconds (docs/quic.md).
func (c *Hybrid) appUnderPipe(in int) bool {
	most := max(in, c.r.maxIn, c.r.lastMaxIn)
	return c.appLimited(in) || most+fullWindowSlack*c.mss < c.cwnd && float64(most) < c.linkPipe()
}

// appLimited reports whether the application, not the controller, held
// the sender back: the most bytes in flight of this round and the last
// (and in) used less than half the window, and the delivery rate was
// below half the pacing rate. A flow held by the pacer (untold slow start
// with a window far beyond it) delivers at half its pacing rate or more.
func (c *Hybrid) appLimited(in int) bool {
	return 2*max(in, c.r.maxIn, c.r.lastMaxIn) < c.cwnd && 2*c.ackRate < c.PacingRate()
}

// LinkRate implements LinkRater.
func (c *Hybrid) LinkRate() float64 { return c.linkRate() }
