package cc

import (
	"math"
	"testing"
	"time"
)

// TestArrivalRateTimesTrains: a burst that left the bottleneck spaced by
// its rate gives that rate; packets the host delivered together (a span
// under capacityMinSpan) give none; a pause ends a train, so an idle gap
// before a flight does not dilute it.
func TestArrivalRateTimesTrains(t *testing.T) {
	const size = 1500
	at := t0
	var r ArrivalRate
	r.OnPacket(at, 60) // a keep-alive long before the flight
	at = at.Add(2 * time.Second)
	for i := 0; i < 30; i++ { // 30 packets at 10 Mbit/s: 1.2 ms apart
		r.OnPacket(at, size)
		at = at.Add(1200 * time.Microsecond)
	}
	if got, want := r.Peak(), size/1.2e-3; math.Abs(got-want)/want > 0.01 {
		t.Errorf("peak %.0f B/s after a 10 Mbit/s train, want %.0f", got, want)
	}

	var batch ArrivalRate
	at = t0
	for i := 0; i < 30; i++ { // read in one batch: 10 us apart
		batch.OnPacket(at, size)
		at = at.Add(10 * time.Microsecond)
	}
	if got := batch.Peak(); got != 0 {
		t.Errorf("a 0.3 ms batch gave a rate of %.0f B/s", got)
	}

	var short ArrivalRate
	at = t0
	for i := 0; i < arrivalMinPackets-1; i++ {
		short.OnPacket(at, size)
		at = at.Add(2 * time.Millisecond)
	}
	if got := short.Peak(); got != 0 {
		t.Errorf("%d packets gave a rate of %.0f B/s", arrivalMinPackets-1, got)
	}
}
