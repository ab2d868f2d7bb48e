package configs

// Human units shared by the config file and the command-line flags of
// linkemu, demo and bench: bit rates ("1.5Mbit", "64kbit", "10mbit/s") and
// byte sizes ("4MiB"). There is one grammar so that "64kbit" means the same
// in a config key and on a command line.

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// MaxRate bounds parsed rates (1000 Gbit/s): faster is surely a typo and
// would only overflow the serialization arithmetic of rate users.
const MaxRate = 1e12

// maxSize bounds parsed sizes (1 TiB) for the same reason.
const maxSize = 1 << 40

var rateUnits = []struct {
	suffix string
	mult   float64
}{
	{"gbit/s", 1e9}, {"mbit/s", 1e6}, {"kbit/s", 1e3}, {"bit/s", 1},
	{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1},
	{"gbps", 1e9}, {"mbps", 1e6}, {"kbps", 1e3}, {"bps", 1},
}

// ParseRate parses a bit rate such as "1.5Mbit", "64kbit", "10Gbit",
// "10Mbit/s" or "2Mbps" (decimal prefixes, as link rates are quoted;
// case-insensitive) into bits per second. A bare "0" is 0; what 0 means
// (unknown, unlimited) is the caller's to say. A rate that is not 0 but
// rounds to less than 1 bit/s is an error, not a silent 0.
func ParseRate(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "0" {
		return 0, nil
	}
	for _, u := range rateUnits {
		num, ok := strings.CutSuffix(t, u.suffix)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
		if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			break
		}
		r := math.Round(v * u.mult)
		if r > MaxRate {
			return 0, fmt.Errorf("%q is too fast: use at most 1000Gbit", s)
		}
		if r < 1 && v > 0 {
			return 0, fmt.Errorf("%q is below 1bit/s", s)
		}
		return int64(r), nil
	}
	return 0, fmt.Errorf("%q is not a rate: use a number and a unit, e.g. 1.5Mbit, 64kbit or 10Gbit", s)
}

// FormatRate prints a bit rate in a unit ParseRate reads back.
func FormatRate(bps int64) string {
	switch {
	case bps == 0:
		return "0"
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
	{"tib", 1 << 40}, {"gib", 1 << 30}, {"mib", 1 << 20}, {"kib", 1 << 10},
	{"gb", 1e9}, {"mb", 1e6}, {"kb", 1e3}, {"b", 1},
}

// ParseSize parses a byte size such as "4MiB", "64KiB", "1500KB" or "65536"
// (a bare number is bytes; KB/MB/GB are decimal, KiB/MiB/GiB/TiB binary).
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
	// NaN passes both range checks below and converts to a negative int64.
	if err != nil || math.IsNaN(v) || v < 0 || v*mult > maxSize {
		return 0, fmt.Errorf("%q is not a size: use e.g. 4MiB, 512KiB, 100kB or 65536 (bytes)", s)
	}
	return int64(v * mult), nil
}

// FormatSize prints a byte size in the largest binary unit that holds it
// whole ("64KiB", "1GiB"), else in bytes; ParseSize reads it back.
func FormatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if n != 0 && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", n>>u.shift, u.suffix)
		}
	}
	return strconv.FormatInt(n, 10)
}
