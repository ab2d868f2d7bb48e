package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestFormatBar(t *testing.T) {
	p := Progress{Elapsed: 5 * time.Second, Duration: 20 * time.Second, Bytes: 1_234_567, Rate: 151_200}
	got := FormatBar("C2 cubic", p, 20)
	want := "C2 cubic [=====>              ]   5.0/20s    1.23 MB   151.2 kB/s"
	if got != want {
		t.Errorf("\n got %q\nwant %q", got, want)
	}
	full := FormatBar("x", Progress{Elapsed: 25 * time.Second, Duration: 20 * time.Second}, 10)
	if !strings.Contains(full, "[==========]") {
		t.Errorf("past the end: %q", full)
	}
	empty := FormatBar("x", Progress{}, 4)
	if !strings.Contains(empty, "[>   ]") {
		t.Errorf("no duration: %q", empty)
	}
}

func TestFormatUnits(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 999: "999 B", 1500: "1.5 kB", 2_500_000: "2.50 MB", 3_000_000_000: "3.00 GB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
	for r, want := range map[float64]string{0: "0.0 kB/s", 187_500: "187.5 kB/s", 12_500_000: "12.5 MB/s"} {
		if got := FormatRateBytes(r); got != want {
			t.Errorf("FormatRateBytes(%v) = %q, want %q", r, got, want)
		}
	}
}

func TestDisplayTerminal(t *testing.T) {
	var b bytes.Buffer
	d := &Display{w: &b, tty: true, width: 10, every: time.Hour}
	d.Update("run", Progress{Elapsed: time.Second, Duration: 10 * time.Second, Bytes: 123_456_789})
	d.Update("run", Progress{Elapsed: 2 * time.Second, Duration: 10 * time.Second, Bytes: 5})
	d.Line("run done")
	out := b.String()
	if strings.Count(out, "\r") < 3 || !strings.HasSuffix(out, "\rrun done\n") {
		t.Errorf("terminal output %q", out)
	}
	// The shorter second bar blanks what is left of the first.
	second := strings.Split(out, "\r")[2]
	if first := strings.Split(out, "\r")[1]; len(second) < len(first) {
		t.Errorf("the second bar does not cover the first: %q then %q", first, second)
	}
}

func TestDisplayPlain(t *testing.T) {
	var b bytes.Buffer
	d := NewDisplay(&b) // a buffer is no terminal
	if d.tty {
		t.Fatal("a buffer taken for a terminal")
	}
	d.every = 30 * time.Millisecond
	d.Line("start")
	d.Update("run", Progress{Elapsed: time.Second, Duration: 10 * time.Second}) // too soon after a line
	time.Sleep(40 * time.Millisecond)
	d.Update("run", Progress{Elapsed: 2 * time.Second, Duration: 10 * time.Second})
	d.Update("run", Progress{Elapsed: 3 * time.Second, Duration: 10 * time.Second}) // too soon again
	d.Line("run done")
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "2.0/10s") || strings.Contains(b.String(), "\r") {
		t.Errorf("plain output %q", b.String())
	}
}
