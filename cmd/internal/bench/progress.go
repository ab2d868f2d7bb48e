package bench

// This file owns the live progress display of demo and bench: a bar with
// elapsed time, bytes and the current rate, redrawn in place on a terminal
// and printed as occasional plain lines when stderr is a file or a pipe
// (CI logs), plus the human units it prints.

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Display writes progress to a terminal or a log.
type Display struct {
	mu       sync.Mutex
	w        io.Writer
	tty      bool
	width    int           // bar cells
	every    time.Duration // plain mode: time between lines
	lastLine time.Time
	lastLen  int
}

// NewDisplay writes to w; it redraws in place when w is a terminal.
func NewDisplay(w io.Writer) *Display {
	d := &Display{w: w, width: 30, every: 5 * time.Second}
	if f, ok := w.(*os.File); ok {
		_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
		d.tty = err == nil
	}
	return d
}

// Update shows the progress of the run named label.
func (d *Display) Update(label string, p Progress) {
	d.mu.Lock()
	defer d.mu.Unlock()
	line := FormatBar(label, p, d.width)
	if d.tty {
		pad := max(0, d.lastLen-len(line))
		fmt.Fprintf(d.w, "\r%s%s", line, strings.Repeat(" ", pad))
		d.lastLen = len(line)
		return
	}
	// Plain mode: a line every few seconds of a run, none at its start.
	if now := time.Now(); now.Sub(d.lastLine) >= d.every && p.Elapsed >= d.every/2 {
		d.lastLine = now
		fmt.Fprintln(d.w, line)
	}
}

// Line prints a finished line, replacing a bar being redrawn.
func (d *Display) Line(s string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.tty && d.lastLen > 0 {
		fmt.Fprintf(d.w, "\r%s\r", strings.Repeat(" ", d.lastLen))
	}
	d.lastLen = 0
	d.lastLine = time.Now()
	fmt.Fprintln(d.w, s)
}

// FormatBar renders one progress line:
// "label [=========>          ]  9.5/20s   1.23 MB  151.2 kB/s".
func FormatBar(label string, p Progress, width int) string {
	frac := 0.0
	if p.Duration > 0 {
		frac = min(max(p.Elapsed.Seconds()/p.Duration.Seconds(), 0), 1)
	}
	filled := int(frac * float64(width))
	bar := strings.Repeat("=", filled)
	if filled < width {
		bar += ">" + strings.Repeat(" ", width-filled-1)
	}
	return fmt.Sprintf("%s [%s] %5.1f/%gs %10s %12s", label, bar, p.Elapsed.Seconds(), p.Duration.Seconds(), FormatBytes(p.Bytes), FormatRateBytes(p.Rate))
}

// FormatBytes prints a byte count in decimal units ("1.23 MB").
func FormatBytes(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}

// FormatRateBytes prints bytes per second in kB/s or MB/s.
func FormatRateBytes(bps float64) string {
	if bps >= 10e6 {
		return fmt.Sprintf("%.1f MB/s", bps/1e6)
	}
	return fmt.Sprintf("%.1f kB/s", bps/1e3)
}
