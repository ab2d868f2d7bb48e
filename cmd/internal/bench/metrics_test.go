package bench

import (
	"math"
	"testing"
	"time"

	"scpsvpn/cmd/internal/linkemu"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{ms(5), 0.5, 5 * time.Millisecond},
		{ms(5), 0.95, 5 * time.Millisecond},
		{ms(1, 2, 3), 0.5, 2 * time.Millisecond},
		{ms(3, 1, 2), 0.5, 2 * time.Millisecond}, // unsorted input
		{ms(1, 2, 3, 4), 0.5, 2500 * time.Microsecond},
		{ms(10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 160, 170, 180, 190, 200, 210), 0.95, 200 * time.Millisecond},
		{ms(0, 100), 0.95, 95 * time.Millisecond},
		{ms(1, 2, 3), 0, time.Millisecond},
		{ms(1, 2, 3), 1, 3 * time.Millisecond},
		{ms(1, 2, 3), 7, 3 * time.Millisecond}, // clamped
	} {
		got, ok := Percentile(tc.in, tc.p)
		if !ok || got != tc.want {
			t.Errorf("Percentile(%v, %v) = %v, %v; want %v", tc.in, tc.p, got, ok, tc.want)
		}
	}
	in := ms(3, 1, 2)
	Percentile(in, 0.5)
	if in[0] != 3*time.Millisecond {
		t.Error("Percentile sorted its input in place")
	}
	if _, ok := Percentile(nil, 0.5); ok {
		t.Error("no samples, yet a percentile")
	}
}

func TestLinkBytes(t *testing.T) {
	c := linkemu.Counters{
		// 100 packets of 1000 bytes offered, 90 delivered, 6 lost on the
		// link, 4 dropped at the queue (never sent).
		Ret: linkemu.DirCounters{InPackets: 100, InBytes: 100_000, Packets: 90, Bytes: 90_000, DropLoss: 6, DropQueue: 4},
		Fwd: linkemu.DirCounters{InPackets: 50, InBytes: 2_000, Packets: 50, Bytes: 2_000},
	}
	if got, want := LinkBytes(c), int64(90_000+6_000+2_000); got != want {
		t.Errorf("LinkBytes = %d, want %d", got, want)
	}
	if LinkBytes(linkemu.Counters{}) != 0 {
		t.Error("no traffic, yet link bytes")
	}
}

func TestCountersDelta(t *testing.T) {
	a := linkemu.Counters{Fwd: linkemu.DirCounters{InPackets: 1, InBytes: 2, Packets: 3, Bytes: 4, DropLoss: 5, DropQueue: 6, DropOutage: 7, Errors: 8, Reordered: 9}}
	b := a
	b.Fwd.InPackets, b.Fwd.Errors, b.Fwd.Reordered, b.Ret.Bytes = 11, 9, 12, 100
	d := CountersDelta(a, b)
	want := linkemu.Counters{Fwd: linkemu.DirCounters{InPackets: 10, Errors: 1, Reordered: 3}, Ret: linkemu.DirCounters{Bytes: 100}}
	if d != want {
		t.Errorf("delta %+v, want %+v", d, want)
	}
}

func TestSummarize(t *testing.T) {
	cond, _ := conditionByName("C1") // capacity 182500 B/s
	tr := &Transfer{
		Bytes: 1_825_000, Window: 20 * time.Second, TTFB: 612345 * time.Microsecond,
		Latencies:  []time.Duration{300 * time.Millisecond, 400 * time.Millisecond, 500 * time.Millisecond},
		ProbeBytes: 600, Unanswered: 1,
		Timeline: []Point{{T: 1, Rate: 5}},
	}
	delta := linkemu.Counters{Ret: linkemu.DirCounters{InPackets: 10, InBytes: 15_000, Packets: 10, Bytes: 1_900_000}, Fwd: linkemu.DirCounters{Packets: 5, Bytes: 96_000}}
	var r Result
	summarize(&r, cond, tr, delta, true)
	if r.GoodputKBps != 91.25 || math.Abs(r.Share-0.5) > 1e-12 {
		t.Errorf("goodput %v kB/s share %v; want 91.25 and 0.5", r.GoodputKBps, r.Share)
	}
	if r.TTFBMs == nil || *r.TTFBMs != 612.35 {
		t.Errorf("ttfb %v", r.TTFBMs)
	}
	if p := r.Probe; p == nil || p.Count != 3 || p.P50Ms != 400 || p.P95Ms != 490 || p.MaxMs != 500 || p.Unanswered != 1 {
		t.Errorf("probe %+v", r.Probe)
	}
	if r.LinkBytes != 1_996_000 || r.LinkPerByte == nil || math.Abs(*r.LinkPerByte-1_996_000.0/1_825_600) > 1e-12 {
		t.Errorf("link %d per byte %v", r.LinkBytes, r.LinkPerByte)
	}
	if r.DurationS != 20 || r.PayloadBytes != 1_825_000 || len(r.Timeline) != 1 {
		t.Errorf("%+v", r)
	}

	var none Result
	summarize(&none, cond, &Transfer{Window: time.Second}, linkemu.Counters{}, false)
	if none.TTFBMs != nil || none.Probe != nil || none.LinkPerByte != nil || none.GoodputKBps != 0 {
		t.Errorf("an empty transfer: %+v", none)
	}
}
