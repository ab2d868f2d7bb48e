package cc

// This file tests careful resume in hybrid on a virtual path: a jump
// whose path kept its rate is confirmed, one whose path fell to a fifth
// retreats within a quarter of a round trip of the jump's first ACK, a
// sender with less to send than the jump, or one that stalls, is not
// taken for a changed path.

import (
	"testing"
	"time"
)

// resumePath is a bottleneck of rate bytes/s with an unbounded queue and
// a base RTT, driven by a controller: packets of mss bytes leave when the
// window and the pacer allow (and the application has them), queue at the
// bottleneck and are acknowledged one by one.
type resumePath struct {
	c    *Hybrid
	rate float64
	base time.Duration
	// appRate, if set, is the rate the application offers (bytes/s).
	appRate float64
	// stallFirst stalls the receiver for this long from the first
	// packet's arrival: the packets that arrive meanwhile are
	// acknowledged at its end by one ACK, whose RTT sample (its largest
	// packet's) holds the stall; the ACKs after it are the path's.
	stallFirst time.Duration
	stallEnd   time.Time // when the receiver's stall ends (zero: none)

	now      time.Time
	nextSend time.Time
	linkFree time.Time // when the bottleneck has sent all it holds
	inFlight int
	acks     []pendingAck
	maxQueue time.Duration // the longest queueing delay seen
	// firstAck is when the first ACK arrived, retreatAt when the
	// controller retreated (zero: not yet).
	firstAck, retreatAt time.Time
}

type pendingAck struct {
	at, sent time.Time
	rtt      time.Duration
	noSample bool // a later packet's ACK took the sample (stallFirst)
}

func newResumePath(saved PathState, rate float64, base time.Duration) *resumePath {
	c := NewHybrid(Params{MaxDatagramSize: mss, RTT: NewRTTStats(base), Resume: &Resume{Saved: saved, RTT: base}})
	return &resumePath{c: c, rate: rate, base: base, now: t0, nextSend: t0, linkFree: t0}
}

// run advances the path to end in steps of at most a millisecond.
func (p *resumePath) run(end time.Time) {
	perPacket := time.Duration(float64(mss) / p.rate * float64(time.Second))
	step := min(perPacket, time.Millisecond)
	for ; p.now.Before(end); p.now = p.now.Add(step) {
		for len(p.acks) > 0 && !p.acks[0].at.After(p.now) {
			a := p.acks[0]
			p.acks = p.acks[1:]
			prior := p.inFlight
			p.inFlight -= mss
			if !a.noSample {
				p.c.p.RTT.Update(a.rtt, 0)
			}
			if p.firstAck.IsZero() {
				p.firstAck = p.now
			}
			p.c.OnAck(p.now, AckEvent{AckedBytes: mss, PriorInFlight: prior, LargestSentAt: a.sent, RTTUpdated: !a.noSample, RTT: a.rtt})
			if p.retreatAt.IsZero() && p.c.ResumePhase() == ResumeRetreated {
				p.retreatAt = p.now
			}
		}
		for !p.now.Before(p.nextSend) && p.inFlight+mss <= p.c.Window() {
			p.c.OnPacketSent(p.now, mss, p.inFlight)
			p.inFlight += mss
			depart := p.linkFree
			if p.now.After(depart) {
				depart = p.now
			}
			depart = depart.Add(perPacket)
			p.linkFree = depart
			p.maxQueue = max(p.maxQueue, depart.Sub(p.now)-perPacket)
			rtt := depart.Sub(p.now) + p.base
			if recv := p.now.Add(rtt - p.base/2); p.stallFirst > 0 {
				if p.stallEnd.IsZero() {
					p.stallEnd = recv.Add(p.stallFirst)
				}
				if recv.Before(p.stallEnd) {
					for i := range p.acks {
						p.acks[i].noSample = true
					}
					rtt = p.stallEnd.Add(p.base / 2).Sub(p.now)
				}
			}
			p.addAck(pendingAck{at: p.now.Add(rtt), sent: p.now, rtt: rtt})
			pace := p.c.PacingRate()
			if p.appRate > 0 && (pace <= 0 || p.appRate < pace) {
				pace = p.appRate
			}
			if pace > 0 {
				p.nextSend = p.nextSend.Add(time.Duration(float64(mss) / pace * float64(time.Second)))
				if p.nextSend.Before(p.now) {
					p.nextSend = p.now
				}
				break
			}
		}
	}
}

// addAck queues a in the order of arrival.
func (p *resumePath) addAck(a pendingAck) {
	i := len(p.acks)
	for i > 0 && p.acks[i-1].at.After(a.at) {
		i--
	}
	p.acks = append(p.acks, pendingAck{})
	copy(p.acks[i+1:], p.acks[i:])
	p.acks[i] = a
}

// savedGEO is a path saved at 1.2 MB/s (about 10 Mbit/s), 600 ms.
func savedGEO() PathState {
	return PathState{Rate: 1.2e6, MinRTT: 600 * time.Millisecond, At: t0}
}

func TestCarefulResumeRetreatsOnTheJumpsFirstACKs(t *testing.T) {
	// The path fell to a fifth since it was saved. The jump's ACKs come
	// back spaced by the new bottleneck: the retreat comes within a
	// quarter of the RTT (and a few packets) of the first of them, and the
	// queue the jump built stays below the new path's bandwidth-delay
	// product (a modem queue of that size drops nothing).
	saved := savedGEO()
	rate := saved.Rate / 5
	p := newResumePath(saved, rate, saved.MinRTT)
	p.run(t0.Add(4 * saved.MinRTT))
	if p.retreatAt.IsZero() {
		t.Fatalf("no retreat on a path at a fifth of the saved rate (phase %v)", p.c.ResumePhase())
	}
	quarter := saved.MinRTT / 4
	late := p.retreatAt.Sub(p.firstAck)
	t.Logf("retreat on %q %v after the jump's first ACK, the jump queued %v at most", p.c.RetreatCause(), late, p.maxQueue)
	if cause := p.c.RetreatCause(); cause != RetreatRTT && cause != RetreatArrivals && cause != RetreatQueue {
		t.Errorf("retreated on %q, want the jump's RTT, queue or arrivals", cause)
	}
	if late > quarter+20*time.Millisecond {
		t.Errorf("retreat %v after the jump's first ACK, want within %v", late, quarter)
	}
	// The new BDP, as queueing delay at the new rate, is the base RTT.
	if p.maxQueue >= saved.MinRTT {
		t.Errorf("the jump queued %v at the bottleneck, want less than the new path's BDP (%v)", p.maxQueue, saved.MinRTT)
	}
	if w, newBDP := p.c.Window(), rate*saved.MinRTT.Seconds(); float64(w) > 1.5*newBDP {
		t.Errorf("window %d after the retreat, the new BDP is %.0f", w, newBDP)
	}
}

func TestCarefulResumeHoldsTheJumpWindow(t *testing.T) {
	// Until the jump is judged its window is the resume's: ACKs of the
	// first packets must not grow it by slow start (at 600 ms hybrid's
	// slow start grows by many times the bytes acknowledged).
	saved := savedGEO()
	p := newResumePath(saved, saved.Rate/5, saved.MinRTT)
	p.run(t0.Add(saved.MinRTT + 30*time.Millisecond))
	if p.firstAck.IsZero() {
		t.Fatal("no ACK within the first round trip")
	}
	if jump := resumeJumpShare * saved.Rate * saved.MinRTT.Seconds(); float64(p.c.Window()) > 1.01*jump {
		t.Errorf("window %d while the jump is judged, the jump's is %.0f", p.c.Window(), jump)
	}
}

func TestCarefulResumeConfirmsAnUnchangedPath(t *testing.T) {
	saved := savedGEO()
	p := newResumePath(saved, saved.Rate, saved.MinRTT)
	p.run(t0.Add(4 * saved.MinRTT))
	if !p.retreatAt.IsZero() {
		t.Fatalf("retreated %v after the first ACK on the path as saved", p.retreatAt.Sub(p.firstAck))
	}
	if ph := p.c.ResumePhase(); ph != resumeNormalAfter {
		t.Errorf("phase %v after four round trips, want validated", ph)
	}
	if w, bdp := p.c.Window(), saved.Rate*saved.MinRTT.Seconds(); float64(w) < 0.9*bdp {
		t.Errorf("window %d after validating, the path's BDP is %.0f", w, bdp)
	}
}

func TestCarefulResumeIgnoresASenderWithLess(t *testing.T) {
	// The application offers a tenth of the saved rate on the path as
	// saved: its ACKs arrive slower than the jump's rate, with far less
	// than the jump in flight, and say nothing of the path.
	saved := savedGEO()
	p := newResumePath(saved, saved.Rate, saved.MinRTT)
	p.appRate = saved.Rate / 10
	p.run(t0.Add(3 * saved.MinRTT))
	if !p.retreatAt.IsZero() {
		t.Errorf("retreated on the ACKs of a sender with less to send than the jump")
	}
}

func TestCarefulResumeJudgesArrivalsAgainstSends(t *testing.T) {
	// The jump's packets arrive at 60% of its rate. Sent evenly at that
	// rate, the bottleneck spread them: retreat. Sent that way because
	// the sender stalled 40 ms of every 100 ms (a loaded host), they
	// arrive as they left: the path is not judged slower for it.
	saved := savedGEO()
	for _, tc := range []struct {
		name    string
		stalls  bool
		retreat bool
	}{{"slower bottleneck", false, true}, {"sender stalls", true, false}} {
		r := careful{phase: ResumeUnvalidated, saved: saved, rate: resumeJumpShare * saved.Rate, jump: t0}
		r.window = r.rate * saved.MinRTT.Seconds()
		gap := time.Duration(float64(2*mss) / r.rate * float64(time.Second)) // two packets an ACK
		sent, arrived, got := t0, t0.Add(saved.MinRTT/2), false
		for i := 0; i < 200 && !got; i++ {
			if tc.stalls {
				sent = sent.Add(gap)
				if sent.Sub(t0)%(100*time.Millisecond) < 40*time.Millisecond {
					sent = sent.Add(40 * time.Millisecond)
				}
				arrived = sent.Add(saved.MinRTT / 2)
			} else {
				sent, arrived = sent.Add(gap), arrived.Add(gap*10/6)
			}
			ack := arrived.Add(saved.MinRTT / 2)
			got = r.judge(ack, AckEvent{AckedBytes: 2 * mss, PriorInFlight: int(r.window), LargestSentAt: sent, RTTUpdated: true, RTT: ack.Sub(sent)}, mss)
		}
		if got != tc.retreat {
			t.Errorf("%s: judged slower %v, want %v", tc.name, got, tc.retreat)
		}
	}
}

func TestCarefulResumeWaitsOutALateHandshakeRTT(t *testing.T) {
	// The responder's handshake RTT ran until the initiator's first
	// packet, which waited 2 s for something to send: the first ACK's
	// sample confirms the path instead, and the jump follows it.
	saved := savedGEO()
	c := NewHybrid(Params{MaxDatagramSize: mss, RTT: NewRTTStats(saved.MinRTT), Resume: &Resume{Saved: saved, RTT: saved.MinRTT + 2*time.Second}})
	c.OnPacketSent(t0, mss, 0)
	if ph := c.ResumePhase(); ph != ResumeRecon {
		t.Fatalf("phase %v after a handshake RTT 2 s over the path's, want reconnaissance", ph)
	}
	c.OnAck(t0.Add(saved.MinRTT), AckEvent{AckedBytes: mss, PriorInFlight: mss, LargestSentAt: t0, RTTUpdated: true, RTT: saved.MinRTT})
	if ph, jump := c.ResumePhase(), resumeJumpShare*saved.Rate*saved.MinRTT.Seconds(); ph != ResumeUnvalidated || float64(c.Window()) < 0.99*jump {
		t.Errorf("after the first ACK's sample: phase %v, window %d, want unvalidated and the jump's %.0f", ph, c.Window(), jump)
	}
	// The first two ACKs' samples far off the saved RTT still refuse it
	// (one alone may be a stalled host's: resumeDecline).
	c = NewHybrid(Params{MaxDatagramSize: mss, RTT: NewRTTStats(saved.MinRTT), Resume: &Resume{Saved: saved, RTT: 5 * saved.MinRTT}})
	c.OnPacketSent(t0, mss, 0)
	c.OnPacketSent(t0, mss, mss)
	c.OnAck(t0.Add(5*saved.MinRTT), AckEvent{AckedBytes: mss, PriorInFlight: 2 * mss, LargestSentAt: t0, RTTUpdated: true, RTT: 5 * saved.MinRTT})
	if ph := c.ResumePhase(); ph != ResumeRecon {
		t.Errorf("phase %v after one ACK's sample 5x the saved RTT, want reconnaissance", ph)
	}
	c.OnAck(t0.Add(5*saved.MinRTT), AckEvent{AckedBytes: mss, PriorInFlight: mss, LargestSentAt: t0, RTTUpdated: true, RTT: 5 * saved.MinRTT})
	if ph := c.ResumePhase(); ph != ResumeOff {
		t.Errorf("phase %v after two ACKs' samples 5x the saved RTT, want off", ph)
	}
}

func TestCarefulResumeOutlastsOneStalledSample(t *testing.T) {
	// A LEO path as saved, but the host stalled 100 ms over the
	// handshake and the first ACK: both samples are over twice the
	// saved RTT, the next ACK's is the path's. One delayed sample is not
	// a changed path: the resume jumps on the next one and validates.
	saved := PathState{Rate: 2.5e6, MinRTT: 40 * time.Millisecond, At: t0}
	p := newResumePath(saved, saved.Rate, saved.MinRTT)
	p.c.cr.rtt = saved.MinRTT + 100*time.Millisecond
	p.stallFirst = 100 * time.Millisecond
	p.run(t0.Add(saved.MinRTT + 150*time.Millisecond))
	if ph := p.c.ResumePhase(); ph == ResumeOff || ph == ResumeRecon {
		t.Fatalf("phase %v after one stalled sample and the path's, want a jump", ph)
	}
	p.run(t0.Add(time.Second))
	if ph := p.c.ResumePhase(); ph != resumeNormalAfter {
		t.Errorf("phase %v after a second, want validated", ph)
	}
	if w, bdp := p.c.Window(), saved.Rate*saved.MinRTT.Seconds(); float64(w) < 0.9*bdp {
		t.Errorf("window %d after validating, the path's BDP is %.0f", w, bdp)
	}
}

func TestCarefulResumeDeclinesAPathWhoseRTTDoubled(t *testing.T) {
	// The saved LEO path's RTT went from 40 ms to 100 ms (another
	// route): every sample says so, and the resume is declined by the
	// second ACK, without a jump.
	saved := PathState{Rate: 2.5e6, MinRTT: 40 * time.Millisecond, At: t0}
	base := 100 * time.Millisecond
	p := newResumePath(saved, saved.Rate, base)
	p.c.cr.rtt = base
	iw := p.c.Window()
	var off time.Time
	for end := t0.Add(3 * base); p.now.Before(end); {
		p.run(p.now.Add(time.Millisecond))
		if w := p.c.Window(); p.c.ResumePhase() == ResumeRecon && w > 2*iw {
			t.Fatalf("window %d in reconnaissance, the initial window is %d: it jumped", w, iw)
		}
		if off.IsZero() && p.c.ResumePhase() == ResumeOff {
			off = p.now
		}
	}
	if off.IsZero() {
		t.Fatalf("phase %v after three round trips of a path at 2.5x the saved RTT, want off", p.c.ResumePhase())
	}
	if d := off.Sub(p.firstAck); d > 5*time.Millisecond {
		t.Errorf("declined %v after the first ACK, want by the second ACK (a few ms)", d)
	}
}
