package linkemu

// Tests of the link model under a fake clock: rate, delay, drop-tail, rate
// schedules, outages, the loss models and seed reproducibility.

import (
	"math"
	"testing"
	"time"
)

func model(t *testing.T, d Dir, limit int64, o *outageSet, seed uint64) *dirModel {
	t.Helper()
	if o == nil {
		o = &outageSet{}
	}
	if limit == 0 {
		limit = 1 << 40
	}
	return newDirModel(d, limit, o, seed, 1)
}

func TestRateSerializesBackToBack(t *testing.T) {
	m := model(t, Dir{Rate: 10_000_000, Delay: 20 * time.Millisecond}, 0, nil, 1)
	// 1250-byte packets take exactly 1 ms at 10 Mbit/s.
	for i := range 100 {
		at, v := m.admit(0, 1250)
		if v != deliver {
			t.Fatalf("packet %d: verdict %d", i, v)
		}
		want := time.Duration(i+1)*time.Millisecond + 20*time.Millisecond
		if at != want {
			t.Fatalf("packet %d delivered at %v, want %v", i, at, want)
		}
	}
	// An idle link serializes from the arrival time, not from the last departure.
	at, _ := m.admit(time.Second, 125)
	if want := time.Second + 100*time.Microsecond + 20*time.Millisecond; at != want {
		t.Fatalf("after idle: delivered at %v, want %v", at, want)
	}
}

func TestReorderHoldsBackAShare(t *testing.T) {
	const delay, extra = 20 * time.Millisecond, 15 * time.Millisecond
	m := model(t, Dir{Rate: 10_000_000, Delay: delay, Reorder: Reorder{P: 0.1, Delay: extra}}, 0, nil, 3)
	late, overtaken := 0, 0
	var lastAt time.Duration
	const n = 10000
	for i := range n {
		at, v := m.admit(0, 1250)
		onTime := time.Duration(i+1)*time.Millisecond + delay // the serialization is unchanged
		switch v {
		case deliver:
			if at != onTime {
				t.Fatalf("packet %d at %v, want %v", i, at, onTime)
			}
		case deliverLate:
			if at != onTime+extra {
				t.Fatalf("held-back packet %d at %v, want %v", i, at, onTime+extra)
			}
			late++
		default:
			t.Fatalf("packet %d: verdict %d", i, v)
		}
		if at < lastAt {
			overtaken++
		}
		lastAt = at
	}
	// sigma = sqrt(0.1*0.9/10000) = 0.3%: allow 4 sigma.
	if share := float64(late) / n; share < 0.088 || share > 0.112 {
		t.Errorf("%d of %d held back, want about 10%%", late, n)
	}
	if overtaken == 0 {
		t.Error("no packet arrived before one sent earlier")
	}
	// The draw is per packet: the same seed holds back the same packets.
	a := model(t, Dir{Reorder: Reorder{P: 0.5, Delay: extra}}, 0, nil, 9)
	b := model(t, Dir{Reorder: Reorder{P: 0.5, Delay: extra}}, 0, nil, 9)
	for i := range 200 {
		_, va := a.admit(time.Duration(i), 100)
		_, vb := b.admit(time.Duration(i)*time.Millisecond, 100)
		if va != vb {
			t.Fatalf("packet %d: %d vs %d with the same seed", i, va, vb)
		}
	}
}

func TestUnlimitedRateOnlyDelays(t *testing.T) {
	m := model(t, Dir{Delay: 300 * time.Millisecond}, 0, nil, 1)
	for i := range 10 {
		now := time.Duration(i) * time.Microsecond
		at, v := m.admit(now, 65535)
		if v != deliver || at != now+300*time.Millisecond {
			t.Fatalf("packet %d: at %v verdict %d", i, at, v)
		}
	}
}

func TestDropTail(t *testing.T) {
	// 1 Mbit/s: a 1000-byte packet takes 8 ms. Queue of 10 packets.
	m := model(t, Dir{Rate: 1_000_000}, 10_000, nil, 1)
	accepted := 0
	for range 20 {
		if _, v := m.admit(0, 1000); v == deliver {
			accepted++
		} else if v != dropQueue {
			t.Fatalf("verdict %d, want dropQueue", v)
		}
	}
	if accepted != 10 {
		t.Fatalf("accepted %d packets into a 10-packet queue", accepted)
	}
	// After one packet time one slot is free again, and only one.
	if _, v := m.admit(8*time.Millisecond, 1000); v != deliver {
		t.Fatalf("after one departure: verdict %d", v)
	}
	if _, v := m.admit(8*time.Millisecond, 1000); v != dropQueue {
		t.Fatalf("second packet after one departure: verdict %d", v)
	}
	// Half a packet time later half a packet of room: a 400-byte one fits.
	if _, v := m.admit(12*time.Millisecond, 400); v != deliver {
		t.Fatalf("400 bytes into 500 free: verdict %d", v)
	}
	if got := m.backlog(12 * time.Millisecond); math.Abs(got-9900) > 1 {
		t.Fatalf("backlog %v, want 9900", got)
	}
}

func TestQueueTimeFollowsTheRate(t *testing.T) {
	// 100 ms of queue: 100 packets of 1000 bytes at 8 Mbit/s, then 20
	// once the rate fell to 1.6 Mbit/s at 1 s.
	m := model(t, Dir{Rate: 8_000_000, RateSchedule: []RateStep{{At: time.Second, Rate: 1_600_000}}, QueueTime: 100 * time.Millisecond}, 0, nil, 1)
	fill := func(at time.Duration) int {
		n := 0
		for range 200 {
			if _, v := m.admit(at, 1000); v == deliver {
				n++
			}
		}
		return n
	}
	if n := fill(0); n != 100 {
		t.Errorf("at 8 Mbit/s %d packets into 100 ms of queue, want 100", n)
	}
	if n := fill(2 * time.Second); n != 20 {
		t.Errorf("at 1.6 Mbit/s %d packets into 100 ms of queue, want 20", n)
	}
}

func TestRateSchedule(t *testing.T) {
	c := newRateCurve(10_000_000, []RateStep{{At: time.Second, Rate: 1_000_000}, {At: 2 * time.Second, Rate: 0}})
	// 10000 bits starting 0.5 ms before the change: 5000 at 10 Mbit/s
	// (0.5 ms), the other 5000 at 1 Mbit/s (5 ms).
	if got, want := c.finish(time.Second-500*time.Microsecond, 10000), time.Second+5*time.Millisecond; got != want {
		t.Fatalf("straddling packet finishes at %v, want %v", got, want)
	}
	// Unlimited from 2 s: the rest of a packet goes at once.
	if got, want := c.finish(2*time.Second-time.Millisecond, 2000), 2*time.Second; got != want {
		t.Fatalf("into unlimited: %v, want %v", got, want)
	}
	if got := c.capacityBits(time.Second-time.Millisecond, time.Second+time.Millisecond); math.Abs(got-11000) > 1e-6 {
		t.Fatalf("capacity across the change %v bits, want 11000", got)
	}
	if c.maxRate() != 10_000_000 {
		t.Fatalf("max rate %d", c.maxRate())
	}
	// A step at 0 overrides the base rate.
	c = newRateCurve(5, []RateStep{{At: 0, Rate: 8000}})
	if got := c.finish(0, 8000); got != time.Second {
		t.Fatalf("step at 0: %v", got)
	}
}

func TestRateScheduleThroughModel(t *testing.T) {
	m := model(t, Dir{Rate: 8_000_000, RateSchedule: []RateStep{{At: 100 * time.Millisecond, Rate: 800_000}}}, 0, nil, 1)
	// 1000-byte packets: 1 ms each before the change, 10 ms after.
	var last time.Duration
	for i := range 200 {
		now := time.Duration(i) * time.Millisecond / 2 // offered at 16 Mbit/s
		at, v := m.admit(now, 1000)
		if v != deliver {
			t.Fatalf("packet %d dropped: %d", i, v)
		}
		last = at
	}
	// 100 packets fit before 100 ms; the remaining 100 take 10 ms each.
	if want := 100*time.Millisecond + 100*10*time.Millisecond; last != want {
		t.Fatalf("last delivery %v, want %v", last, want)
	}
}

func TestOutages(t *testing.T) {
	o := &outageSet{
		windows: []Outage{{Start: time.Second, Duration: 500 * time.Millisecond}},
		every:   Periodic{Every: 10 * time.Second, Duration: 100 * time.Millisecond},
	}
	m := model(t, Dir{Delay: 200 * time.Millisecond}, 0, o, 1)
	cases := []struct {
		now  time.Duration
		want verdict
	}{
		{50 * time.Millisecond, deliver},       // no periodic outage at 0
		{799 * time.Millisecond, deliver},      // arrives at 999 ms
		{801 * time.Millisecond, dropOutage},   // would arrive at 1001 ms, in the window
		{1200 * time.Millisecond, dropOutage},  // sent in the window
		{1500 * time.Millisecond, deliver},     // window closed
		{9850 * time.Millisecond, dropOutage},  // arrives at 10.05 s
		{10050 * time.Millisecond, dropOutage}, // periodic
		{10100 * time.Millisecond, deliver},    // periodic window ended
		{20099 * time.Millisecond, dropOutage}, // second period
		{20100 * time.Millisecond, deliver},    //
		{1499999999 * time.Nanosecond, dropOutage},
	}
	for _, c := range cases {
		if _, v := m.admit(c.now, 100); v != c.want {
			t.Errorf("at %v: verdict %d, want %d", c.now, v, c.want)
		}
	}
}

func TestRandomLoss(t *testing.T) {
	m := model(t, Dir{Loss: 0.03}, 0, nil, 42)
	const n = 100_000
	lost := 0
	for range n {
		if _, v := m.admit(0, 100); v == dropLoss {
			lost++
		}
	}
	// 3% of 100k: sigma ~54; allow 5 sigma.
	if got := float64(lost) / n; math.Abs(got-0.03) > 0.0027 {
		t.Fatalf("loss %.4f, want 0.03", got)
	}
}

func TestBitErrorLossGrowsWithSize(t *testing.T) {
	const ber = 1e-5
	for _, size := range []int{100, 1000} {
		m := model(t, Dir{BER: ber}, 0, nil, 7)
		const n = 100_000
		lost := 0
		for range n {
			if _, v := m.admit(0, size); v == dropLoss {
				lost++
			}
		}
		want := 1 - math.Pow(1-ber, float64(8*size))
		sigma := math.Sqrt(want * (1 - want) / n)
		if got := float64(lost) / n; math.Abs(got-want) > 5*sigma {
			t.Errorf("size %d: loss %.5f, want %.5f", size, got, want)
		}
	}
}

func TestGilbertElliottStatistics(t *testing.T) {
	ge := GilbertElliott{P: 0.01, R: 0.25, LossGood: 0, LossBad: 1}
	m := model(t, Dir{Burst: &ge}, 0, nil, 3)
	const n = 400_000
	lost, bursts, run := 0, 0, 0
	for range n {
		if _, v := m.admit(0, 1000); v == dropLoss {
			lost++
			run++
			continue
		}
		if run > 0 {
			bursts++
			run = 0
		}
	}
	mean := float64(lost) / n
	if want := ge.MeanLoss(); math.Abs(mean-want)/want > 0.08 {
		t.Errorf("mean loss %.4f, want %.4f", mean, want)
	}
	// With LossBad = 1 and LossGood = 0 a burst is one stay in the bad
	// state: geometric with mean 1/R.
	if got, want := float64(lost)/float64(bursts), 1/ge.R; math.Abs(got-want)/want > 0.08 {
		t.Errorf("mean burst length %.2f, want %.2f", got, want)
	}
}

func TestSeedReproducesLosses(t *testing.T) {
	pattern := func(seed uint64) []bool {
		ge := GilbertElliott{P: 0.05, R: 0.3, LossBad: 0.8}
		m := model(t, Dir{Loss: 0.02, BER: 1e-6, Burst: &ge}, 0, nil, seed)
		out := make([]bool, 5000)
		for i := range out {
			_, v := m.admit(0, 1400)
			out[i] = v == dropLoss
		}
		return out
	}
	a, b, c := pattern(99), pattern(99), pattern(100)
	same, diff := true, false
	for i := range a {
		same = same && a[i] == b[i]
		diff = diff || a[i] != c[i]
	}
	if !same {
		t.Fatal("the same seed gave different loss patterns")
	}
	if !diff {
		t.Fatal("different seeds gave the same loss pattern")
	}
}

func TestLossIndependentOfQueueDrops(t *testing.T) {
	// The loss draw happens for every arriving packet, so which packets are
	// lost depends on their index only, not on which others the queue
	// dropped: a seed reproduces losses whatever the timing.
	big := model(t, Dir{Loss: 0.1, Rate: 1_000_000}, 1<<30, nil, 5)
	small := model(t, Dir{Loss: 0.1, Rate: 1_000_000}, 3000, nil, 5)
	queued, lost := 0, 0
	for i := range 2000 {
		now := time.Duration(i) * 4 * time.Millisecond // offered at twice the rate
		_, vb := big.admit(now, 1000)
		_, vs := small.admit(now, 1000)
		if vb == dropQueue {
			t.Fatalf("packet %d dropped by the big queue", i)
		}
		if vb == dropLoss {
			lost++
		}
		if vs == dropQueue {
			queued++
			continue
		}
		if vs != vb {
			t.Fatalf("packet %d: verdict %d with the small queue, %d with the big one", i, vs, vb)
		}
	}
	if queued < 500 || lost < 100 {
		t.Fatalf("test did not exercise both drops: %d queued out, %d lost", queued, lost)
	}
}

func TestDefaultQueueLimit(t *testing.T) {
	o := Options{Fwd: Dir{Rate: 10_000_000, Delay: 300 * time.Millisecond}, Ret: Dir{Rate: 1_000_000, Delay: 300 * time.Millisecond}}
	if got, want := o.queueLimit(&o.Fwd), int64(10_000_000/8*0.6); got != want {
		t.Errorf("forward default queue %d, want one BDP %d", got, want)
	}
	if got := o.queueLimit(&o.Ret); got != 75000 {
		t.Errorf("return default queue %d, want 75000", got)
	}
	o.Fwd.Delay, o.Ret.Delay = 0, 0
	if got := o.queueLimit(&o.Fwd); got != minQueue {
		t.Errorf("no delay: queue %d, want the floor %d", got, minQueue)
	}
	o.Fwd.Queue = 5000
	if got := o.queueLimit(&o.Fwd); got != 5000 {
		t.Errorf("configured queue ignored: %d", got)
	}
}

func TestOptionsValidate(t *testing.T) {
	good := Options{DevA: "a", DevB: "b"}
	if err := good.Validate(); err != nil {
		t.Fatalf("minimal options: %v", err)
	}
	bad := map[string]func(o *Options){
		"long name":     func(o *Options) { o.DevA = "0123456789abcdef" },
		"same device":   func(o *Options) { o.DevB = "a" },
		"negative loss": func(o *Options) { o.Fwd.Loss = -1 },
		"ber one":       func(o *Options) { o.Ret.BER = 1 },
		"small queue":   func(o *Options) { o.Fwd.Queue = 100 },
		"mtu":           func(o *Options) { o.MTU = 100 },
		"outage":        func(o *Options) { o.Outages = []Outage{{Start: 0, Duration: 0}} },
		"periodic":      func(o *Options) { o.OutageEvery = Periodic{Every: time.Second, Duration: time.Second} },
		"schedule":      func(o *Options) { o.Fwd.RateSchedule = []RateStep{{At: 2}, {At: 1}} },
		"burst":         func(o *Options) { o.Fwd.Burst = &GilbertElliott{P: 2} },
	}
	for name, f := range bad {
		o := good
		f(&o)
		if err := o.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
