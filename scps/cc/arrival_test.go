package cc

import (
	"math"
	"math/rand/v2"
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

// arrivalPeakWalk is ArrivalRate's peak as it was computed before the
// walk began at the latest long gap: back from the newest arrival over
// the whole ring for every packet. TestArrivalRateSameAsFullWalk holds
// the two to the same result; with each whole train (from the latest
// pause) timed as well.
func arrivalPeakWalk(ats []time.Time, sizes []int) float64 {
	var peak float64
	var total int64
	var bytes []int64
	start, startBytes := 0, int64(0) // the latest train's first packet, what arrived with it
	for k := range ats {
		total += int64(sizes[k])
		bytes = append(bytes, total)
		if k > 0 && ats[k].Sub(ats[k-1]) > arrivalPause {
			start = k
		}
		if ats[k].Equal(ats[start]) {
			startBytes = total
		}
		if span := ats[k].Sub(ats[start]); k-start >= arrivalMinPackets && span >= capacityMinSpan {
			peak = max(peak, float64(total-startBytes)/span.Seconds())
		}
		n := min(k+1, arrivalRing)
		if n <= arrivalMinPackets {
			continue
		}
		first := k
		for i := 1; i < n; i++ {
			j := k - i
			after := ats[j+1]
			if gap := after.Sub(ats[j]); gap > max(arrivalPause, ats[k].Sub(after)) {
				break
			}
			first = j
		}
		span := ats[k].Sub(ats[first])
		if k-first < arrivalMinPackets || span < capacityMinSpan {
			continue
		}
		if rate := float64(bytes[k]-bytes[first]) / span.Seconds(); rate > peak {
			peak = rate
		}
	}
	return peak
}

// TestArrivalRateSameAsFullWalk: on arrivals with trains, host batches
// and pauses of every length, the peak is the one a walk over the whole
// ring for every packet finds.
func TestArrivalRateSameAsFullWalk(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for run := 0; run < 500; run++ {
		var r ArrivalRate
		var ats []time.Time
		var sizes []int
		at := t0
		for k := 0; k < 300; k++ {
			var gap time.Duration
			switch rng.IntN(10) {
			case 0:
				gap = time.Duration(rng.IntN(60)) * time.Millisecond // a pause, or not
			case 1:
				gap = time.Duration(rng.IntN(20)) * time.Microsecond // a host batch
			default:
				gap = time.Duration(200+rng.IntN(2000)) * time.Microsecond
			}
			at = at.Add(gap)
			size := 60 + rng.IntN(1440)
			r.OnPacket(at, size)
			ats, sizes = append(ats, at), append(sizes, size)
		}
		if got, want := r.Peak(), arrivalPeakWalk(ats, sizes); got != want {
			t.Fatalf("run %d: peak %.0f B/s, the full walk gives %.0f", run, got, want)
		}
	}
}

// TestArrivalRateTimesBatchesBeyondTheRing: a link that hands packets
// over in batches larger than the ring, each stamped as one instant (a
// link emulator writing what fell due at once), still gives its rate:
// the ring alone held one batch at one instant, a span of nothing, and
// the windows stayed at their floor.
func TestArrivalRateTimesBatchesBeyondTheRing(t *testing.T) {
	var r ArrivalRate
	const size, batch, every = 1500, 2 * arrivalRing, 3 * time.Millisecond
	at := t0
	for b := 0; b < 10; b++ {
		for i := 0; i < batch; i++ {
			r.OnPacket(at, size)
		}
		at = at.Add(every)
	}
	want := float64(batch*size) / every.Seconds()
	if got := r.Peak(); got < 0.9*want || got > 1.1*want {
		t.Errorf("peak %.0f B/s over batches of %d packets every %v, want about %.0f", got, batch, every, want)
	}
}
