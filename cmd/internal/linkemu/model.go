package linkemu

// This file owns the link model of one direction, free of I/O and of the
// wall clock: given the arrival time and size of a packet it decides whether
// the packet is dropped (and why) or when it leaves the far end. Times are
// offsets since the emulator started, so tests drive it with a fake clock.
//
// A packet's life: it arrives at the modem; during an outage it is dropped;
// if the bytes still waiting for serialization plus its own exceed the queue
// limit it is dropped (drop-tail); otherwise it is serialized after the
// previous packet at the rate in force (the rate schedule is integrated, so a
// packet that straddles a rate change is sent partly at each rate), then
// propagates for the one-way delay. Loss (random, bit errors, Gilbert-Elliott)
// is drawn for every arriving packet so a seed gives the same pattern for the
// same packet sequence whatever the timing; a lost packet still uses the
// link, as a corrupted frame does. A packet whose serialization ends or whose
// arrival falls in an outage is lost too. A packet the reorder model holds
// back (also drawn for every packet) arrives its extra delay later.

import (
	"math"
	"math/rand/v2"
	"sort"
	"time"
)

// verdict is the model's decision about one packet.
type verdict uint8

const (
	deliver     verdict = iota
	deliverLate         // held back by the reorder model: later packets overtake it
	dropLoss
	dropQueue
	dropOutage
)

// rateCurve is the link rate as a step function of time.
type rateCurve struct {
	steps []RateStep // steps[0].At == 0; At strictly increasing
}

func newRateCurve(base int64, schedule []RateStep) rateCurve {
	steps := []RateStep{{At: 0, Rate: base}}
	for _, s := range schedule {
		if s.At <= 0 {
			steps[0].Rate = s.Rate
			continue
		}
		steps = append(steps, s)
	}
	return rateCurve{steps: steps}
}

// segment returns the index of the step in force at t.
func (c *rateCurve) segment(t time.Duration) int {
	if len(c.steps) == 1 {
		return 0
	}
	return sort.Search(len(c.steps), func(i int) bool { return c.steps[i].At > t }) - 1
}

// maxRate is the highest rate the curve ever reaches (0 if any is unlimited
// and none is finite).
func (c *rateCurve) maxRate() int64 {
	var m int64
	for _, s := range c.steps {
		m = max(m, s.Rate)
	}
	return m
}

// finish returns when serializing bits that start at start completes.
func (c *rateCurve) finish(start time.Duration, bits float64) time.Duration {
	i := c.segment(start)
	t := start
	for {
		r := c.steps[i].Rate
		if r <= 0 {
			return t
		}
		need := time.Duration(math.Round(bits * 1e9 / float64(r)))
		if i+1 == len(c.steps) || t+need <= c.steps[i+1].At {
			return t + need
		}
		end := c.steps[i+1].At
		bits -= float64(end-t) * float64(r) / 1e9
		t = end
		i++
	}
}

// capacityBits returns how many bits the link can serialize in [from, to).
// Unlimited segments count as zero: serialization never extends past the
// start of one, so the caller never asks across them.
func (c *rateCurve) capacityBits(from, to time.Duration) float64 {
	if to <= from {
		return 0
	}
	var bits float64
	for i := c.segment(from); i < len(c.steps) && from < to; i++ {
		end := to
		if i+1 < len(c.steps) && c.steps[i+1].At < to {
			end = c.steps[i+1].At
		}
		bits += float64(end-from) * float64(c.steps[i].Rate) / 1e9
		from = end
	}
	return bits
}

// outageSet is the union of the scheduled and the periodic outages.
type outageSet struct {
	windows []Outage
	every   Periodic
}

// active reports whether the link is down at t.
func (o *outageSet) active(t time.Duration) bool {
	for _, w := range o.windows {
		if t >= w.Start && t < w.Start+w.Duration {
			return true
		}
	}
	if o.every.Every > 0 && t >= o.every.Every {
		return t%o.every.Every < o.every.Duration
	}
	return false
}

// dirModel is one direction of the link.
type dirModel struct {
	curve   rateCurve
	delay   time.Duration
	loss    float64
	logKeep float64 // log(1-BER) per bit; 0 when there are no bit errors
	burst   GilbertElliott
	useGE   bool
	geBad   bool
	limit   float64 // queue limit in bytes
	// queueTime, if set, makes the limit this much time at the rate in
	// force (Dir.QueueTime).
	queueTime time.Duration
	reorder   Reorder
	outages   *outageSet
	rng       *rand.Rand
	lastDep   time.Duration // when the last accepted packet's serialization ends
}

func newDirModel(d Dir, limit int64, outages *outageSet, seed uint64, stream uint64) *dirModel {
	m := &dirModel{
		curve:     newRateCurve(d.Rate, d.RateSchedule),
		delay:     d.Delay,
		loss:      d.Loss,
		limit:     float64(limit),
		queueTime: d.QueueTime,
		reorder:   d.Reorder,
		outages:   outages,
		rng:       rand.New(rand.NewPCG(seed, stream)),
	}
	if d.BER > 0 {
		m.logKeep = math.Log1p(-d.BER)
	}
	if d.Burst != nil {
		m.burst, m.useGE = *d.Burst, true
	}
	return m
}

// lost draws the loss decision for one packet of size bytes. It draws the
// same number of random values for every packet, so a seed reproduces the
// pattern.
func (m *dirModel) lost(size int) bool {
	lost := false
	if m.useGE {
		if m.geBad {
			m.geBad = m.rng.Float64() >= m.burst.R
		} else {
			m.geBad = m.rng.Float64() < m.burst.P
		}
		p := m.burst.LossGood
		if m.geBad {
			p = m.burst.LossBad
		}
		lost = m.rng.Float64() < p || lost
	}
	if m.loss > 0 {
		lost = m.rng.Float64() < m.loss || lost
	}
	if m.logKeep != 0 {
		p := -math.Expm1(float64(8*size) * m.logKeep)
		lost = m.rng.Float64() < p || lost
	}
	return lost
}

// backlog returns the bytes waiting for serialization at now (including the
// unsent part of the packet being serialized).
func (m *dirModel) backlog(now time.Duration) float64 {
	if m.lastDep <= now {
		return 0
	}
	return m.curve.capacityBits(now, m.lastDep) / 8
}

// limitAt is the drop-tail limit in bytes at now: the fixed one, or
// queueTime at the rate in force (at least two full packets, so a slow
// rate still passes one while the next waits).
func (m *dirModel) limitAt(now time.Duration) float64 {
	if m.queueTime <= 0 {
		return m.limit
	}
	r := m.curve.steps[m.curve.segment(now)].Rate
	if r <= 0 {
		return m.limit
	}
	return max(float64(r)/8*m.queueTime.Seconds(), 2*DefaultMTU)
}

// admit decides the fate of a packet of size bytes arriving at now: either
// deliver at the returned time, or a drop verdict.
func (m *dirModel) admit(now time.Duration, size int) (time.Duration, verdict) {
	lost := m.lost(size)
	late := m.reorder.P > 0 && m.rng.Float64() < m.reorder.P
	if m.outages.active(now) {
		return 0, dropOutage
	}
	if m.backlog(now)+float64(size) > m.limitAt(now) {
		return 0, dropQueue
	}
	dep := m.curve.finish(max(now, m.lastDep), float64(8*size))
	m.lastDep = dep
	if lost {
		return 0, dropLoss
	}
	at, v := dep+m.delay, deliver
	if late {
		at, v = at+m.reorder.Delay, deliverLate
	}
	if m.outages.active(dep) || m.outages.active(at) {
		return 0, dropOutage
	}
	return at, v
}
