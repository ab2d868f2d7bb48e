package bench

// Tests of the transport targets' pieces without root: the new conditions
// (their emulator options, shifted schedules, what scpsvpn is told), the
// payload limit, the time to rate, the outage measures and their table.

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"scpsvpn/cmd/internal/linkemu"
)

func mustCondition(t *testing.T, name string) Condition {
	t.Helper()
	c, ok := conditionByName(name)
	if !ok {
		t.Fatalf("no condition %s", name)
	}
	return c
}

func TestTransportConditions(t *testing.T) {
	// The original seven keep their names and their (default) queues.
	for _, n := range []string{"B1", "C1", "C2", "GEO", "LEO", "GEO-10/2", "GEO-50/0.5"} {
		c := mustCondition(t, n)
		if o := c.LinkOptions(1); o.Fwd.Queue != 0 || o.Ret.Queue != 0 || c.Timed() || c.MinDuration != 0 {
			t.Errorf("%s changed: %+v", n, o)
		}
	}
	sel, err := SelectConditions("asym,c2-2x,GEO-2X,C2-NORATE,geo-norate,DROP,OUTAGE")
	if err != nil || len(sel) != 7 {
		t.Fatalf("selecting the new conditions: %v %v", sel, err)
	}
	for _, c := range sel {
		if !c.TransportTable || !c.BDPQueue {
			t.Errorf("%s: not in the transport targets' table or without a BDP queue", c.Name)
		}
	}
	// ASYM's 64 kbit/s return link gets a queue of 8 packets, not 64 KiB
	// (8 s of ACKs); the 20 Mbit/s download one BDP (1.5 MB).
	o := mustCondition(t, "ASYM").LinkOptions(1)
	if o.Fwd.Queue != 8*1500 || o.Ret.Queue != 20_000_000/8*6/10 {
		t.Errorf("ASYM queues fwd %d ret %d", o.Fwd.Queue, o.Ret.Queue)
	}
	// DROP's queue is the BDP of its highest rate; the rate change moves
	// with the lead, the base rate is 50M.
	drop := mustCondition(t, "DROP")
	o = drop.LinkOptionsAt(1, 12*time.Second)
	if o.Ret.Rate != 50_000_000 || len(o.Ret.RateSchedule) != 1 || o.Ret.RateSchedule[0] != (linkemu.RateStep{At: 22 * time.Second, Rate: 10_000_000}) {
		t.Errorf("DROP options %+v", o.Ret)
	}
	if o.Ret.Queue != 50_000_000/8*6/10 || len(o.Outages) != 0 {
		t.Errorf("DROP queue %d outages %v", o.Ret.Queue, o.Outages)
	}
	out := mustCondition(t, "OUTAGE")
	o = out.LinkOptionsAt(1, 3*time.Second)
	if len(o.Outages) != 1 || o.Outages[0] != (linkemu.Outage{Start: 13 * time.Second, Duration: 30 * time.Second}) {
		t.Errorf("OUTAGE outages %v", o.Outages)
	}
	if !out.Timed() || !drop.Timed() || mustCondition(t, "ASYM").Timed() {
		t.Error("Timed is wrong")
	}
	// At least outage + 20 s, whatever --duration says; longer wins.
	if d := out.RunDuration(10 * time.Second); d < 50*time.Second || d < out.Outage.Start+out.Outage.Duration+20*time.Second {
		t.Errorf("OUTAGE runs %v", d)
	}
	if d := out.RunDuration(2 * time.Minute); d != 2*time.Minute {
		t.Errorf("a longer duration was cut to %v", d)
	}
	bad := out
	bad.MinDuration = 20 * time.Second
	if bad.Validate() == nil {
		t.Error("a minimum duration ending inside the outage was accepted")
	}
	bad = mustCondition(t, "C2-2X")
	bad.PeerNoRate = true
	if bad.Validate() == nil {
		t.Error("a rate scale without rates was accepted")
	}
}

func TestTransportPeerLinks(t *testing.T) {
	a, b := mustCondition(t, "GEO-2X").PeerLinks("")
	la, lb := parseLink(t, a), parseLink(t, b)
	if la.Up != 4_000_000 || la.Down != 20_000_000 || lb.Up != 20_000_000 || lb.Down != 4_000_000 {
		t.Errorf("GEO-2X told A %d/%d B %d/%d, want twice 2M/10M", la.Up, la.Down, lb.Up, lb.Down)
	}
	if la.Loss != "auto" || !strings.Contains(a, `loss = "auto"`) {
		t.Errorf("GEO-2X loss %q", la.Loss)
	}
	a, b = mustCondition(t, "C2-NORATE").PeerLinks("")
	for _, s := range []string{a, b} {
		if strings.Contains(s, "up") || strings.Contains(s, "down") {
			t.Errorf("C2-NORATE states a rate:\n%s", s)
		}
		if l := parseLink(t, s); l.Up != 0 || l.Down != 0 || l.RTT != 300*time.Millisecond || l.Loss != "auto" {
			t.Errorf("C2-NORATE parses as %+v", l)
		}
	}
	// DROP tells the truth of its start: 50 Mbit/s.
	_, b = mustCondition(t, "DROP").PeerLinks("")
	if l := parseLink(t, b); l.Up != 50_000_000 {
		t.Errorf("DROP tells B up %d", l.Up)
	}
}

func TestPayloadLimit(t *testing.T) {
	c2 := mustCondition(t, "C2")
	// The targets' formula: rate/8 x 1460/1500 x (1 - loss).
	per := 1_500_000.0 / 8 * 1460 / 1500 * 0.97
	if got := c2.PayloadLimit(0, 10*time.Second); math.Abs(got-10*per) > 1e-6 {
		t.Errorf("C2 limit %v, want %v", got, 10*per)
	}
	if c2.PayloadLimit(5*time.Second, 5*time.Second) != 0 || c2.PayloadLimit(2*time.Second, time.Second) != 0 {
		t.Error("an empty interval has a limit")
	}
	drop := mustCondition(t, "DROP")
	// 8 s at 50M, then 4 s at 10M.
	want := (8*50e6 + 4*10e6) / 8 * 1460 / 1500
	if got := drop.PayloadLimit(2*time.Second, 14*time.Second); math.Abs(got-want) > 1e-3 {
		t.Errorf("DROP limit %v, want %v", got, want)
	}
	if drop.DownRateAt(9*time.Second) != 50_000_000 || drop.DownRateAt(10*time.Second) != 10_000_000 {
		t.Error("DownRateAt")
	}
	out := mustCondition(t, "OUTAGE")
	// 0-60 s with 10-40 s down: 30 s of 10M.
	want = 30 * 10e6 / 8 * 1460 / 1500
	if got := out.PayloadLimit(0, 60*time.Second); math.Abs(got-want) > 1e-3 {
		t.Errorf("OUTAGE limit %v, want %v", got, want)
	}
	if got := out.PayloadLimit(15*time.Second, 35*time.Second); got != 0 {
		t.Errorf("limit inside the outage %v", got)
	}
	// A transfer that started 2 s late meets the outage 2 s earlier.
	if s := out.Shifted(-2 * time.Second); s.Outage.Start != 8*time.Second || out.Outage.Start != 10*time.Second {
		t.Errorf("Shifted: %v (original %v)", s.Outage, out.Outage)
	}
	if s := drop.Shifted(time.Second); s.DownSchedule[0].At != 11*time.Second || drop.DownSchedule[0].At != 10*time.Second {
		t.Error("Shifted changed the table's schedule or missed the step")
	}
}

// ramp builds 100 ms samples of a download that sends nothing for idle,
// then rate bytes per second.
func ramp(idle time.Duration, rate float64, total time.Duration) []Sample {
	var s []Sample
	for t := time.Duration(0); t <= total; t += sampleEvery {
		b := 0.0
		if t > idle {
			b = rate * (t - idle).Seconds()
		}
		s = append(s, Sample{T: t, Bytes: int64(b)})
	}
	return s
}

func TestBytesAt(t *testing.T) {
	s := []Sample{{0, 0}, {time.Second, 1000}, {2 * time.Second, 1000}, {3 * time.Second, 4000}}
	for _, tc := range []struct {
		t    time.Duration
		want float64
	}{{-time.Second, 0}, {0, 0}, {500 * time.Millisecond, 500}, {1500 * time.Millisecond, 1000}, {2500 * time.Millisecond, 2500}, {time.Minute, 4000}} {
		if got := BytesAt(s, tc.t); got != tc.want {
			t.Errorf("BytesAt(%v) = %v, want %v", tc.t, got, tc.want)
		}
	}
	if BytesAt(nil, time.Second) != 0 {
		t.Error("no samples, yet bytes")
	}
}

func TestTimeToRate(t *testing.T) {
	geo := mustCondition(t, "GEO-10/2")
	limit := geo.PayloadLimit(0, time.Second)
	// Nothing for 1.8 s (3 RTTs at 600 ms), then the full limit.
	at, ok := TimeToRate(ramp(1800*time.Millisecond, limit, 10*time.Second), geo, 600*time.Millisecond, 0.9)
	if !ok || at < 1700*time.Millisecond || at > 1800*time.Millisecond {
		t.Errorf("full rate from 1.8 s: reached at %v, %v", at, ok)
	}
	// 85% of the limit never reaches 90%.
	if at, ok := TimeToRate(ramp(0, 0.85*limit, 10*time.Second), geo, 600*time.Millisecond, 0.9); ok {
		t.Errorf("85%% of the limit counted as 90%% at %v", at)
	}
	// A burst shorter than the window does not count.
	s := ramp(0, 0, 10*time.Second)
	for i := range s {
		if s[i].T >= time.Second {
			s[i].Bytes = int64(0.2 * limit) // 0.2 s worth delivered at once at 1 s
		}
	}
	if at, ok := TimeToRate(s, geo, 600*time.Millisecond, 0.9); ok {
		t.Errorf("a one-off burst counted as the rate at %v", at)
	}
	// Windows inside an outage count for nothing, even when empty.
	out := mustCondition(t, "OUTAGE")
	var dead []Sample
	for tt := time.Duration(0); tt <= 50*time.Second; tt += sampleEvery {
		b := 0.0
		if tt > 40*time.Second {
			b = limit * (tt - 40*time.Second).Seconds()
		}
		dead = append(dead, Sample{T: tt, Bytes: int64(b)})
	}
	if at, ok := TimeToRate(dead, out, 600*time.Millisecond, 0.9); !ok || at < 40*time.Second || at > 40100*time.Millisecond {
		t.Errorf("outage: rate reached at %v, %v; want after 40 s", at, ok)
	}
}

func TestQueueDropPct(t *testing.T) {
	c := linkemu.Counters{Ret: linkemu.DirCounters{InPackets: 400, DropQueue: 6}, Fwd: linkemu.DirCounters{InPackets: 10, DropQueue: 10}}
	if got := QueueDropPct(c); got != 1.5 {
		t.Errorf("QueueDropPct = %v, want 1.5 (the download direction only)", got)
	}
	if QueueDropPct(linkemu.Counters{}) != 0 {
		t.Error("no packets, yet drops")
	}
}

func TestSummarizeTransport(t *testing.T) {
	out := mustCondition(t, "OUTAGE")
	limit := out.PayloadLimit(0, time.Second) // per second
	// Started 500 ms late: the outage is at 9.5-39.5 s of the transfer.
	// Full rate from 1.2 s (2 RTTs), nothing during the outage, then back
	// at full rate 1 s after the link.
	late := 500 * time.Millisecond
	var s []Sample
	var b float64
	for tt := time.Duration(0); tt <= 60*time.Second; tt += sampleEvery {
		if tt > 1200*time.Millisecond && (tt <= 9500*time.Millisecond || tt > 40500*time.Millisecond) {
			b += limit * sampleEvery.Seconds()
		}
		s = append(s, Sample{T: tt, Bytes: int64(b)})
	}
	tr := &Transfer{Bytes: int64(b), Window: 60 * time.Second, Samples: s}
	delta := linkemu.Counters{Ret: linkemu.DirCounters{InPackets: 1000, DropQueue: 10, DropOutage: 40}}
	during := linkemu.Counters{Ret: linkemu.DirCounters{InPackets: 12, InBytes: 960}}
	var r Result
	summarizeTransport(&r, out, tr, delta, late, &during)
	// 8.3 s + 19.5 s of full rate over the 30 s the link was up.
	if want := (8.3 + 19.5) / 30; math.Abs(r.LimitShare-want) > 0.01 {
		t.Errorf("share of limit %v, want %v", r.LimitShare, want)
	}
	if r.QueueDropPct != 1 {
		t.Errorf("queue drops %v", r.QueueDropPct)
	}
	if r.TimeTo90RTTs == nil || *r.TimeTo90RTTs != 2 {
		t.Errorf("time to 90%% %v RTTs, want 2", r.TimeTo90RTTs)
	}
	if r.StartOffsetMs == nil || *r.StartOffsetMs != 500 {
		t.Errorf("start offset %v", r.StartOffsetMs)
	}
	o := r.Outage
	if o == nil || !o.Survived || o.SentPackets != 12 || o.SentBytes != 960 || o.DropOutage != 40 {
		t.Fatalf("outage %+v", o)
	}
	// The link came back at 39.5 s; data from 40.5 s: 4 of 5 s.
	if math.Abs(o.Recovery-0.8) > 0.03 {
		t.Errorf("recovery %v, want 0.8", o.Recovery)
	}
	if o.BackTo90Ms == nil || math.Abs(*o.BackTo90Ms-1000) > 2*float64(sampleEvery/time.Millisecond) {
		t.Errorf("back to 90%% after %v ms, want 1000", o.BackTo90Ms)
	}
	tr.Err = errors.New("connection reset")
	var failed Result
	summarizeTransport(&failed, out, tr, delta, late, nil)
	if failed.Outage == nil || failed.Outage.Survived || failed.Outage.SentPackets != 0 {
		t.Errorf("a reset connection: %+v", failed.Outage)
	}
	// After start-up: from the first byte plus steadyAfterRTTs round trips
	// (C2: 0.3 s + 1.2 s) to the end: 10 s at half the limit after 1.5 s
	// of nothing.
	c2 := mustCondition(t, "C2")
	lim := c2.PayloadLimit(0, time.Second)
	var samples []Sample
	for ms := 0; ms <= 11500; ms += 100 {
		got := max(0, float64(ms-1500)/1000*lim/2)
		samples = append(samples, Sample{T: time.Duration(ms) * time.Millisecond, Bytes: int64(got)})
	}
	var st Result
	tr2 := &Transfer{Window: 11500 * time.Millisecond, TTFB: 300 * time.Millisecond, Samples: samples, Bytes: samples[len(samples)-1].Bytes}
	summarizeTransport(&st, c2, tr2, linkemu.Counters{}, 0, nil)
	if st.SteadyShare < 0.49 || st.SteadyShare > 0.51 || st.LimitShare > 0.45 {
		t.Errorf("steady share %.3f (overall %.3f), want 0.5", st.SteadyShare, st.LimitShare)
	}
	// No outage, no outage record; no schedule, no offset.
	var plain Result
	summarizeTransport(&plain, mustCondition(t, "C2"), &Transfer{Window: time.Second}, linkemu.Counters{}, 0, nil)
	if plain.Outage != nil || plain.StartOffsetMs != nil || plain.TimeTo90RTTs != nil {
		t.Errorf("C2: %+v", plain)
	}
}

func TestRenderTransport(t *testing.T) {
	rep := &Report{DurationS: 10}
	for _, n := range []string{"C1", "ASYM", "OUTAGE"} {
		rep.Conditions = append(rep.Conditions, NewConditionInfo(mustCondition(t, n)))
	}
	for _, c := range []Contender{KernelContender("cubic"), KernelContender("bbr"), SCPSContender("")} {
		rep.Contenders = append(rep.Contenders, NewContenderInfo(c))
	}
	add := func(cond, ct string, kBps, share float64) *Result {
		r := &Result{Condition: cond, Contender: ct, Status: StatusOK, GoodputKBps: kBps, LimitShare: share, DurationS: 10, TimeTo90RTTs: ptr(2.5), QueueDropPct: 0.5}
		rep.Results = append(rep.Results, r)
		return r
	}
	add("C1", "cubic", 100, 0.5)
	add("ASYM", "cubic", 500, 0.2)
	add("ASYM", "bbr", 1000, 0.4)
	add("ASYM", "scpsvpn", 2400, 0.96).SteadyShare = 0.984
	add("OUTAGE", "cubic", 200, 0.3).Outage = &OutageResult{Survived: true, Recovery: 0.1, BackTo90Ms: ptr(4200.0), SentPackets: 3, SentBytes: 4500}
	rep.Results = append(rep.Results, &Result{Condition: "OUTAGE", Contender: "bbr", Status: "failed: no"})
	add("OUTAGE", "scpsvpn", 600, 0.9).Outage = &OutageResult{Survived: false}
	var b strings.Builder
	rep.RenderMarkdown(&b)
	md := b.String()
	sec := md[strings.Index(md, "## Transport targets"):]
	sec = sec[:strings.Index(sec[3:], "\n## ")+3]
	if strings.Contains(sec, "| C1 |") {
		t.Error("C1 is not a transport-target condition")
	}
	for _, want := range []string{
		"| ASYM | scpsvpn | 2500.0 | 96% | 98% | 4.80x | 2.40x | 2.5 | 0.50 | - | - | - | - |",
		"| ASYM | cubic | 2500.0 | 20% | - | - | 0.50x | 2.5 | 0.50 | - | - | - | - |",
		"| OUTAGE | cubic | 666.7 | 30% | - | - | - | 2.5 | 0.50 | yes | 10% | 4200 | 3 (4500 B) |",
		"| OUTAGE | bbr | - | failed |  |  |  |  |  |  |  |  |  |",
		"| OUTAGE | scpsvpn | 666.7 | 90% | - | 3.00x | - | 2.5 | 0.50 | **no** | 0% | never | 0 (0 B) |",
		"## Queue drops",
		"OUTAGE runs 1m0s per contender",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	// Without a transport-target condition there is no such table.
	rep.Conditions = rep.Conditions[:1]
	b.Reset()
	rep.RenderMarkdown(&b)
	if strings.Contains(b.String(), "Transport targets") {
		t.Error("a transport table without its conditions")
	}
}
