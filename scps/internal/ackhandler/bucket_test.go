package ackhandler

import (
	"math"
	"testing"
	"time"
)

// TestBucketCatchUp: a refill after the time the pacer gave the sender
// (due) holds the lost time's bytes beyond the burst, up to catchUp; a
// refill on time, or with no due at all (the sender had nothing to send),
// holds a burst at most.
func TestBucketCatchUp(t *testing.T) {
	const rate = 1e6 // bytes/s: 1000 bytes a millisecond
	ms := time.Millisecond
	fresh := func() *bucket {
		b := &bucket{catchUp: 10 * ms}
		b.setRate(0, rate, 2000) // empty at 0
		return b
	}
	cases := []struct {
		name      string
		due, wake time.Duration
		want      float64
	}{
		{"no due: a burst", 0, 50 * ms, 2000},
		{"woken on time", 1 * ms, 1 * ms, 1000},
		{"5 ms late: all of the 6 ms", 1 * ms, 6 * ms, 6000},
		{"40 ms late: burst and catchUp", 1 * ms, 41 * ms, 12000},
	}
	for _, tc := range cases {
		b := fresh()
		b.due = tc.due
		b.refill(tc.wake)
		if math.Abs(b.tokens-tc.want) > 1e-6 {
			t.Errorf("%s: %.0f bytes, want %.0f", tc.name, b.tokens, tc.want)
		}
		if b.due != 0 {
			t.Errorf("%s: due %v after the refill, want 0", tc.name, b.due)
		}
		// A rate change at the same instant keeps what was made up.
		b.setRate(tc.wake, rate, 2000)
		if math.Abs(b.tokens-tc.want) > 1e-6 {
			t.Errorf("%s: %.0f bytes after setRate, want %.0f", tc.name, b.tokens, tc.want)
		}
		// Later the bucket holds a burst again.
		b.refill(tc.wake + 100*ms)
		if b.tokens != 2000 {
			t.Errorf("%s: %.0f bytes later, want the burst 2000", tc.name, b.tokens)
		}
	}
}
