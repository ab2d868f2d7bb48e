package tokenbucket

import (
	"testing"
	"time"
)

func TestBurstThenRate(t *testing.T) {
	var b Bucket
	now := time.Unix(1000, 0)
	n := 0
	for range 100 {
		if b.Allow(now, 10, 5) {
			n++
		}
	}
	if n != 5 {
		t.Errorf("a fresh bucket allowed %d at once, want the burst of 5", n)
	}
	if b.Allow(now.Add(50*time.Millisecond), 10, 5) {
		t.Error("allowed after 50 ms at 10/s: half a token")
	}
	if !b.Allow(now.Add(100*time.Millisecond), 10, 5) {
		t.Error("refused after 100 ms at 10/s: one token")
	}
	// Over 10 s at 10/s: 100 tokens, never more than the burst saved up.
	n = 0
	for i := range 1000 {
		if b.Allow(now.Add(time.Second+time.Duration(i)*10*time.Millisecond), 10, 5) {
			n++
		}
	}
	if n < 99 || n > 105 {
		t.Errorf("%d allowed over 10 s at 10/s with burst 5", n)
	}
}

func TestClockStepBack(t *testing.T) {
	var b Bucket
	now := time.Unix(1000, 0)
	for b.Allow(now, 10, 5) {
	}
	if b.Allow(now.Add(-time.Hour), 10, 5) {
		t.Error("a step back credited a token")
	}
	// The step back neither debts nor moves the reference time: 100 ms
	// after the last real call is one token.
	if !b.Allow(now.Add(100*time.Millisecond), 10, 5) {
		t.Error("no token 100 ms after the last call")
	}
}

func TestFull(t *testing.T) {
	var b Bucket
	now := time.Unix(1000, 0)
	if !b.Full(now, 1, 2) {
		t.Error("zero bucket not full")
	}
	b.Allow(now, 1, 2)
	if b.Full(now.Add(500*time.Millisecond), 1, 2) {
		t.Error("full half a token after taking one")
	}
	if !b.Full(now.Add(time.Second), 1, 2) {
		t.Error("not full one token-time after taking one")
	}
}

func TestReadyTakesNothing(t *testing.T) {
	var b Bucket
	now := time.Unix(1000, 0)
	for range 10 {
		if !b.Ready(now, 1, 2) {
			t.Fatal("full bucket not ready")
		}
	}
	b.Take()
	b.Take()
	if b.Ready(now, 1, 2) {
		t.Error("ready after taking the burst")
	}
}
