package linkemu

// Tests of the loss and schedule parsers, with a fuzz target: they read
// command-line input and must reject, never panic. The rate and size
// grammar is tested in configs.

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseLoss(t *testing.T) {
	good := map[string]float64{"3%": 0.03, "0.1%": 0.001, "0.03": 0.03, "0": 0, "100%": 1, " 1 ": 1}
	for in, want := range good {
		got, err := ParseLoss(in)
		if err != nil || math.Abs(got-want) > 1e-12 {
			t.Errorf("ParseLoss(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "%", "101%", "-1%", "1.5", "x", "NaN"} {
		if _, err := ParseLoss(in); err == nil {
			t.Errorf("ParseLoss(%q) accepted", in)
		}
	}
}

func TestParseBER(t *testing.T) {
	if v, err := ParseBER("1e-6"); err != nil || v != 1e-6 {
		t.Errorf("ParseBER(1e-6) = %v, %v", v, err)
	}
	for _, in := range []string{"1", "-1e-6", "x", ""} {
		if _, err := ParseBER(in); err == nil {
			t.Errorf("ParseBER(%q) accepted", in)
		}
	}
}

func TestParseSchedules(t *testing.T) {
	steps, err := ParseRateSchedule("0s:50Mbit, 5s:10Mbit,1m:0")
	if err != nil {
		t.Fatal(err)
	}
	want := []RateStep{{0, 50_000_000}, {5 * time.Second, 10_000_000}, {time.Minute, 0}}
	if len(steps) != len(want) {
		t.Fatalf("got %v", steps)
	}
	for i := range want {
		if steps[i] != want[i] {
			t.Errorf("step %d = %v, want %v", i, steps[i], want[i])
		}
	}
	for _, in := range []string{"", "5s", "5s:10Mbit,1s:1Mbit", "5s:10Mbit,5s:1Mbit", "-1s:1Mbit", "x:1Mbit", "1s:fast"} {
		if _, err := ParseRateSchedule(in); err == nil {
			t.Errorf("ParseRateSchedule(%q) accepted", in)
		}
	}

	o, err := ParseOutage("20s:10s")
	if err != nil || o != (Outage{20 * time.Second, 10 * time.Second}) {
		t.Errorf("ParseOutage = %v, %v", o, err)
	}
	for _, in := range []string{"20s", "20s:0s", "x:1s", "-1s:1s", "1s:-1s"} {
		if _, err := ParseOutage(in); err == nil {
			t.Errorf("ParseOutage(%q) accepted", in)
		}
	}

	p, err := ParsePeriodic("15s:50ms")
	if err != nil || p != (Periodic{15 * time.Second, 50 * time.Millisecond}) {
		t.Errorf("ParsePeriodic = %v, %v", p, err)
	}
	for _, in := range []string{"15s", "1s:1s", "0s:1ms", "1s:0s", "x:y"} {
		if _, err := ParsePeriodic(in); err == nil {
			t.Errorf("ParsePeriodic(%q) accepted", in)
		}
	}
}

func TestParseReorder(t *testing.T) {
	r, err := ParseReorder(" 2% : 15ms ")
	if err != nil || r != (Reorder{P: 0.02, Delay: 15 * time.Millisecond}) {
		t.Errorf("ParseReorder = %+v, %v", r, err)
	}
	for _, in := range []string{"", "2%", "2%:0s", "2%:-1ms", "200%:1ms", "x:1ms", "1%:2m", ":"} {
		if _, err := ParseReorder(in); err == nil {
			t.Errorf("ParseReorder(%q) accepted", in)
		} else if !strings.Contains(err.Error(), "reorder") {
			t.Errorf("ParseReorder(%q) error does not say what: %v", in, err)
		}
	}
}

func TestParseBurst(t *testing.T) {
	ge, err := ParseBurst("p=1%,r=25%")
	if err != nil || ge != (GilbertElliott{P: 0.01, R: 0.25, LossGood: 0, LossBad: 1}) {
		t.Errorf("defaults: %+v, %v", ge, err)
	}
	ge, err = ParseBurst(" p=0.05 , r=50%, good=0.1%, bad=80% ")
	if err != nil || ge != (GilbertElliott{P: 0.05, R: 0.5, LossGood: 0.001, LossBad: 0.8}) {
		t.Errorf("full: %+v, %v", ge, err)
	}
	if m := (GilbertElliott{P: 0.01, R: 0.25, LossBad: 1}).MeanLoss(); math.Abs(m-0.01/0.26) > 1e-12 {
		t.Errorf("mean loss %v", m)
	}
	for _, in := range []string{"", "p=1%", "r=1%", "p=1%,r=0", "p=1%,r=2%,x=1", "p=1%,r=200%", "p", "p=1%;r=1%"} {
		if _, err := ParseBurst(in); err == nil {
			t.Errorf("ParseBurst(%q) accepted", in)
		} else if !strings.Contains(err.Error(), "burst") {
			t.Errorf("ParseBurst(%q) error does not say what: %v", in, err)
		}
	}
}

// FuzzParsers feeds arbitrary text to every parser of this package (rates
// and sizes are configs'): errors are fine, panics
// and out-of-range results are not.
func FuzzParsers(f *testing.F) {
	for _, s := range []string{"1.5Mbit", "3%", "1e-6", "1MiB", "0s:50Mbit,5s:10Mbit", "20s:10s", "15s:50ms",
		"p=1%,r=25%,good=0,bad=100%", "1%:20ms", "", ":", ",", "=", "1e400Mbit", "-0", "0x10kbit", "9223372036854775807s:1bit"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if l, err := ParseLoss(s); err == nil && (l < 0 || l > 1) {
			t.Fatalf("ParseLoss(%q) = %v", s, l)
		}
		if b, err := ParseBER(s); err == nil && (b < 0 || b >= 1) {
			t.Fatalf("ParseBER(%q) = %v", s, b)
		}
		if steps, err := ParseRateSchedule(s); err == nil {
			d := Dir{RateSchedule: steps}
			if err := d.validate("fuzz"); err != nil {
				t.Fatalf("ParseRateSchedule(%q) = %v fails validation: %v", s, steps, err)
			}
		}
		if o, err := ParseOutage(s); err == nil && (o.Start < 0 || o.Duration <= 0) {
			t.Fatalf("ParseOutage(%q) = %v", s, o)
		}
		if p, err := ParsePeriodic(s); err == nil && (p.Duration <= 0 || p.Duration >= p.Every) {
			t.Fatalf("ParsePeriodic(%q) = %v", s, p)
		}
		if r, err := ParseReorder(s); err == nil {
			d := Dir{Reorder: r}
			if err := d.validate("fuzz"); err != nil {
				t.Fatalf("ParseReorder(%q) = %+v fails validation: %v", s, r, err)
			}
		}
		if ge, err := ParseBurst(s); err == nil {
			d := Dir{Burst: &ge}
			if err := d.validate("fuzz"); err != nil {
				t.Fatalf("ParseBurst(%q) = %+v fails validation: %v", s, ge, err)
			}
		}
	})
}
