package bench

// Tests of the shared-link workloads' arithmetic, report table and plot,
// from synthetic transfers (the runs themselves need root: smoke_test.go).

import (
	"bytes"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestJain(t *testing.T) {
	for _, tc := range []struct {
		rates []float64
		want  float64
	}{
		{[]float64{5, 5}, 1},
		{[]float64{10, 0}, 0.5},
		{[]float64{2, 1}, 0.9},
		{nil, 0},
	} {
		if got := Jain(tc.rates); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Jain(%v) = %v, want %v", tc.rates, got, tc.want)
		}
	}
}

// steady is a transfer that delivers rate bytes/s from its start, sampled
// every sampleEvery for dur.
func steady(rate float64, dur time.Duration) *Transfer {
	t := &Transfer{Window: dur}
	for at := time.Duration(0); at <= dur; at += sampleEvery {
		t.Samples = append(t.Samples, Sample{T: at, Bytes: int64(rate * at.Seconds())})
	}
	for s := 1; s <= int(dur/time.Second); s++ {
		t.Timeline = append(t.Timeline, Point{T: float64(s), Rate: rate})
	}
	t.Bytes = t.Samples[len(t.Samples)-1].Bytes
	return t
}

func TestSummarizeShare(t *testing.T) {
	c, _ := conditionByName("BEAM-CLEAN")
	limit := c.PayloadCapacity()
	dur := shareMinDuration
	// The first flow holds 60% of the link, the late one 35%: Jain
	// 0.95/(2 x 0.485) ... and the late one is at its share at once.
	first := &shareFlow{name: "site 1", t: steady(0.6*limit, dur)}
	late := &shareFlow{name: "site 2", start: shareLag, t: steady(0.35*limit, dur-shareLag)}
	s := summarizeShare(c, []*shareFlow{first, late}, dur, shareSettle)
	if s.FromS != (shareLag+shareSettle).Seconds() || s.ToS != dur.Seconds() {
		t.Errorf("window %v..%v", s.FromS, s.ToS)
	}
	if math.Abs(s.Flows[0].LimitShare-0.6) > 0.01 || math.Abs(s.Flows[1].LimitShare-0.35) > 0.01 || math.Abs(s.Together-0.95) > 0.02 {
		t.Errorf("shares %v / %v, together %v", s.Flows[0].LimitShare, s.Flows[1].LimitShare, s.Together)
	}
	if want := Jain([]float64{0.6, 0.35}); math.Abs(s.Jain-want) > 0.005 {
		t.Errorf("Jain %v, want %v", s.Jain, want)
	}
	// 35% is below 90% of an equal share (45%): never reached.
	if s.LateToShareMs != nil {
		t.Errorf("late flow at its share after %v ms at 35%% of the link", *s.LateToShareMs)
	}
	if s.Flows[1].Timeline[0].T != shareLag.Seconds()+1 {
		t.Errorf("the late flow's timeline starts at %v, want its own start added", s.Flows[1].Timeline[0].T)
	}
	late.t = steady(0.47*limit, dur-shareLag)
	if s := summarizeShare(c, []*shareFlow{first, late}, dur, shareSettle); s.LateToShareMs == nil || *s.LateToShareMs != 0 {
		t.Errorf("late flow at 47%% of the link: to its share %v", s.LateToShareMs)
	}
}

func TestShareReportAndPlot(t *testing.T) {
	c, _ := conditionByName("BEAM")
	cts, err := SelectContenders("share-all")
	if err != nil || len(cts) != 3 {
		t.Fatalf("share-all: %v, %v", cts, err)
	}
	if cts[1].Beside != "cubic" || !cts[1].IsSCPS() || !strings.Contains(cts[1].Label(), "beside kernel TCP cubic") {
		t.Errorf("share-cubic: %+v %q", cts[1], cts[1].Label())
	}
	rep := &Report{Conditions: []ConditionInfo{NewConditionInfo(c)}, DurationS: shareMinDuration.Seconds()}
	for _, ct := range cts {
		rep.Contenders = append(rep.Contenders, NewContenderInfo(ct))
	}
	dur := shareMinDuration
	limit := c.PayloadCapacity()
	s := summarizeShare(c, []*shareFlow{
		{name: "cubic", label: "kernel TCP cubic", t: steady(0.3*limit, dur)},
		{name: "scpsvpn", label: "scpsvpn (hybrid)", start: shareLag, t: steady(0.6*limit, dur-shareLag)},
	}, dur, shareSettle)
	rep.Results = []*Result{
		{Condition: "BEAM", Contender: "share-cubic", Status: StatusOK, DurationS: dur.Seconds(), Sharing: s, QueueDropPct: 0.12},
		{Condition: "BEAM", Contender: "share-bbr", Status: "failed: no bbr"},
	}
	var b bytes.Buffer
	rep.RenderMarkdown(&b)
	out := b.String()
	for _, want := range []string{"## Sharing one link", "| BEAM | share-cubic | cubic 30% | scpsvpn 61% | 91% | 0.900 |", "| BEAM | share-bbr | failed |"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	file := filepath.Join(t.TempDir(), "share.svg")
	if err := rep.PlotShare(rep.Results[0], file); err != nil {
		t.Fatal(err)
	}
	checkSVG(t, file, "kernel TCP cubic", "scpsvpn (hybrid)", "equal share")
	if err := rep.PlotShare(rep.Results[1], file); err == nil {
		t.Error("a share plot of a run without flows")
	}
}

func TestFadeMeasures(t *testing.T) {
	c, _ := conditionByName("FADE")
	// Full rate before and after the fade, 95% of the lower rate during
	// it, and back at the full rate 1 s after it ends.
	dur := c.RunDuration(0)
	full, low := c.PayloadCapacity(), c.PayloadCapacity()/5
	down, up := c.DownSchedule[0].At, c.DownSchedule[1].At
	tr := &Transfer{Window: dur}
	var bytes float64
	for at := time.Duration(0); at <= dur; at += sampleEvery {
		tr.Samples = append(tr.Samples, Sample{T: at, Bytes: int64(bytes)})
		rate := full
		if at >= down && at < up+time.Second {
			rate = 0.95 * low
		}
		bytes += rate * sampleEvery.Seconds()
	}
	tr.Bytes = int64(bytes)
	r := &Result{}
	summarizeTransport(r, c, tr, CountersDelta(r.Counters, r.Counters), 0, nil)
	if r.Fade == nil || math.Abs(r.Fade.HoldShare-0.95) > 0.01 {
		t.Fatalf("fade %+v, want 95%% held", r.Fade)
	}
	if r.Fade.BackMs == nil || math.Abs(*r.Fade.BackMs-1000) > 150 {
		t.Errorf("back to 95%% after %v ms, want about 1000", r.Fade.BackMs)
	}
}
