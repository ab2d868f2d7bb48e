package linkemu

// This file owns the units of the emulator's flags that only it has: loss
// probabilities ("3%"), bit-error rates ("1e-6"), reordering ("1%:20ms")
// and the schedule syntaxes (rate schedules, outages, Gilbert-Elliott burst
// loss). Rates and sizes
// are read by configs.ParseRate and configs.ParseSize, the grammar of the
// config file, so a "64kbit" means the same thing everywhere.

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"scpsvpn/configs"
)

// ParseLoss parses a probability written as a percentage ("3%", "0.1%") or
// as a fraction ("0.03") into [0, 1].
func ParseLoss(s string) (float64, error) {
	t := strings.TrimSpace(s)
	scale := 1.0
	if num, ok := strings.CutSuffix(t, "%"); ok {
		t, scale = strings.TrimSpace(num), 100
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) {
		return 0, fmt.Errorf("loss %q: use a percentage (3%%) or a fraction (0.03)", s)
	}
	v /= scale
	if v < 0 || v > 1 {
		return 0, fmt.Errorf("loss %q is outside 0%%..100%%", s)
	}
	return v, nil
}

// ParseBER parses a bit-error rate such as "1e-6" (a probability per bit,
// below 1).
func ParseBER(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(v) {
		return 0, fmt.Errorf("bit-error rate %q: use a probability per bit, e.g. 1e-6", s)
	}
	if v < 0 || v >= 1 {
		return 0, fmt.Errorf("bit-error rate %q must be in [0, 1)", s)
	}
	return v, nil
}

// RateStep sets the link rate from At (since the emulator started) on.
type RateStep struct {
	At   time.Duration
	Rate int64 // bits per second; 0 = unlimited
}

// ParseRateSchedule parses "0s:50Mbit,5s:10Mbit": comma-separated
// offset:rate steps with strictly increasing offsets.
func ParseRateSchedule(s string) ([]RateStep, error) {
	var steps []RateStep
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		at, rate, ok := strings.Cut(item, ":")
		if !ok {
			return nil, fmt.Errorf("rate schedule step %q: use offset:rate, e.g. 5s:10Mbit", item)
		}
		d, err := parseOffset(at)
		if err != nil {
			return nil, fmt.Errorf("rate schedule step %q: %w", item, err)
		}
		r, err := configs.ParseRate(rate)
		if err != nil {
			return nil, fmt.Errorf("rate schedule step %q: %w", item, err)
		}
		if n := len(steps); n > 0 && d <= steps[n-1].At {
			return nil, fmt.Errorf("rate schedule step %q: offsets must increase", item)
		}
		steps = append(steps, RateStep{At: d, Rate: r})
	}
	if len(steps) == 0 {
		return nil, errors.New("rate schedule is empty: use e.g. 0s:50Mbit,5s:10Mbit")
	}
	return steps, nil
}

// Outage is a window during which the link carries nothing, both ways.
type Outage struct {
	Start    time.Duration // since the emulator started
	Duration time.Duration
}

// ParseOutage parses "20s:10s" (start:duration).
func ParseOutage(s string) (Outage, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return Outage{}, fmt.Errorf("outage %q: use start:duration, e.g. 20s:10s", s)
	}
	start, err := parseOffset(a)
	if err != nil {
		return Outage{}, fmt.Errorf("outage %q: %w", s, err)
	}
	dur, err := time.ParseDuration(strings.TrimSpace(b))
	if err != nil || dur <= 0 {
		return Outage{}, fmt.Errorf("outage %q: duration must be positive, e.g. 10s", s)
	}
	return Outage{Start: start, Duration: dur}, nil
}

// ParseReorder parses "1%:20ms": the share of packets held back and by how
// much longer than the others they take.
func ParseReorder(s string) (Reorder, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return Reorder{}, fmt.Errorf("reorder %q: use share:delay, e.g. 1%%:20ms", s)
	}
	p, err := ParseLoss(a)
	if err != nil {
		return Reorder{}, fmt.Errorf("reorder %q: share: %w", s, err)
	}
	d, err := time.ParseDuration(strings.TrimSpace(b))
	if err != nil || d <= 0 || d > time.Minute {
		return Reorder{}, fmt.Errorf("reorder %q: the delay must be a duration in (0, 1m], e.g. 20ms", s)
	}
	return Reorder{P: p, Delay: d}, nil
}

// Periodic is an outage of Duration that starts every Every (first at
// Every, not at 0, so a link always starts up).
type Periodic struct {
	Every    time.Duration
	Duration time.Duration
}

// ParsePeriodic parses "15s:50ms" (interval:duration).
func ParsePeriodic(s string) (Periodic, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return Periodic{}, fmt.Errorf("periodic outage %q: use interval:duration, e.g. 15s:50ms", s)
	}
	every, err1 := time.ParseDuration(strings.TrimSpace(a))
	dur, err2 := time.ParseDuration(strings.TrimSpace(b))
	if err1 != nil || err2 != nil || every <= 0 || dur <= 0 {
		return Periodic{}, fmt.Errorf("periodic outage %q: use positive durations interval:duration, e.g. 15s:50ms", s)
	}
	if dur >= every {
		return Periodic{}, fmt.Errorf("periodic outage %q: duration must be shorter than the interval", s)
	}
	return Periodic{Every: every, Duration: dur}, nil
}

// GilbertElliott is a two-state burst-loss model. Before each packet the
// state moves Good->Bad with probability P or Bad->Good with probability R;
// the packet is then lost with probability LossGood or LossBad of the state.
// The mean loss is (R*LossGood + P*LossBad)/(P+R) and the mean time in the
// bad state is 1/R packets.
type GilbertElliott struct {
	P        float64 // good -> bad transition probability per packet
	R        float64 // bad -> good transition probability per packet
	LossGood float64 // loss probability in the good state
	LossBad  float64 // loss probability in the bad state
}

// BurstSyntax documents ParseBurst's grammar for flag usages.
const BurstSyntax = `p=GOOD->BAD,r=BAD->GOOD[,good=LOSS][,bad=LOSS] (per-packet probabilities, e.g. "p=1%,r=25%,bad=100%"; good defaults to 0%, bad to 100%)`

// ParseBurst parses a Gilbert-Elliott model written as comma-separated
// key=value pairs: p (good->bad), r (bad->good), good and bad (loss per
// state). p and r are required; good defaults to 0 and bad to 1.
func ParseBurst(s string) (GilbertElliott, error) {
	ge := GilbertElliott{LossBad: 1}
	var haveP, haveR bool
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			return GilbertElliott{}, fmt.Errorf("burst %q: use %s", s, BurstSyntax)
		}
		p, err := ParseLoss(v)
		if err != nil {
			return GilbertElliott{}, fmt.Errorf("burst %q: %s: %w", s, strings.TrimSpace(k), err)
		}
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "p":
			ge.P, haveP = p, true
		case "r":
			ge.R, haveR = p, true
		case "good":
			ge.LossGood = p
		case "bad":
			ge.LossBad = p
		default:
			return GilbertElliott{}, fmt.Errorf("burst %q: unknown key %q: use %s", s, k, BurstSyntax)
		}
	}
	if !haveP || !haveR {
		return GilbertElliott{}, fmt.Errorf("burst %q: p and r are required: use %s", s, BurstSyntax)
	}
	if ge.R == 0 && ge.P > 0 {
		return GilbertElliott{}, fmt.Errorf("burst %q: r=0 would stay in the bad state forever", s)
	}
	return ge, nil
}

// MeanLoss is the model's stationary loss probability.
func (ge GilbertElliott) MeanLoss() float64 {
	if ge.P+ge.R == 0 {
		return ge.LossGood
	}
	return (ge.R*ge.LossGood + ge.P*ge.LossBad) / (ge.P + ge.R)
}

// parseOffset parses a non-negative duration; a bare "0" is allowed as
// time.ParseDuration does.
func parseOffset(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("offset %q: use a duration such as 5s", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("offset %q is negative", s)
	}
	return d, nil
}
