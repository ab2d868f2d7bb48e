package configs

// Tests of the rate and size grammar. It is read from the config file and,
// through linkemu, demo and bench, from command-line flags, so these tests
// cover both uses; a fuzz target checks it rejects rather than panics or
// returns out-of-range values.

import "testing"

func TestParseRate(t *testing.T) {
	good := map[string]int64{
		"1.5Mbit": 1_500_000, "64kbit": 64_000, "10Gbit": 10_000_000_000, "100bit": 100,
		"2Mbps": 2_000_000, "2mbps": 2_000_000, " 500 kbps ": 500_000, "10mbit/s": 10_000_000,
		"0": 0, "0Mbit": 0, "1000Gbit": 1_000_000_000_000,
	}
	for in, want := range good {
		got, err := ParseRate(in)
		if err != nil || got != want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "fast", "1.5", "1.5MB", "-1Mbit", "1001Gbit", "NaNMbit", "InfMbit",
		"0.1bit", "0.4bit", "Mbit", "unlimited", "0x10kbit"} {
		if got, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) = %d, want an error", in, got)
		}
	}
}

func TestFormatRateReadsBack(t *testing.T) {
	for _, r := range []int64{0, 1, 999, 64_000, 1_500_000, 10_000_000, 2_000_000_000, 123_456_789} {
		s := FormatRate(r)
		back, err := ParseRate(s)
		if err != nil || back != r {
			t.Errorf("FormatRate(%d) = %q reads back as %d, %v", r, s, back, err)
		}
	}
}

func TestParseSize(t *testing.T) {
	good := map[string]int64{
		"4MiB": 4 << 20, "1MiB": 1 << 20, "64KiB": 64 << 10, "100kB": 100_000, "1500KB": 1_500_000,
		"2MB": 2_000_000, "65536": 65536, "1500B": 1500, "0": 0, "1TiB": 1 << 40,
	}
	for in, want := range good {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "lots", "MB", "-1KB", "1TB", "2TiB", "NaN", "nanMiB", "InfKB"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}

// FuzzParseUnits feeds arbitrary text to both parsers: errors are fine,
// panics and out-of-range results are not, and what parses formats back.
func FuzzParseUnits(f *testing.F) {
	for _, s := range []string{"1.5Mbit", "10mbit/s", "0", "1MiB", "65536", "", "1e400Mbit", "-0", "NaN", "0x10kbit", "1e-9bit"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if r, err := ParseRate(s); err == nil {
			if r < 0 || r > MaxRate {
				t.Fatalf("ParseRate(%q) = %d", s, r)
			}
			if back, err := ParseRate(FormatRate(r)); err != nil || back != r {
				t.Fatalf("ParseRate(%q) = %d formats as %q, which reads back as %d, %v", s, r, FormatRate(r), back, err)
			}
		}
		if z, err := ParseSize(s); err == nil {
			if z < 0 || z > maxSize {
				t.Fatalf("ParseSize(%q) = %d", s, z)
			}
			if back, err := ParseSize(FormatSize(z)); err != nil || back != z {
				t.Fatalf("ParseSize(%q) = %d formats as %q, which reads back as %d, %v", s, z, FormatSize(z), back, err)
			}
		}
	})
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 1500: "1500", 64 << 10: "64KiB", 1536: "1536", 32 << 20: "32MiB", 1 << 30: "1GiB", 1 << 40: "1TiB", 3 << 30: "3GiB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}
