package bench

// The CI smoke run of `scpsvpn bench`: the real binary, a few seconds of
// transfer per contender, as root. It proves the command works end to end
// (testbed, emulator, kernel TCP and scpsvpn paths, report writing) and
// leaves nothing behind; it is not a benchmark.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"scpsvpn/cmd/internal/testbed"
	"scpsvpn/cmd/internal/testenv"
)

func TestSmokeBench(t *testing.T) {
	bin := testenv.SmokeBinary(t)
	out := filepath.Join(t.TempDir(), "report")
	scps := "scpsvpn-" + DefaultCongestion()
	// "scpsvpn" (no congestion key) always exercises the tunnel, also
	// while the transport lacks the configured default controller.
	rep := runBench(t, bin, out, "--conditions", "C1", "--contenders", "cubic,"+scps+",scpsvpn", "--duration", "3s")
	if len(rep.Results) != 3 || rep.Results[0].Contender != "cubic" || rep.Results[1].Contender != scps || rep.Results[2].Contender != "scpsvpn" {
		t.Fatalf("results.json rows: %+v", rep.Results)
	}
	for _, r := range rep.Results {
		if r.Condition != "C1" || !r.OK() {
			t.Errorf("%s under %s: %s", r.Contender, r.Condition, r.Status)
			continue
		}
		if r.PayloadBytes <= 0 || r.GoodputKBps <= 0 || r.Share <= 0 || r.Share > 1.05 || r.TTFBMs == nil || r.LinkPerByte == nil || len(r.Timeline) == 0 {
			t.Errorf("%s: incomplete measurement %+v", r.Contender, r)
		}
		// A fresh connection over a 300 ms link needs at least one round trip.
		if r.TTFBMs != nil && *r.TTFBMs < 290 {
			t.Errorf("%s: first byte after %.0f ms, faster than the link's RTT", r.Contender, *r.TTFBMs)
		}
	}
	if r := rep.Results[0]; r.TCPCongestion != "cubic/cubic" {
		t.Errorf("kernel run's sockets ran %q", r.TCPCongestion)
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "| condition | cubic | "+scps+" | scpsvpn |") || !strings.Contains(string(md), "\n| C1 | ") {
		t.Errorf("report.md has no results table:\n%s", md)
	}
	for _, p := range rep.Plots {
		checkSVG(t, filepath.Join(out, p), "cubic")
	}
	if len(rep.Plots) != 2 {
		t.Errorf("plots %v", rep.Plots)
	}
	t.Run("multipath", func(t *testing.T) { smokeMultipath(t, bin) })
}

// TestSmokeShare: the two-sites workload end to end, briefly: four
// endpoints (the testbed's second pair) over one emulated link, both
// downloads measured, shares and Jain's index in results.json, a plot.
func TestSmokeShare(t *testing.T) {
	bin := testenv.SmokeBinary(t)
	out := filepath.Join(t.TempDir(), "report")
	rep := runBench(t, bin, out, "--conditions", "C1", "--contenders", "share-sites", "--duration", "8s")
	if len(rep.Results) != 1 || !rep.Results[0].OK() || rep.Results[0].Sharing == nil {
		t.Fatalf("results: %+v", rep.Results)
	}
	s := rep.Results[0].Sharing
	// The shares are measured at the clients over 4 s: a stall of the
	// (race-built, loaded) client just before the window moves bytes the
	// link carried earlier into it, so together may read above the link
	// for so short a window, but not above twice it.
	if len(s.Flows) != 2 || s.Flows[0].GoodputKBps <= 0 || s.Flows[1].GoodputKBps <= 0 || s.Jain <= 0 || s.Together <= 0 || s.Together > 2 {
		t.Errorf("sharing %+v", s)
	}
	if s.Flows[1].StartS != 2 {
		t.Errorf("the second site started at %v s, want a quarter of the 8 s run", s.Flows[1].StartS)
	}
	found := false
	for _, p := range rep.Plots {
		if strings.HasPrefix(p, "share-") {
			found = true
			checkSVG(t, filepath.Join(out, p), "site 1", "site 2")
		}
	}
	if !found {
		t.Errorf("no share plot among %v", rep.Plots)
	}
}

// runBench runs bin's bench with args writing to out, checks it left no
// namespace behind, and reads its results.json.
func runBench(t *testing.T, bin, out string, args ...string) *Report {
	t.Helper()
	return runBenchWithin(t, 90*time.Second, bin, out, args...)
}

// runBenchWithin is runBench with a hang guard of limit.
func runBenchWithin(t *testing.T, limit time.Duration, bin, out string, args ...string) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(append([]string{"bench"}, args...), "--out", out)...)
	start := time.Now()
	output, err := cmd.CombinedOutput()
	t.Logf("bench took %v:\n%s", time.Since(start).Round(time.Millisecond), output)
	if err != nil {
		t.Fatalf("bench: %v", err)
	}
	if left := testbed.LeftBy(cmd.Process.Pid); len(left) > 0 {
		t.Errorf("bench left behind %v", left)
	}
	rep, err := ReadReport(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestSmokePage: the page-load workload end to end, briefly: a small page
// over HTTP/1.1 and HTTP/2, through kernel TCP and through both endpoints.
func TestSmokePage(t *testing.T) {
	bin := testenv.SmokeBinary(t)
	out := filepath.Join(t.TempDir(), "report")
	rep := runBench(t, bin, out, "--conditions", "B1", "--contenders", "cubic,scpsvpn", "--workload", "page", "--page-objects", "8", "--page-max-kb", "20")
	if len(rep.Results) != 2 || rep.Workload != WorkloadPage || rep.Page == nil {
		t.Fatalf("results: %+v", rep.Results)
	}
	for _, r := range rep.Results {
		if !r.OK() || r.Page == nil {
			t.Errorf("%s: %s", r.Contender, r.Status)
			continue
		}
		for _, l := range []struct {
			name     string
			l        *PageLoad
			maxConns int
		}{{"HTTP/1.1", r.Page.HTTP1, pageConns}, {"HTTP/2", r.Page.HTTP2, 1}} {
			if l.l == nil || l.l.Err != "" {
				t.Errorf("%s %s: %+v", r.Contender, l.name, l.l)
				continue
			}
			// Nothing loads a page faster than two round trips and its
			// bytes (HTTP/1.1's own floor is the measure, not a
			// bound: one connection's round trip overlaps another's
			// bytes); the margin is the emulator's rounding.
			if l.l.Ms < 0.9*r.Page.FloorMs || l.l.Conns < 1 || l.l.Conns > l.maxConns || l.l.LinkBytes < r.Page.Bytes || l.l.DownBytes < r.Page.Bytes || l.l.DownPackets < r.Page.Bytes/1500 {
				t.Errorf("%s %s: %+v (floor %.0f ms)", r.Contender, l.name, l.l, r.Page.FloorMs)
			}
		}
	}
	if r := rep.Results[0]; r.TCPCongestion != "cubic/cubic" {
		t.Errorf("kernel run's sockets ran %q", r.TCPCongestion)
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "## Page load") || !strings.Contains(string(md), "\n| B1 | scpsvpn | ") {
		t.Errorf("report.md has no page-load table:\n%s", md)
	}
}

// TestSmokeStalled: the stalled-readers workload end to end, briefly:
// both phases through kernel TCP and through both endpoints.
func TestSmokeStalled(t *testing.T) {
	bin := testenv.SmokeBinary(t)
	out := filepath.Join(t.TempDir(), "report")
	rep := runBench(t, bin, out, "--conditions", "B1", "--contenders", "cubic,scpsvpn", "--workload", "stalled",
		"--stalled", "2", "--stalled-wait", "1s", "--fresh-mb", "1", "--slow-kbps", "40", "--duration", "3s")
	if len(rep.Results) != 2 || rep.Workload != WorkloadStalled || rep.Stalled == nil {
		t.Fatalf("results: %+v", rep.Results)
	}
	for _, r := range rep.Results {
		if !r.OK() || r.Stalled == nil || r.Stalled.Fresh == nil || r.Stalled.Slow == nil {
			t.Errorf("%s: %s %+v", r.Contender, r.Status, r.Stalled)
			continue
		}
		// Every stalled download delivered its first byte, and the fresh
		// one all of its bytes, no faster than the link carries them (the
		// margin is the emulator's rounding).
		if f := r.Stalled.Fresh; f.Opened != 2 || !f.Done || f.Bytes != 1_000_000 || f.WholeShare <= 0 || f.WholeShare > 1.05 || f.TTFBMs < 45 {
			t.Errorf("%s fresh download: %+v", r.Contender, f)
		}
		// The slow reader reads no faster than it is paced, and the link
		// carries what the bulk download read at least.
		if s := r.Stalled.Slow; s.SlowKBps <= 0 || s.SlowKBps > 1.1*s.TargetKBps || s.BulkKBps <= 0 || s.LinkKBps < 0.95*s.BulkKBps {
			t.Errorf("%s slow reader: %+v", r.Contender, s)
		}
	}
	if r := rep.Results[0]; r.TCPCongestion != "cubic/cubic" {
		t.Errorf("kernel run's sockets ran %q", r.TCPCongestion)
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "## Stalled and slow readers") || !strings.Contains(string(md), "\n| B1 | scpsvpn | ") {
		t.Errorf("report.md has no stalled-readers table:\n%s", md)
	}
}

// TestSmokeFlows: the many-flows workload end to end, with few flows:
// every phase through kernel TCP and through both endpoints.
func TestSmokeFlows(t *testing.T) {
	bin := testenv.SmokeBinary(t)
	out := filepath.Join(t.TempDir(), "report")
	rep := runBench(t, bin, out, "--conditions", "B1", "--contenders", "cubic,scpsvpn", "--workload", "flows",
		"--flows", "20", "--flow-kb", "10", "--idle-flows", "200", "--opens", "100", "--duration", "2s")
	if len(rep.Results) != 2 || rep.Workload != WorkloadFlows || rep.Flows == nil {
		t.Fatalf("results: %+v", rep.Results)
	}
	for _, r := range rep.Results {
		f := r.Flows
		if !r.OK() || f == nil || f.Opens == nil || f.Downloads == nil || f.Request == nil {
			t.Errorf("%s: %s %+v", r.Contender, r.Status, f)
			continue
		}
		if o := f.Opens; o.Done != 100 || o.PerSecond <= 0 {
			t.Errorf("%s opens: %+v", r.Contender, o)
		}
		// Every download finished; nothing shares a link faster than it
		// carries (the margin is the window's rounding).
		if d := f.Downloads; d.Done != 20 || d.Bytes != 20*10_000 || d.Jain <= 0 || d.Jain > 1 || d.Together <= 0 || d.Together > 1.5 {
			t.Errorf("%s downloads: %+v", r.Contender, d)
		}
		// The server's answers are known by the client's address: the
		// far endpoint re-originates each flow from it, as kernel TCP
		// connects from it.
		if d := f.Downloads; d.LastAnswerMs <= 0 || d.LastAnswerMs > d.LastByteMs || d.JainRunning <= 0 || d.JainRunning > 1 || d.DoneBeforeLastAnswer > d.Done {
			t.Errorf("%s downloads: last answer at %v ms, Jain %v of the flows running then, %d done before it", r.Contender, d.LastAnswerMs, d.JainRunning, d.DoneBeforeLastAnswer)
		}
		// A request on a new connection needs a round trip at least.
		// Kernel TCP beside a UDP stream at the link's rate may lose its
		// SYN and not answer within the short window at all: then the
		// request counts as unanswered, and its bulk flows may starve.
		// Through the endpoints the datagrams get only their share:
		// requests are answered and every bulk flow moves.
		q := f.Request
		served := q.Count > 0 && q.P50RTTs >= 0.9 && q.BulkOpen > 0
		if r.Contender == "scpsvpn" && !served || q.Count == 0 && q.Unanswered == 0 || q.UDPOfferedKBps <= 0 {
			t.Errorf("%s requests: %+v", r.Contender, q)
		}
		if (f.Idle != nil) != (r.Contender == "scpsvpn") {
			t.Errorf("%s: idle phase %+v (only through the endpoints)", r.Contender, f.Idle)
		}
		if i := f.Idle; i != nil && (i.Open != 200 || i.RSSAfterA <= 0 || i.RSSAfterB <= 0) {
			t.Errorf("%s idle: %+v", r.Contender, i)
		}
	}
	if r := rep.Results[0]; r.TCPCongestion != "cubic/cubic" {
		t.Errorf("kernel run's sockets ran %q", r.TCPCongestion)
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "## Many flows") || !strings.Contains(string(md), "\n| B1 | scpsvpn | ") {
		t.Errorf("report.md has no many-flows table:\n%s", md)
	}
}

// TestSmokeResume: the careful-resume workload end to end, briefly, on
// careful resume's path (GEO 10/2 untold), through the endpoints only
// (the kernel's path is the other workloads'): every download completes
// and the far endpoint
// resumes from the path it learned: kept in memory for a new association
// and read from its state_dir after its restart, where the rate it
// resumes at is the one the warm-up measured (within the link's rate).
// It checks behaviour, not speed: the figures are docs/careful-resume.md's.
func TestSmokeResume(t *testing.T) {
	bin := testenv.SmokeBinary(t)
	out := filepath.Join(t.TempDir(), "report")
	rep := runBenchWithin(t, 4*time.Minute, bin, out, "--conditions", "GEO-10/2-CLEAN-NORATE", "--contenders", "scpsvpn",
		"--workload", "resume", "--burst-kb", "1000", "--warm", "6s", "--idle", "2s")
	if len(rep.Results) != 1 || rep.Workload != WorkloadResume || rep.Resume == nil {
		t.Fatalf("results: %+v", rep.Results)
	}
	cases := []string{CaseIdleBurst, CaseNewAssoc, CaseRestartBurst, CaseCapacityFell}
	for _, r := range rep.Results {
		if !r.OK() || r.Resume == nil || len(r.Resume.Bursts) != len(cases) {
			t.Errorf("%s: %s %+v", r.Contender, r.Status, r.Resume)
			continue
		}
		for i, b := range r.Resume.Bursts {
			if b.Case != cases[i] || b.Err != "" || b.Ms <= 0 || b.FloorShare <= 0 || b.FloorShare > 1.1 {
				t.Errorf("%s %s: %+v", r.Contender, cases[i], b)
			}
			resumes := b.Case != CaseIdleBurst
			if resumes && (b.ResumedKbps <= 0 || b.ResumedKbps > 10_500) || !resumes && b.ResumedKbps != 0 {
				t.Errorf("%s %s: resumed at %.0f kbit/s", r.Contender, b.Case, b.ResumedKbps)
			}
		}
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "## Careful resume") || !strings.Contains(string(md), "| scpsvpn | "+CaseRestartBurst+" | ") {
		t.Errorf("report.md has no careful-resume table:\n%s", md)
	}
}

// smokeMultipath: the two-link workload end to end, briefly (a part of
// TestSmokeBench, sharing its binary): two emulators (GEO and cellular),
// the bulk phase's path shares and probe, the bulk and parallel
// downloads' goodput after start-up, and a failover whose download
// arrives whole on the same connection.
func smokeMultipath(t *testing.T, bin string) {
	out := filepath.Join(t.TempDir(), "report")
	rep := runBench(t, bin, out, "--workload", "multipath", "--conditions", "GEO+CELL", "--contenders", "scpsvpn", "--duration", "4s", "--probe-size", "1000")
	if len(rep.Results) != 1 || !rep.Results[0].OK() || rep.Results[0].Multipath == nil {
		t.Fatalf("results: %+v", rep.Results)
	}
	m := rep.Results[0].Multipath
	t.Logf("%s", RunSummary(rep.Results[0]))
	if len(m.Paths) != 2 || m.Paths[0].Share+m.Paths[1].Share < 0.99 || m.Requests == 0 || m.FastRTTMs != 60 || m.P50Ms <= 0 || m.P50Ms > m.P95Ms {
		t.Errorf("bulk phase: %+v", m)
	}
	if m.IdleRequests != idleCount || m.IdleErr != "" || m.IdleP50Ms < m.FastRTTMs || m.IdleP50Ms > m.IdleP95Ms {
		t.Errorf("idle requests: %d, p50 %.1f / p95 %.1f ms (%s): want %d answered, at least the link's %.0f ms", m.IdleRequests, m.IdleP50Ms, m.IdleP95Ms, m.IdleErr, idleCount, m.FastRTTMs)
	}
	if m.SteadyKBps <= 0 || m.SumLimitKBps <= 0 || m.Parallel != bondParallel || m.ParallelKBps <= 0 || m.ParallelErr != "" {
		t.Errorf("bonding figures: %+v: want the bulk and the parallel downloads measured after start-up", m)
	}
	if !m.SHA256OK || m.FailoverErr != "" || m.FailBytes == 0 {
		t.Errorf("failover: %+v: want the download whole on its connection", m)
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "## Two links") || !strings.Contains(string(md), "\n| GEO+CELL | scpsvpn | ") {
		t.Errorf("report.md has no two-link table:\n%s", md)
	}
}
