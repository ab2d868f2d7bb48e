package linkemu

// Tests of the command's flag handling (no root needed): per-direction
// overrides, units, and one clear error naming the flag.

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"scpsvpn/cmd/internal/testenv"
)

// parseFlags runs the linkemu command's flag parsing on args.
func parseFlags(t *testing.T, args ...string) (Options, error) {
	t.Helper()
	return testenv.ParseFlags(Command(), optionsFromFlags, args...)
}

func TestFlagsBothDirectionsAndOverrides(t *testing.T) {
	o, err := parseFlags(t,
		"--ns-a", "x", "--ns-b", "y", "--addr-a", "10.200.0.1/24,fd00::1/64", "--addr-b", "10.200.0.2/24",
		"--rate", "1.5Mbit", "--ret-rate", "64kbit", "--delay", "300ms", "--fwd-loss", "3%", "--ber", "1e-7",
		"--ret-burst", "p=1%,r=25%,bad=80%", "--fwd-reorder", "2%:15ms", "--queue", "256KiB", "--fwd-rate-schedule", "0s:50Mbit,5s:10Mbit",
		"--outage", "20s:10s", "--outage", "40s:1s", "--outage-every", "15s:50ms", "--seed", "42", "--mtu", "1400")
	if err != nil {
		t.Fatal(err)
	}
	if o.NSA != "x" || o.NSB != "y" || o.DevA != "emu-a" || o.MTU != 1400 || o.Seed != 42 {
		t.Errorf("basic options: %+v", o)
	}
	if len(o.AddrA) != 2 || o.AddrA[1] != netip.MustParsePrefix("fd00::1/64") || len(o.AddrB) != 1 {
		t.Errorf("addresses %v %v", o.AddrA, o.AddrB)
	}
	if o.Fwd.Rate != 1_500_000 || o.Ret.Rate != 64_000 {
		t.Errorf("rates %d/%d", o.Fwd.Rate, o.Ret.Rate)
	}
	if o.Fwd.Delay != 300*time.Millisecond || o.Ret.Delay != 300*time.Millisecond {
		t.Errorf("delays %v/%v", o.Fwd.Delay, o.Ret.Delay)
	}
	if o.Fwd.Loss != 0.03 || o.Ret.Loss != 0 || o.Fwd.BER != 1e-7 || o.Ret.BER != 1e-7 {
		t.Errorf("losses %+v %+v", o.Fwd, o.Ret)
	}
	if o.Fwd.Burst != nil || o.Ret.Burst == nil || o.Ret.Burst.LossBad != 0.8 {
		t.Errorf("bursts %v %v", o.Fwd.Burst, o.Ret.Burst)
	}
	if o.Fwd.Queue != 256<<10 || o.Ret.Queue != 256<<10 {
		t.Errorf("queues %d/%d", o.Fwd.Queue, o.Ret.Queue)
	}
	if o.Fwd.Reorder != (Reorder{P: 0.02, Delay: 15 * time.Millisecond}) || o.Ret.Reorder != (Reorder{}) {
		t.Errorf("reorder %+v %+v", o.Fwd.Reorder, o.Ret.Reorder)
	}
	if len(o.Fwd.RateSchedule) != 2 || o.Ret.RateSchedule != nil {
		t.Errorf("schedules %v %v", o.Fwd.RateSchedule, o.Ret.RateSchedule)
	}
	if len(o.Outages) != 2 || o.Outages[1] != (Outage{40 * time.Second, time.Second}) || o.OutageEvery.Every != 15*time.Second {
		t.Errorf("outages %v %v", o.Outages, o.OutageEvery)
	}
}

// TestRateFlagsReadTheConfigGrammar checks the flags read rates and sizes
// exactly as a config file does (configs.ParseRate, configs.ParseSize), with
// 0 meaning an unthrottled direction.
func TestRateFlagsReadTheConfigGrammar(t *testing.T) {
	o, err := parseFlags(t, "--fwd-rate", "10mbit/s", "--ret-rate", "0", "--queue", "1500KB", "--fwd-rate-schedule", "0s:2Mbps,1s:0")
	if err != nil {
		t.Fatal(err)
	}
	if o.Fwd.Rate != 10_000_000 || o.Ret.Rate != 0 {
		t.Errorf("rates %d/%d, want 10000000/0", o.Fwd.Rate, o.Ret.Rate)
	}
	if o.Fwd.Queue != 1_500_000 || o.Ret.Queue != 1_500_000 {
		t.Errorf("queues %d/%d", o.Fwd.Queue, o.Ret.Queue)
	}
	if want := []RateStep{{0, 2_000_000}, {time.Second, 0}}; len(o.Fwd.RateSchedule) != 2 || o.Fwd.RateSchedule[0] != want[0] || o.Fwd.RateSchedule[1] != want[1] {
		t.Errorf("schedule %v, want %v", o.Fwd.RateSchedule, want)
	}
}

func TestBadFlagsNameTheFlag(t *testing.T) {
	cases := [][]string{
		{"--rate", "1.5Mbt"},
		{"--fwd-rate", "fast"},
		{"--ret-delay", "300"},
		{"--delay", "-1s"},
		{"--loss", "300%"},
		{"--fwd-ber", "2"},
		{"--burst", "p=1%"},
		{"--ret-queue", "lots"},
		{"--queue", "NaN"},
		{"--reorder", "2%"},
		{"--ret-rate", "0.1bit"},
		{"--rate", "unlimited"},
		{"--rate-schedule", "5s:1Mbit,1s:2Mbit"},
		{"--outage", "20s"},
		{"--outage-every", "1s:2s"},
		{"--addr-a", "10.200.0.1"},
		{"--dev-a", "a-name-that-is-too-long"},
		{"--no-such-flag", "1"},
	}
	for _, args := range cases {
		_, err := parseFlags(t, args...)
		if err == nil {
			t.Errorf("%v accepted", args)
			continue
		}
		msg := err.Error()
		name := strings.TrimPrefix(args[0], "--")
		if !strings.Contains(msg, name) || strings.Contains(msg, "\n") {
			t.Errorf("%v: error %q should be one line naming %s", args, msg, name)
		}
	}
}
