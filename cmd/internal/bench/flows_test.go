package bench

import (
	"context"
	"math"
	"net"
	"strings"
	"testing"
	"time"
)

// loopbackFlows serves the benchmark protocol on loopback and dials it
// through a dialPool in the current namespace; the server's answers are
// recorded.
func loopbackFlows(t *testing.T, workers int) (Dialer, *answerTimes) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := Serve(ln, nil, nil)
	t.Cleanup(func() { srv.Close() })
	answers := recordAnswers(srv)
	pool := newDialPool("", ln.Addr().String(), workers, net.Dialer{})
	t.Cleanup(pool.Close)
	return pool.Dial, answers
}

// TestFlowPhasesLoopback runs the opens and downloads phases against a
// loopback server: every flow completes, every byte arrives, and the
// figures are what the completions say.
func TestFlowPhasesLoopback(t *testing.T) {
	dial, answers := loopbackFlows(t, 8)
	ctx := context.Background()
	o := measureOpens(ctx, dial, 50)
	if o.Done != 50 || o.Err != "" || o.PerSecond <= 0 || o.FirstMs > o.LastMs {
		t.Errorf("opens: %+v", o)
	}
	// A condition of 10 Mbit/s: loopback delivers far faster, so the
	// downloads together read above the link's limit.
	c, _ := conditionByName("GEO-10/2")
	d := measureDownloads(ctx, dial, 30, 50_000, c, answers)
	if d.Done != 30 || d.Bytes != 30*50_000 || d.Err != "" {
		t.Fatalf("downloads: %+v", d)
	}
	if d.Jain <= 0 || d.Jain > 1 || d.JainShare <= 0 || d.JainShare > 1 || d.Together <= 0 || d.MinMs <= 0 || d.MinMs > d.P5Ms || d.P10Ms > d.P50Ms || d.P50Ms > d.MaxMs || d.FirstByteMs > d.LastByteMs || d.DoneEarly > d.Done {
		t.Errorf("downloads: %+v", d)
	}
	// The server's answer times name the clients' connections: the last
	// answer began after the first dial and before the last byte.
	if d.LastAnswerMs <= 0 || d.LastAnswerMs > d.LastByteMs || d.JainRunning <= 0 || d.JainRunning > 1 || d.DoneBeforeLastAnswer >= d.Done {
		t.Errorf("last answer at %v ms (last byte %v ms), Jain %v of the flows running then, %d done before it", d.LastAnswerMs, d.LastByteMs, d.JainRunning, d.DoneBeforeLastAnswer)
	}
	var sum int64
	for _, b := range d.Timeline {
		sum += b
	}
	if sum != d.Bytes || d.LastFirstByteMs < d.FirstByteMs || d.LastFirstByteMs > d.LastByteMs || d.ConnectedMs > d.LastByteMs {
		t.Errorf("timeline of %d bytes, want %d; connected by %v ms, first bytes %v-%v ms, last byte %v ms", sum, d.Bytes, d.ConnectedMs, d.FirstByteMs, d.LastFirstByteMs, d.LastByteMs)
	}
}

// TestFlowPhasesCountFailures: flows that cannot connect are counted
// and named, not hidden in the figures.
func TestFlowPhasesCountFailures(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: every dial is refused
	pool := newDialPool("", addr, 4, net.Dialer{})
	defer pool.Close()
	c, _ := conditionByName("GEO-10/2")
	d := measureDownloads(context.Background(), pool.Dial, 5, 1000, c, nil)
	if d.Done != 0 || d.Bytes != 0 || !strings.HasPrefix(d.Err, "5 flows failed") {
		t.Errorf("downloads to nowhere: %+v", d)
	}
	o := measureOpens(context.Background(), pool.Dial, 5)
	if o.Done != 0 || o.PerSecond != 0 || !strings.HasPrefix(o.Err, "5 flows failed") {
		t.Errorf("opens to nowhere: %+v", o)
	}
}

// TestDialPoolHonoursContext: a dial waiting for a free worker gives up
// when its context ends.
func TestDialPoolHonoursContext(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pool := newDialPool("", ln.Addr().String(), 0, net.Dialer{}) // no worker ever takes a job
	defer pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := pool.Dial(ctx); err == nil {
		t.Fatal("a dial without workers succeeded")
	}
}

func TestFlowsSpecCheck(t *testing.T) {
	if err := DefaultFlows.check(); err != nil {
		t.Errorf("the default: %v", err)
	}
	for _, s := range []FlowsSpec{
		{Flows: 0, DownloadBytes: 30_000, Idle: 1, Opens: 2},
		{Flows: 1, DownloadBytes: 999, Idle: 1, Opens: 2},
		{Flows: 1, DownloadBytes: 30_000, Idle: 0, Opens: 2},
		{Flows: 1, DownloadBytes: 30_000, Idle: 1, Opens: 1},
	} {
		if err := s.check(); err == nil || !strings.HasPrefix(err.Error(), "--") {
			t.Errorf("%+v: %v, want an error naming the flag", s, err)
		}
	}
	// The idle connections' client ends, within the usual hard limit
	// of 20,000 that an unprivileged container may not raise.
	if f := DefaultFlows.Files(); f < 10_000 || f > 20_000 {
		t.Errorf("%d files for 10,000 idle connections", f)
	}
}

// TestTimelineFull: the timeline finds the first and last round trip
// that carried 90% of the rate, and the share between them.
func TestTimelineFull(t *testing.T) {
	var tl timeline
	const limit = 1000.0 // bytes per second: 50 per 50 ms bin at the limit
	// 0.5 s of nothing, 0.2 s at half the limit, 1 s at the limit, 0.3 s
	// of a tail at a fifth.
	at := time.Duration(0)
	add := func(d time.Duration, share float64) {
		for end := at + d; at < end; at += timelineBin {
			tl.add(at, int(share*limit*timelineBin.Seconds()))
		}
	}
	add(500*time.Millisecond, 0)
	add(200*time.Millisecond, 0.5)
	add(time.Second, 1)
	add(300*time.Millisecond, 0.2)
	from, until, share := tl.full(100*time.Millisecond, 0.9*limit)
	if from != 700 || until != 1700 || share < 0.99 || share > 1.01 {
		t.Errorf("full from %v ms until %v ms at %.3f of the limit, want 700, 1700, 1", from, until, share)
	}
	var empty timeline
	if from, _, _ := empty.full(100*time.Millisecond, 1); from != -1 {
		t.Errorf("an empty timeline full from %v ms, want -1", from)
	}
}

// TestDownloadSpread: the low end of the completion times shows the few
// flows that finished early, which the median and the maximum hide.
func TestDownloadSpread(t *testing.T) {
	if (spread(nil) != durations{}) {
		t.Errorf("no flows: %+v", spread(nil))
	}
	// 100 flows: 10 of 1 s, the rest 26 s (p10 lies between the two).
	var took []time.Duration
	for i := range 100 {
		d := 26 * time.Second
		if i%10 == 0 {
			d = time.Second
		}
		took = append(took, d)
	}
	got := spread(took)
	want := durations{MinMs: 1000, P5Ms: 1000, P10Ms: 23500, P50Ms: 26000, P95Ms: 26000, MaxMs: 26000}
	if got != want {
		t.Errorf("spread = %+v, want %+v", got, want)
	}
}

// TestRunningJain: a flow done alone before the last answer began shared
// the link with no flow that waited for it; the index of the flows
// running then leaves it out, and counts a flow that failed among them.
func TestRunningJain(t *testing.T) {
	const size = 30_000
	s := time.Second
	flow := func(answered, last time.Duration, bytes int64) flowDownload {
		return flowDownload{bytes: bytes, last: last, answered: answered}
	}
	// One answered at 0.4 s and done at 0.8 s, alone; 999 answered from
	// 1 s to 3 s and done together at 26 s.
	flows := []flowDownload{flow(400*time.Millisecond, 800*time.Millisecond, size)}
	for i := range 999 {
		flows = append(flows, flow(s+2*s*time.Duration(i)/998, 26*s, size))
	}
	all := make([]float64, len(flows))
	for i, f := range flows {
		all[i] = f.rate()
	}
	if j := Jain(all); j > 0.6 {
		t.Fatalf("the index of all flows is %.3f: the case no longer shows what it is for", j)
	}
	j, at, early, ok := runningJain(flows, size)
	if !ok || at != 3*s || early != 1 || j < 0.999 {
		t.Errorf("got Jain %.3f of the flows running at %v, %d done before (ok %v); want 1.000 at 3s, 1 before", j, at, early, ok)
	}
	// A flow that failed with nothing received counts, at rate 0.
	flows[500] = flow(2*s, 26*s, 0)
	if j, _, _, _ := runningJain(flows, size); j > 0.999 {
		t.Errorf("Jain %.3f with a failed flow among those running: it should count", j)
	}
	// With no answer's time known there is no figure.
	for i := range flows {
		flows[i].answered = -1
	}
	if _, _, _, ok := runningJain(flows, size); ok {
		t.Error("a figure with no answer's time known")
	}
}

// sharedLink serves flows, each running from bin b0 to bin b1 (of
// timelineBin), over a link that carries perBin bytes a bin, split among
// the flows running in it as weight says (nil: evenly); a flow whose
// weight is 0 in a bin runs but gets nothing. It returns the flows (dialed
// 600 ms before their first byte) and the bins.
func sharedLink(spans [][2]int, perBin float64, weight func(flow, bin int) float64) ([]flowDownload, []int64) {
	if weight == nil {
		weight = func(int, int) float64 { return 1 }
	}
	end := 0
	for _, s := range spans {
		end = max(end, s[1])
	}
	bins := make([]int64, end+1)
	got := make([]float64, len(spans))
	for k := range bins {
		var sum float64
		for i, s := range spans {
			if s[0] <= k && k <= s[1] {
				sum += weight(i, k)
			}
		}
		for i, s := range spans {
			if s[0] <= k && k <= s[1] && sum > 0 {
				b := perBin * weight(i, k) / sum
				got[i] += b
				bins[k] += int64(b)
			}
		}
	}
	flows := make([]flowDownload, len(spans))
	for i, s := range spans {
		first := time.Duration(s[0])*timelineBin + time.Millisecond
		flows[i] = flowDownload{bytes: int64(got[i]), dialed: first - 600*time.Millisecond, first: first,
			last: time.Duration(s[1])*timelineBin + 49*time.Millisecond}
	}
	return flows, bins
}

// TestFairShares: Jain's index of the flows' fair shares counts a flow
// that finished alone, before the others started, as fair (the index of
// the rates from dial to last byte falls to about 0.5 for it), sees a
// flow that got a quarter of each bin beside another, a flow that
// stalled while the others ran, and a flow that got nothing.
func TestFairShares(t *testing.T) {
	// One flow alone in bins 8-16 (0.4-0.8 s), 999 from bin 20 to 520
	// (1-26 s), evenly, at 10 Mbit/s.
	spans := [][2]int{{8, 16}}
	for range 999 {
		spans = append(spans, [2]int{20, 520})
	}
	flows, bins := sharedLink(spans, 62500, nil)
	rates := make([]float64, len(flows))
	for i, f := range flows {
		rates[i] = f.rate()
	}
	if j := Jain(rates); j > 0.6 {
		t.Fatalf("Jain of the rates %.3f: the case no longer shows what it is for", j)
	}
	if j := Jain(fairShares(flows, 1, bins)); j < 0.999 {
		t.Errorf("one flow done alone, the rest evenly: Jain of the fair shares %.3f, want 1.000", j)
	}
	// Two flows in the same bins, one served three times the other: shares
	// 1.5 and 0.5, index 0.8.
	flows, bins = sharedLink([][2]int{{0, 100}, {0, 100}}, 62500, func(i, _ int) float64 { return float64(1 + 2*i) })
	if j := Jain(fairShares(flows, 1, bins)); math.Abs(j-0.8) > 0.01 {
		t.Errorf("one flow served three times the other: Jain of the fair shares %.3f, want 0.8", j)
	}
	// Two flows from bin 0 to 100; the second gets nothing in bins 50-100
	// (it stalled, and did not finish: it runs to the end).
	flows, bins = sharedLink([][2]int{{0, 100}, {0, 49}}, 62500, nil)
	size := int(flows[1].bytes + 1) // the second did not finish
	flows[0].bytes = max(flows[0].bytes, int64(size))
	if j := Jain(fairShares(flows, size, bins)); j > 0.95 {
		t.Errorf("a flow stalled for half the time beside another: Jain of the fair shares %.3f, want it low", j)
	}
	// A flow that got nothing counts, at 0.
	flows, bins = sharedLink([][2]int{{0, 100}, {0, 100}, {0, 100}}, 62500, nil)
	flows[2].bytes = 0
	if j := Jain(fairShares(flows, 1, bins)); j > 0.7 {
		t.Errorf("a flow that got nothing among three: Jain of the fair shares %.3f, want about 2/3", j)
	}
}
