package bench

import (
	"strings"
	"testing"
	"time"

	"scpsvpn/cmd/internal/testenv"
)

// parseFlags runs the bench command's flag parsing on args.
func parseFlags(t *testing.T, args ...string) (Options, error) {
	t.Helper()
	return testenv.ParseFlags(Command(), optionsFromFlags, args...)
}

func TestFlagDefaults(t *testing.T) {
	o, err := parseFlags(t, "--out", "r")
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Conditions) != len(Conditions) || len(o.Contenders) != len(AllContenders()) {
		t.Errorf("default selection: %d conditions, %d contenders", len(o.Conditions), len(o.Contenders))
	}
	if o.Duration != 20*time.Second || o.Seed != 1 || o.ProbeEvery != 500*time.Millisecond || o.ProbeSize != 100 || o.Out != "r" {
		t.Errorf("defaults %+v", o)
	}
	if o.Timeline != "C2" {
		t.Errorf("timeline %q, want C2", o.Timeline)
	}
}

func TestFlagSelection(t *testing.T) {
	o, err := parseFlags(t, "--conditions", "leo,C1", "--contenders", "cubic,scpsvpn-vj", "--duration", "3s", "--out", "x", "--seed", "9")
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Conditions) != 2 || o.Conditions[0].Name != "LEO" || o.Contenders[1].Congestion != "vj" || o.Duration != 3*time.Second || o.Seed != 9 {
		t.Errorf("%+v", o)
	}
	if o.Timeline != "LEO" {
		t.Errorf("timeline %q, want the first condition without C2", o.Timeline)
	}
	o, err = parseFlags(t, "--conditions", "C1,C2", "--timeline", "c1", "--out", "x")
	if err != nil || o.Timeline != "C1" {
		t.Errorf("--timeline c1: %q, %v", o.Timeline, err)
	}
}

func TestFlagPage(t *testing.T) {
	o, err := parseFlags(t, "--out", "x", "--workload", "page", "--contenders", "bbr,scpsvpn")
	if err != nil {
		t.Fatal(err)
	}
	if o.Workload != WorkloadPage || o.Page != DefaultPage {
		t.Errorf("workload %q, page %+v", o.Workload, o.Page)
	}
	o, err = parseFlags(t, "--out", "x", "--workload", "page", "--page-objects", "8", "--page-max-kb", "20")
	if err != nil || o.Page != NewPageSpec(8, 20_000) {
		t.Errorf("a small page: %+v, %v", o.Page, err)
	}
	if o, _ := parseFlags(t, "--out", "x"); o.Workload != WorkloadDownload {
		t.Errorf("default workload %q", o.Workload)
	}
}

func TestFlagStalled(t *testing.T) {
	o, err := parseFlags(t, "--out", "x", "--workload", "stalled")
	if err != nil || o.Workload != WorkloadStalled || o.Stalled != DefaultStalled {
		t.Fatalf("workload %q, stalled %+v, %v", o.Workload, o.Stalled, err)
	}
	o, err = parseFlags(t, "--out", "x", "--workload", "stalled", "--stalled", "2", "--stalled-wait", "1s", "--fresh-mb", "3", "--slow-kbps", "50")
	want := StalledSpec{Stalled: 2, Wait: time.Second, FreshBytes: 3_000_000, SlowRate: 50_000}
	if err != nil || o.Stalled != want {
		t.Errorf("resized: %+v, %v", o.Stalled, err)
	}
}

func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "out"},
		{[]string{"--out", "x", "--conditions", "C9"}, "--conditions"},
		{[]string{"--out", "x", "--contenders", "quic"}, "--contenders"},
		{[]string{"--out", "x", "--duration", "100ms"}, "--duration"},
		{[]string{"--out", "x", "--duration", "2h"}, "--duration"},
		{[]string{"--out", " "}, "--out"},
		{[]string{"--out", "x", "--probe-every", "1ms"}, "--probe-every"},
		{[]string{"--out", "x", "--probe-size", "0"}, "--probe-size"},
		{[]string{"--out", "x", "--conditions", "C1", "--timeline", "C2"}, "--timeline"},
		{[]string{"--out", "x", "--workload", "video"}, "--workload"},
		{[]string{"--out", "x", "--workload", "page", "--contenders", "bbr,share-sites"}, "--contenders share-sites"},
		{[]string{"--out", "x", "--page-objects", "0"}, "--page-objects"},
		{[]string{"--out", "x", "--page-max-kb", "0"}, "--page-max-kb"},
		{[]string{"--out", "x", "--stalled", "0"}, "--stalled"},
		{[]string{"--out", "x", "--stalled-wait", "-1s"}, "--stalled-wait"},
		{[]string{"--out", "x", "--fresh-mb", "0"}, "--fresh-mb"},
		{[]string{"--out", "x", "--slow-kbps", "0"}, "--slow-kbps"},
	} {
		_, err := parseFlags(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}

func TestRunSummary(t *testing.T) {
	r := &Result{Status: StatusOK, GoodputKBps: 91.25, Share: 0.5, LimitShare: 0.515, TTFBMs: ptr(612.4), Probe: &Latency{Count: 3, P50Ms: 400}}
	if got, want := RunSummary(r), "91.2 kB/s (50% of the link, 52% of the payload limit), first byte 612 ms, probe p50 400 ms"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	r.QueueDropPct, r.Outage = 1.234, &OutageResult{Survived: true, Recovery: 0.87}
	if got, want := RunSummary(r), "91.2 kB/s (50% of the link, 52% of the payload limit), queue drops 1.23%, outage: survived true, recovery 87%, first byte 612 ms, probe p50 400 ms"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if got := RunSummary(&Result{Status: "failed: because"}); got != "failed: because" {
		t.Errorf("%q", got)
	}
}

// TestFlagMultipath: --workload multipath selects the two-link conditions
// for all, and a condition of the wrong kind is refused, named.
func TestFlagMultipath(t *testing.T) {
	o, err := parseFlags(t, "--out", "x", "--workload", "multipath", "--contenders", "scpsvpn")
	if err != nil || len(o.Conditions) != len(TwoLinkConditions) || o.Conditions[0].Second == nil {
		t.Errorf("multipath, all: %+v, %v", o.Conditions, err)
	}
	if _, err := parseFlags(t, "--out", "x", "--workload", "multipath", "--conditions", "C1"); err == nil || !strings.Contains(err.Error(), "C1") {
		t.Errorf("multipath on C1: %v, want an error naming it", err)
	}
	if _, err := parseFlags(t, "--out", "x", "--conditions", "GEO+CELL"); err == nil || !strings.Contains(err.Error(), "multipath") {
		t.Errorf("a download on GEO+CELL: %v, want an error naming the workload", err)
	}
}
