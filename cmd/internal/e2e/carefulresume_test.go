package e2e

// This file tests careful resume across a restart through the real
// binary: what an endpoint learned of its peer's path survives in its
// state_dir and is used by the first association after it starts again.

import (
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"scpsvpn/cmd/internal/linkemu"
	"scpsvpn/cmd/internal/testbed"
	"scpsvpn/tunnel"
)

// TestRestartResumesFromStateDir: site B sends to site A over an untold
// 10 Mbit/s, 100 ms link, so B learns the path; B stops (SIGTERM), which
// writes the path to a file in its state_dir; B starts again with the
// same state_dir, its first association to A resumes from the file (the
// log says so, with the rate), and a transfer on it takes the controller
// through the resume's phases (status: the phase is past reconnaissance,
// whatever the phase: a loaded machine may make the path look different
// and the resume retreat, which is the resume at work too).
//
// The controller takes the saved path only if one RTT sample (the
// handshake's, else the first ACK's) is within a factor of two of the
// saved minimum (scps/cc careful.confirm): a machine that stalls an
// endpoint or the emulator for 100 ms at that moment makes the path
// look different, and the resume is rightly not used (phase "off"; made
// by SIGSTOPping A for 300 ms over B's handshake and first transfer). So
// an "off" is the machine's, once: B restarts again, up to
// restartAttempts times, and must resume on one of them; every restart
// must log the resume from the file. A resume that never happens fails
// every restart.
func TestRestartResumesFromStateDir(t *testing.T) {
	const restartAttempts = 3
	dir := linkemu.Dir{Rate: 10_000_000, Delay: 50 * time.Millisecond}
	tb := twoSites(t, testbed.Config{Kind: testbed.Emulated, Link: linkemu.Options{Fwd: dir, Ret: dir}})
	data := make([]byte, 3<<20)
	rand.Read(data)
	if err := sendChecked(tb, testbed.B, testbed.A, tb.A.TUN4, data); err != nil {
		t.Fatalf("transfer before the restart: %v", err)
	}
	for attempt := 1; ; attempt++ {
		phase := restartAndResume(t, tb, data)
		if phase != "off" {
			return
		}
		if attempt == restartAttempts {
			t.Errorf("B's association after each of %d restarts: careful resume \"off\", want a phase past reconnaissance", attempt)
			return
		}
		t.Logf("restart %d: careful resume \"off\" (an RTT sample out of range: a stalled machine's, or a resume not used): restarting again", attempt)
	}
}

// restartAndResume stops B with SIGTERM and starts it again, checks that
// its state_dir kept the path to A and that the new association resumed
// from it, sends data from B to A, and returns B's careful resume phase
// ("off" when the controller did not take the saved path; anything but a
// phase past reconnaissance, or "off", fails the test).
func restartAndResume(t *testing.T, tb *testbed.Testbed, data []byte) string {
	t.Helper()
	if code, err := tb.StopEndpoint(testbed.B, syscall.SIGTERM); err != nil || code != 0 {
		t.Fatalf("stopping B: exit %d, %v", code, err)
	}
	stateDir := strings.TrimSuffix(tb.B.KeyFile, ".key") + "-state"
	files, _ := filepath.Glob(filepath.Join(stateDir, "*.paths"))
	if len(files) != 1 {
		t.Fatalf("state_dir %s holds %v after B stopped, want one path state file", stateDir, files)
	}
	if b, err := os.ReadFile(files[0]); err != nil || !strings.Contains(string(b), tb.A.PublicKey) {
		t.Fatalf("path state file %s has no entry for A (%v):\n%s", files[0], err, b)
	}
	ups := strings.Count(logOf(tb, testbed.B), "association up")
	if err := tb.StartEndpoint(testbed.B); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(logOf(tb, testbed.B), "association up") <= ups {
		if time.Now().After(deadline) {
			t.Fatalf("no new association within 30 s of B's restart:\n%s", tb.LogTail(testbed.B, 30))
		}
		time.Sleep(50 * time.Millisecond)
	}
	resumed := logLines(tb, testbed.B, "resuming at the path saved") // since the start
	if len(resumed) == 0 || !strings.Contains(resumed[len(resumed)-1].attrs, "rate_bps=") {
		t.Fatalf("B's new association did not resume from the saved path:\n%s", tb.LogTail(testbed.B, 30))
	}
	if err := sendChecked(tb, testbed.B, testbed.A, tb.A.TUN4, data); err != nil {
		t.Fatalf("transfer after the restart: %v", err)
	}
	out, err := tb.Command(testbed.B, binary, "status", "--json", "--interface", tb.B.TUNName).Output()
	if err != nil {
		t.Fatalf("status at B: %v", err)
	}
	var st tunnel.Status
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("status at B: %v\n%s", err, out)
	}
	if len(st.Peers) != 1 {
		t.Fatalf("B's status has %d peers", len(st.Peers))
	}
	switch phase := st.Peers[0].Association.Resume; phase {
	case "unvalidated", "validating", "validated", "retreated":
		t.Logf("B's association after the restart: careful resume %s (%s)", phase, resumed[len(resumed)-1].attrs)
		return phase
	case "off":
		return phase
	default:
		t.Fatalf("B's association after the restart: careful resume %q, want a phase past reconnaissance", phase)
		return phase
	}
}
