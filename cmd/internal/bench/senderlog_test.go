package bench

import (
	"strings"
	"testing"
	"time"

	"scpsvpn/cmd/internal/linkemu"
	"scpsvpn/scps"
)

// TestSenderSampleRow: a row has a value under every column of the header,
// rates in bit/s and RTTs in ms.
func TestSenderSampleRow(t *testing.T) {
	var b strings.Builder
	s := senderSample{at: 1500 * time.Millisecond, cpuA: 0.5, cpuB: 1.25,
		assoc: scps.Stats{Cwnd: 750000, BytesInFlight: 700000, PacingRate: 1.25e6, DeliveryRate: 1.2e6,
			SRTT: 650 * time.Millisecond, MinRTT: 600 * time.Millisecond, QueueDelay: 50 * time.Millisecond, InSlowStart: true, TailCopyBytes: 4500,
			LateWakeTime: 32500 * time.Microsecond, BufferedBytes: 4 << 20, ParityBytes: 2700},
		link: linkemu.DirCounters{InBytes: 3000, Bytes: 2000, DropQueue: 1}}
	if err := writeSenderSample(&b, s, false); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(b.String(), "\n") {
		t.Fatalf("row %q does not end its line", b.String())
	}
	cols := strings.Split(strings.TrimSuffix(senderLogHeader, "\n"), "\t")
	vals := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\t")
	if len(vals) != len(cols) {
		t.Fatalf("%d values under %d columns: %q", len(vals), len(cols), b.String())
	}
	want := map[string]string{"t_s": "1.500", "pacing_bps": "10000000", "delivery_bps": "9600000", "srtt_ms": "650.0",
		"queue_delay_ms": "50.0", "slow_start": "1", "link_in_bytes": "3000", "link_queue_drops": "1", "cpu_b_s": "1.25", "tail_copy_bytes": "4500",
		"late_wake_ms": "32.5", "buffered_bytes": "4194304", "parity_bytes": "2700"}
	for i, c := range cols {
		if w, ok := want[c]; ok && vals[i] != w {
			t.Errorf("%s = %s, want %s", c, vals[i], w)
		}
	}
}
