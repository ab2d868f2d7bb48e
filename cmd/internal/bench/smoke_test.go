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
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// "scpsvpn" (no congestion key) always exercises the tunnel, also
	// while the transport lacks the configured default controller.
	cmd := exec.CommandContext(ctx, bin, "bench", "--conditions", "C1", "--contenders", "cubic,"+scps+",scpsvpn", "--duration", "3s", "--out", out)
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
}
