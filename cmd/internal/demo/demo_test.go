package demo

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"scpsvpn/cmd/internal/bench"
	"scpsvpn/cmd/internal/testbed"
	"scpsvpn/cmd/internal/testenv"
)

// parseFlags runs the demo command's flag parsing on args.
func parseFlags(t *testing.T, args ...string) (Options, error) {
	t.Helper()
	return testenv.ParseFlags(Command(), optionsFromFlags, args...)
}

func TestDefaultsAreC2(t *testing.T) {
	o, err := parseFlags(t)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := bench.SelectConditions("C2")
	if err != nil {
		t.Fatal(err)
	}
	l, want := o.Link, c2[0]
	if l.Down != want.Down || l.Up != want.Up || l.RTT != want.RTT || l.LossDown != want.LossDown || l.LossUp != want.LossUp {
		t.Errorf("default link %+v, want C2 %+v", l, want)
	}
	if o.Duration != 20*time.Second || o.Kernel != "cubic" || o.Congestion != "" || o.Seed != 1 {
		t.Errorf("defaults %+v", o)
	}
}

func TestLinkFlags(t *testing.T) {
	o, err := parseFlags(t, "--rate", "10Mbit", "--up-rate", "2Mbit", "--rtt", "600ms", "--loss", "1%", "--up-loss", "0.1%",
		"--duration", "5s", "--tcp", "bbr", "--congestion", "vj", "--seed", "3")
	if err != nil {
		t.Fatal(err)
	}
	l := o.Link
	if l.Down != 10_000_000 || l.Up != 2_000_000 || l.RTT != 600*time.Millisecond || l.LossDown != 0.01 || l.LossUp != 0.001 {
		t.Errorf("link %+v", l)
	}
	if o.Duration != 5*time.Second || o.Kernel != "bbr" || o.Congestion != "vj" || o.Seed != 3 {
		t.Errorf("%+v", o)
	}
	o, err = parseFlags(t, "--down-rate", "50Mbit", "--rate", "1Mbit")
	if err != nil || o.Link.Down != 50_000_000 || o.Link.Up != 1_000_000 {
		t.Errorf("--down-rate over --rate: %+v %v", o.Link, err)
	}
}

func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--rate", "fast"}, "--rate"},
		{[]string{"--rate", "0"}, "--rate"},
		{[]string{"--up-rate", "-1Mbit"}, "--up-rate"},
		{[]string{"--loss", "200%"}, "--loss"},
		{[]string{"--up-loss", "x"}, "--up-loss"},
		{[]string{"--rtt", "0s"}, "RTT"},
		{[]string{"--duration", "10ms"}, "--duration"},
		{[]string{"--tcp", "Cu/bic"}, "--tcp"},
		{[]string{"--congestion", "bic"}, "--congestion"},
	} {
		_, err := parseFlags(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}

func TestRenderTable(t *testing.T) {
	link := bench.Condition{Name: "demo", Down: 1_500_000, Up: 1_500_000, RTT: 300 * time.Millisecond, LossDown: 0.03}
	ms := func(v float64) *float64 { return &v }
	kernel := &bench.Result{Label: "kernel TCP cubic", Status: bench.StatusOK, GoodputKBps: 45.6, Share: 0.25, TTFBMs: ms(612)}
	scps := &bench.Result{Label: "scpsvpn (hybrid, default)", Status: bench.StatusOK, GoodputKBps: 159.6, Share: 0.875, TTFBMs: ms(306)}
	var b bytes.Buffer
	RenderTable(&b, link, kernel, scps)
	got := b.String()
	lines := strings.Split(got, "\n")
	if len(lines) < 5 {
		t.Fatalf("table:\n%s", got)
	}
	// Labels start each row; numbers end where their heading ends.
	end := func(line, s string) int {
		i := strings.Index(line, s)
		if i < 0 {
			t.Fatalf("%q not in %q", s, line)
		}
		return i + len(s)
	}
	header, k, sc, ratio := lines[0], lines[1], lines[2], lines[3]
	if !strings.HasPrefix(k, "kernel TCP cubic ") || !strings.HasPrefix(sc, "scpsvpn (hybrid, default) ") || !strings.HasPrefix(ratio, "scpsvpn / kernel TCP ") {
		t.Errorf("labels:\n%s", got)
	}
	for _, col := range []struct{ head, k, s, r string }{
		{"goodput", "45.6 kB/s", "159.6 kB/s", "3.50x"},
		{"share of link", "25%", "88%", ""},
		{"time to first byte", "612 ms", "306 ms", "0.50x"},
	} {
		e := end(header, col.head)
		if end(k, col.k) != e || end(sc, col.s) != e || (col.r != "" && end(ratio, col.r) != e) {
			t.Errorf("column %q is not aligned:\n%s", col.head, got)
		}
	}
	if !strings.Contains(got, "link payload capacity 182.5 kB/s") {
		t.Errorf("no capacity line:\n%s", got)
	}
	b.Reset()
	scps.Status = "failed: the endpoint did not start"
	RenderTable(&b, link, kernel, scps)
	if !strings.Contains(b.String(), "failed") || strings.Contains(b.String(), "scpsvpn / kernel TCP") {
		t.Errorf("a failed run:\n%s", b.String())
	}
}

// TestSmokeDemo is CI's smoke run of `scpsvpn demo`: the real binary, 3 s
// per download, as root; it must finish, print the table and leave nothing.
func TestSmokeDemo(t *testing.T) {
	bin := testenv.SmokeBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "demo", "--duration", "3s")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("demo took %v\nstdout:\n%s\nstderr:\n%s", time.Since(start).Round(time.Millisecond), stdout.String(), stderr.String())
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	out := stdout.String()
	for _, want := range []string{"1.5Mbit down / 1.5Mbit up, RTT 300ms, loss 3% down", "goodput", "kernel TCP cubic", "scpsvpn (", "scpsvpn / kernel TCP"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	if !strings.Contains(stderr.String(), "kB/s") {
		t.Error("no progress on stderr")
	}
	if left := testbed.LeftBy(cmd.Process.Pid); len(left) > 0 {
		t.Errorf("demo left %v", left)
	}
}
