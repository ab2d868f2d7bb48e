package configs

// Human units shared by the config file and the command-line flags:
// bit rates ("1.5Mbit", "64kbit") and byte sizes ("4MiB").

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

var rateUnits = []struct {
	suffix string
	mult   float64
}{
	{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1},
	{"gbps", 1e9}, {"mbps", 1e6}, {"kbps", 1e3}, {"bps", 1},
}

// ParseRate parses a bit rate such as "1.5Mbit", "64kbit" or "10Gbit"
// (decimal prefixes, as link rates are quoted) into bits per second.
func ParseRate(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	for _, u := range rateUnits {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
			if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
				break
			}
			r := v * u.mult
			if r > 1e12 {
				return 0, fmt.Errorf("%q is too fast: use at most 1000Gbit", s)
			}
			return int64(math.Round(r)), nil
		}
	}
	return 0, fmt.Errorf("%q is not a rate: use a number and a unit, e.g. 1.5Mbit, 64kbit or 10Gbit", s)
}

// FormatRate prints a bit rate in the unit ParseRate reads back.
func FormatRate(bps int64) string {
	switch {
	case bps == 0:
		return "0bit"
	case bps%1_000_000_000 == 0:
		return fmt.Sprintf("%dGbit", bps/1_000_000_000)
	case bps >= 1_000_000:
		return strconv.FormatFloat(float64(bps)/1e6, 'f', -1, 64) + "Mbit"
	case bps >= 1_000:
		return strconv.FormatFloat(float64(bps)/1e3, 'f', -1, 64) + "kbit"
	}
	return fmt.Sprintf("%dbit", bps)
}

var sizeUnits = []struct {
	suffix string
	mult   float64
}{
	{"gib", 1 << 30}, {"mib", 1 << 20}, {"kib", 1 << 10},
	{"gb", 1e9}, {"mb", 1e6}, {"kb", 1e3}, {"b", 1},
}

// ParseSize parses a byte size such as "4MiB", "1500KB" or "65536".
func ParseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := 1.0
	for _, u := range sizeUnits {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(num), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || v*mult > 1<<40 {
		return 0, fmt.Errorf("%q is not a size: use e.g. 4MiB, 512KiB or 65536", s)
	}
	return int64(v * mult), nil
}
