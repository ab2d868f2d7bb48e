package cc

// This file owns ArrivalRate, the receiver's view of the link's rate: the
// peak rate at which the peer's packets arrive in trains. A sender told no
// rate sends its first flight as one burst (Hybrid.PacingRate), and later
// paces at what its own ACK trains measured; either way its packets leave
// the bottleneck spaced by the link's rate, so the receiver times that rate
// half a round trip before the sender's ACKs do. The receiver sizes its
// flow-control windows from it as it would from a configured receive rate:
// auto-tuning a window up from its floor doubles once per round trip
// (1 MiB to the 20 MB a 250 Mbit/s, 650 ms link needs: five round trips)
// while the sender's controller knows the rate after one.

import "time"

const (
	// arrivalRing is how many arrivals ArrivalRate keeps: a train spans
	// up to that many packets. An initial window is 10-40 packets.
	arrivalRing = 32
	// arrivalMinPackets: a train shorter than this gives no rate: the
	// hosts deliver a few packets at once after a scheduling stall.
	arrivalMinPackets = 8
	// arrivalPause: a gap longer than this, and longer than the train
	// after it so far, ends a train (the peer paused, a new flight
	// began); the hosts' own stalls are shorter.
	arrivalPause = 10 * time.Millisecond
)

// ArrivalRate is the peak arrival rate of the peer's packets over trains
// of at least arrivalMinPackets packets and capacityMinSpan (the hosts'
// batching delivers packets microseconds apart, which reads as any rate
// at all over a shorter span).
type ArrivalRate struct {
	at    [arrivalRing]time.Time
	bytes [arrivalRing]int64 // bytes arrived up to and including each
	next  int
	n     int
	total int64
	peak  float64 // bytes/s
	// count is how many packets arrived, gapAt the count of the latest
	// one that arrived more than arrivalPause after the one before
	// (0: none): only such a gap can end a train, so the walk back to a
	// train's start begins there, not at the newest packet. Walking all
	// of the ring for every packet was a seventh of the transport's CPU
	// in a bulk transfer (BenchmarkSessionBulk).
	count, gapAt int
	// trainAt and trainBytes are the arrival of the latest train's first
	// packet and the total of what arrived at that instant: a train
	// longer than the ring (a link that hands packets over in batches of
	// more than arrivalRing, each batch stamped as one instant) is timed
	// over its whole length.
	trainAt    time.Time
	trainBytes int64
}

// OnPacket records a packet of size bytes arriving at now.
func (r *ArrivalRate) OnPacket(now time.Time, size int) {
	r.total += int64(size)
	if r.n == 0 || now.Sub(r.at[(r.next-1+arrivalRing)%arrivalRing]) > arrivalPause {
		r.gapAt = r.count + 1
		r.trainAt = now
	}
	if now.Equal(r.trainAt) {
		r.trainBytes = r.total // arrived with the first: before the span
	}
	if r.count+1-r.gapAt >= arrivalMinPackets {
		if span := now.Sub(r.trainAt); span >= capacityMinSpan {
			r.peak = max(r.peak, float64(r.total-r.trainBytes)/span.Seconds())
		}
	}
	r.count++
	r.at[r.next], r.bytes[r.next] = now, r.total
	r.next = (r.next + 1) % arrivalRing
	r.n = min(r.n+1, arrivalRing)
	if r.n <= arrivalMinPackets {
		return
	}
	// The latest train: back from the newest arrival to the first pause.
	// No gap after the latest long one ends it.
	last := (r.next - 1 + arrivalRing) % arrivalRing
	since := r.n - 1 // packets after the oldest one kept
	if r.gapAt > 0 {
		since = min(since, r.count-r.gapAt)
	}
	first := (last - since + arrivalRing) % arrivalRing
	for i := since + 1; i < r.n; i++ {
		j := (last - i + arrivalRing) % arrivalRing
		after := r.at[(j+1)%arrivalRing]
		if gap := after.Sub(r.at[j]); gap > max(arrivalPause, r.at[last].Sub(after)) {
			break
		}
		first = j
	}
	span := r.at[last].Sub(r.at[first])
	packets := (last - first + arrivalRing) % arrivalRing
	if packets < arrivalMinPackets || span < capacityMinSpan {
		return
	}
	// first's own bytes arrived before the span began.
	if rate := float64(r.bytes[last]-r.bytes[first]) / span.Seconds(); rate > r.peak {
		r.peak = rate
	}
}

// Peak is the highest train rate seen in bytes/s (0: none yet).
func (r *ArrivalRate) Peak() float64 { return r.peak }
