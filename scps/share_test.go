package scps

// This file owns the shared-bottleneck harness: several associations (two
// sites behind one satellite beam, or a tunnel beside a loss-based flow)
// whose packets cross the same drop-tail queue and link each way, in
// virtual time, with the per-flow goodput, Jain's fairness index and the
// time a late flow takes to reach its share (docs/adaptation.md: sharing
// one beam).

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"
)

// shareFlow is one association pair through the shared link: a bulk
// download from its sender to its receiver.
type shareFlow struct {
	name  string
	cfg   Config        // both ends (rates are the link's, as told)
	start time.Duration // when its stream opens
	a     [2]*Association
	apps  [2]*simApp
	// series: stream bytes that arrived at the receiver, sampled.
	series []sample
}

// netSim carries the packets of every flow's sender over one forward
// direction and every receiver's over one return direction.
type netSim struct {
	t     testing.TB
	now   time.Duration
	flows []*shareFlow
	dir   [2]*simDir // [0]: senders to receivers, [1]: back
	q     deliveryHeap
	seq   uint64
	rng   *rand.Rand
	buf   []byte
	steps int
}

func newNetSim(t testing.TB, seed uint64, fwd, rev linkParams, flows []*shareFlow) *netSim {
	fwd.Overhead, rev.Overhead = tunnelOverhead, tunnelOverhead
	return &netSim{t: t, flows: flows, dir: [2]*simDir{{p: fwd}, {p: rev}},
		rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), buf: make([]byte, 65536)}
}

func (n *netSim) clock() time.Time { return simEpoch.Add(n.now) }

// open creates flow f's associations and starts its download.
func (n *netSim) open(f *shareFlow) {
	ca, cb := f.cfg, f.cfg
	ca.EvenStreams, cb.EvenStreams = true, false
	cb.SendRate, cb.RecvRate = f.cfg.RecvRate, f.cfg.SendRate
	for i, c := range []Config{ca, cb} {
		a, err := NewAssociation(c, n.clock())
		if err != nil {
			n.t.Fatalf("%s: NewAssociation: %v", f.name, err)
		}
		f.a[i] = a
		f.apps[i] = newSimApp(n.t, i, a)
		f.apps[i].now = func() time.Duration { return n.now }
	}
	f.apps[1].onAccept = func(uint64, []byte) *appStream { return &appStream{expect: -1, resetAfter: -1} }
	f.apps[0].open("stream-0", 1<<40, 0)
}

// step runs every flow's pending work, then advances to the next event.
func (n *netSim) step(limit time.Duration) {
	next := limit
	for k, f := range n.flows {
		if f.a[0] == nil {
			if f.start <= n.now {
				n.open(f)
			} else {
				next = min(next, f.start)
				continue
			}
		}
		for side := 0; side < 2; side++ {
			f.apps[side].pump()
			for {
				m, pn := f.a[side].Send(n.clock(), n.buf)
				if m == 0 {
					break
				}
				n.transmit(2*k+side, pn, n.buf[:m])
			}
			f.apps[side].pump()
			if d := f.a[side].Deadline(); !d.IsZero() {
				next = min(next, max(d.Sub(simEpoch), n.now))
			}
		}
	}
	if len(n.q) > 0 {
		next = min(next, n.q[0].at)
	}
	if next == n.now {
		if n.steps++; n.steps > 10000 {
			n.t.Fatalf("simulation spins at %v", n.now)
		}
	} else {
		n.steps = 0
	}
	n.now = next
	for len(n.q) > 0 && n.q[0].at <= n.now {
		d := heap.Pop(&n.q).(delivery)
		_ = n.flows[d.to/2].a[d.to%2].Receive(n.clock(), d.pn, d.data)
	}
	for _, f := range n.flows {
		for side := 0; side < 2 && f.a[0] != nil; side++ {
			if d := f.a[side].Deadline(); !d.IsZero() && !d.After(n.clock()) {
				f.a[side].Tick(n.clock())
			}
		}
	}
}

// transmit puts packet pn of association from (flow from/2, side from%2)
// on the shared link of its direction.
func (n *netSim) transmit(from int, pn uint64, pkt []byte) {
	d := n.dir[from%2]
	d.sent++
	d.bytes += uint64(len(pkt))
	at, copies := d.carry(n.now, n.rng, len(pkt))
	for i := 0; i < copies; i++ {
		n.seq++
		heap.Push(&n.q, delivery{at: at, seq: n.seq, to: from ^ 1, pn: pn, data: append([]byte(nil), pkt...)})
	}
}

// run advances to dur, sampling each flow's arrived bytes every interval.
func (n *netSim) run(dur, interval time.Duration) {
	for next := interval; next <= dur; next += interval {
		for n.now < next {
			n.step(next)
		}
		for _, f := range n.flows {
			var got uint64
			if f.a[1] != nil {
				got = f.a[1].streams.Flow.Recvd
			}
			f.series = append(f.series, sample{at: n.now, bytes: got})
			if os.Getenv("SCPS_DBG") != "" && f.a[0] != nil && int(n.now/interval)%5 == 0 {
				if h, ok := f.a[0].sent.Controller().(interface{ DebugString() string }); ok {
					st := f.a[0].Stats()
					n.t.Logf("%5.1f %s %s in=%dk rtt=%v cong=%d corr=%d", n.now.Seconds(), f.name, h.DebugString(), st.BytesInFlight/1000, st.LatestRTT.Round(time.Millisecond), st.LossEventsCongestion, st.LossEventsCorruption)
				}
			}
		}
	}
}

// rate is flow f's goodput in bit/s between two sampled times.
func (f *shareFlow) rate(from, to time.Duration) float64 {
	return result{series: f.series}.rateBetween(from, to)
}

// jain is Jain's fairness index of rates: 1 when all are equal, 1/n when
// one takes everything.
func jain(rates []float64) float64 {
	var sum, sq float64
	for _, r := range rates {
		sum += r
		sq += r * r
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(rates)) * sq)
}

// shareCase is one shared-bottleneck workload.
type shareCase struct {
	name     string
	fwd, rev linkParams
	flows    []*shareFlow
	dur      time.Duration
	from     time.Duration // shares are measured from here (all flows running) to dur
}

// shareResult is what a shared run measured.
type shareResult struct {
	name    string
	flows   []string
	rates   []float64 // bit/s of each flow from the case's from to dur
	limit   float64   // the link's payload limit, bit/s
	jain    float64
	total   float64       // sum of rates / limit
	late    time.Duration // the last-started flow's time from its start to 90% of an equal share over a second (-1: never)
	qdrop   float64       // forward packets dropped by the queue
	lateIdx int
}

// shareFlowConfig is the tunnel geometry with the link told as given
// (rate 0: not told) and big windows, so the controllers are measured.
func shareFlowConfig(mode, loss string, sendRate, recvRate int64, rtt time.Duration) Config {
	cfg := DefaultConfig()
	cfg.MaxPacketSize, cfg.WireOverhead = tunnelPacketSize, tunnelOverhead
	cfg.InitialRTT = rtt
	cfg.Congestion, cfg.Loss = mode, loss
	cfg.SendRate, cfg.RecvRate = sendRate, recvRate
	cfg.StreamWindow, cfg.ConnWindow, cfg.SendBuffer = 64<<20, 128<<20, 64<<20
	return cfg
}

func runShare(t testing.TB, c shareCase, seed uint64) shareResult {
	n := newNetSim(t, seed, c.fwd, c.rev, c.flows)
	interval := 100 * time.Millisecond
	n.run(c.dur, interval)
	res := shareResult{name: c.name, limit: payloadLimit(c.fwd.Rate, c.fwd.Loss), late: -1}
	var latest time.Duration
	for i, f := range c.flows {
		res.flows = append(res.flows, f.name)
		res.rates = append(res.rates, f.rate(c.from, c.dur))
		res.total += res.rates[i]
		if f.start >= latest {
			latest, res.lateIdx = f.start, i
		}
	}
	res.total /= res.limit
	res.jain = jain(res.rates)
	share := res.limit / float64(len(c.flows))
	lf := c.flows[res.lateIdx]
	per := int(time.Second / interval)
	for i := per; i < len(lf.series); i++ {
		if lf.series[i-per].at < lf.start {
			continue
		}
		if lf.rate(lf.series[i-per].at, lf.series[i].at) >= 0.9*share {
			res.late = lf.series[i].at - lf.start
			break
		}
	}
	res.qdrop = float64(n.dir[0].queueDrop) / float64(max(n.dir[0].sent, 1))
	if tr := os.Getenv("SCPS_TRACE"); tr != "" && strings.Contains(c.name, tr) {
		for i := per; i < len(lf.series); i += per {
			var parts []string
			for _, f := range c.flows {
				parts = append(parts, fmt.Sprintf("%s %6.0f", f.name, f.rate(f.series[i-per].at, f.series[i].at)/1e3))
			}
			t.Logf("t=%4.1fs kbit/s: %s", lf.series[i].at.Seconds(), strings.Join(parts, "  "))
		}
	}
	return res
}

func formatShare(rs []shareResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| workload | flows: %% of the payload limit | together %% | Jain | late flow to 90%% of its share (s) | queue-overflow loss %% |\n|---|---|---|---|---|---|\n")
	for _, r := range rs {
		var parts []string
		for i, f := range r.flows {
			parts = append(parts, fmt.Sprintf("%s %.1f", f, 100*r.rates[i]/r.limit))
		}
		late := "never"
		if r.late >= 0 {
			late = fmt.Sprintf("%.1f", r.late.Seconds())
		}
		fmt.Fprintf(&b, "| %s | %s | %.1f | %.3f | %s | %.2f |\n", r.name, strings.Join(parts, ", "), 100*r.total, r.jain, late, 100*r.qdrop)
	}
	return b.String()
}

// shareBeam is the shared beam of docs/adaptation.md: 10/2 Mbit/s, 600 ms, 1% loss
// forward (0.1% back, as GEO), a one-BDP drop-tail queue; two sites'
// associations, the second opening 10 s after the first.
func shareBeam(told bool, mode string) shareCase {
	c := beamCase("beam 10/2M 600ms 1%, two associations", told, mode, 0.01)
	c.rev.Loss = 0.001
	c.flows = append(c.flows, &shareFlow{name: "site2", cfg: c.flows[0].cfg, start: 10 * time.Second})
	c.flows[0].name = "site1"
	c.dur, c.from = 60*time.Second, 20*time.Second
	return c
}

// shareBesideLossBased puts one association beside a loss-based flow
// (NewReno taking every loss for congestion: what kernel TCP does) on the
// same 10/2 Mbit/s 600 ms link, without random loss, so the loss-based
// flow can fill the queue.
func shareBesideLossBased(told bool, mode string) shareCase {
	c := beamCase("beam 10/2M 600ms, tunnel beside a loss-based flow", told, mode, 0)
	c.flows = append(c.flows, &shareFlow{name: "reno", cfg: shareFlowConfig("vj", LossCongestion, 0, 0, 600*time.Millisecond), start: 5 * time.Second})
	c.dur, c.from = 90*time.Second, 30*time.Second
	return c
}

// shareBesideCubic is the bench's share-cubic on BEAM-CLEAN: kernel cubic
// (cubicModel) alone on the 10/2 Mbit/s 600 ms beam without random loss,
// one association opening 10 s later.
func shareBesideCubic(told bool, mode string) shareCase {
	c := beamCase("beam 10/2M 600ms, tunnel 10 s after cubic", told, mode, 0)
	c.flows[0].start = 10 * time.Second
	c.flows = append(c.flows, &shareFlow{name: "cubic", cfg: shareFlowConfig(cubicModelName, LossCongestion, 0, 0, 600*time.Millisecond)})
	c.dur, c.from = 70*time.Second, 30*time.Second
	return c
}

// beamCase is the 10/2 Mbit/s, 600 ms beam with a one-BDP queue and
// forward loss, carrying one tunnel flow running mode, told the rates or
// not.
func beamCase(name string, told bool, mode string, loss float64) shareCase {
	var send, recv int64
	name += ", " + mode
	if told {
		send, recv = 10e6, 2e6
		name += ", told"
	} else {
		name += ", not told"
	}
	return shareCase{name: name,
		fwd:   linkParams{Rate: 10e6, Delay: 300 * time.Millisecond, Loss: loss, QueueBytes: 750_000},
		rev:   linkParams{Rate: 2e6, Delay: 300 * time.Millisecond, QueueBytes: 150_000},
		flows: []*shareFlow{{name: "tunnel", cfg: shareFlowConfig(mode, LossAuto, send, recv, 600*time.Millisecond)}},
	}
}

// TestMeasureShare logs the shared-bottleneck table (SCPS_MATRIX=1;
// SCPS_COND and SCPS_MODES filter as in TestMeasureMatrix; SCPS_SEED
// picks the loss pattern, 1 by default).
func TestMeasureShare(t *testing.T) {
	if !matrixEnabled() {
		t.Skip("set SCPS_MATRIX=1 to measure the shared-bottleneck workloads")
	}
	var rs []shareResult
	for _, m := range measuredModes() {
		if f := os.Getenv("SCPS_MODES"); f != "" && !strings.Contains(","+f+",", ","+m+",") {
			continue
		}
		for _, c := range []shareCase{shareBeam(true, m), shareBeam(false, m), shareBesideLossBased(true, m), shareBesideLossBased(false, m),
			shareBesideCubic(true, m), shareBesideCubic(false, m)} {
			if f := os.Getenv("SCPS_COND"); f != "" && !strings.Contains(c.name, f) {
				continue
			}
			if m == "rate" && c.flows[0].cfg.SendRate == 0 {
				continue
			}
			seed := uint64(1)
			if v := os.Getenv("SCPS_SEED"); v != "" {
				fmt.Sscan(v, &seed)
			}
			rs = append(rs, runShare(t, c, seed))
		}
	}
	t.Logf("\n%s", formatShare(rs))
}

// TestSharesBesideLossBased: hybrid beside a loss-based flow that starts
// 5 s later on the one beam keeps between a third and two
// thirds of the link, told the rates and not; before competition mode it
// kept 1% told and 12% not told.
func TestSharesBesideLossBased(t *testing.T) {
	for _, told := range []bool{true, false} {
		r := runShare(t, shareBesideLossBased(told, "hybrid"), 1)
		t.Logf("\n%s", formatShare([]shareResult{r}))
		for i, f := range r.flows {
			if share := r.rates[i] / r.limit; share < 0.3 || share > 0.7 {
				t.Errorf("%s: %s holds %.1f%% of the link, want a third to two thirds", r.name, f, 100*share)
			}
		}
		if r.total < 0.9 {
			t.Errorf("%s: together %.1f%% of the link", r.name, 100*r.total)
		}
	}
}

// TestTwoSitesFillBeam: two sites' associations on one beam (10/2
// Mbit/s, 600 ms, 1% loss), the second opening 10 s after the first, told
// the beam's rates and not, fill at least 95% of it together, evenly
// (told: Jain >= 0.98 on two loss patterns; not told: >= 0.97 on each of
// four and >= 0.98 on average), and the late one reaches its share within
// 5 s (docs/adaptation.md, "shared beam"). Before resumes noticed a
// shared link (Hybrid.shared) each site took its half share for a fade
// and resumed slow start into the other's queue: told, together 92.5%;
// before shared links grew additively and cut to Vegas' target, not told
// 93.1% together, and told on seed 2 Jain 0.904. Not told, before the
// first flight's timing set the start (a jump to the timed rate), seeds
// 1-4 gave Jain 0.993/0.994/0.957/0.964 and the late site its share after
// 2.6-11.8 s; since, 0.994/0.977/1.000/0.986 and 1.8-2.0 s.
func TestTwoSitesFillBeam(t *testing.T) {
	for _, told := range []bool{true, false} {
		seeds, least := []uint64{1, 2}, 0.98
		if !told {
			seeds, least = []uint64{1, 2, 3, 4}, 0.97
		}
		sum := 0.0
		for _, seed := range seeds {
			r := runShare(t, shareBeam(told, "hybrid"), seed)
			t.Logf("seed %d\n%s", seed, formatShare([]shareResult{r}))
			if r.total < 0.95 {
				t.Errorf("%s, seed %d: together %.1f%% of the beam, want >= 95%%", r.name, seed, 100*r.total)
			}
			if r.jain < least {
				t.Errorf("%s, seed %d: Jain's index %.3f, want >= %.2f", r.name, seed, r.jain, least)
			}
			if r.late < 0 || r.late > 5*time.Second {
				t.Errorf("%s, seed %d: the late site reached its share after %v, want within 5 s", r.name, seed, r.late)
			}
			sum += r.jain
		}
		if mean := sum / float64(len(seeds)); mean < 0.98 {
			t.Errorf("told %v: Jain's index %.3f on average over seeds %v, want >= 0.98", told, mean, seeds)
		}
	}
}
