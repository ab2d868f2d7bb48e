package scps

// This file checks that a queued datagram's age is the time its
// association had to send it (setNow, datagramQueue.postpone): a driver
// that did not run the association for longer than the age (a loaded
// host) does not get its datagrams dropped for it, while a datagram that
// waits for the window, or past the bound, still expires.

import (
	"testing"
	"time"
)

// TestDatagramAgeSkipsStall: ten datagrams of a group are queued; the
// driver next runs the association 300 ms later (it was due at once), and
// they all go. Queued behind a full window instead, they are dropped at
// their age; a stall of 2 s, beyond what a datagram may be postponed
// (maxPostpone), drops them too. Before, the stall dropped them all: a
// repaired QUIC flow's datagrams and their parities went at once, and
// for the flow's last ones its receiver has nothing to ask again for
// (docs/testing.md).
func TestDatagramAgeSkipsStall(t *testing.T) {
	buf := make([]byte, 2048)
	queue := func(t *testing.T, a *Association, now time.Time) {
		t.Helper()
		a.setNow(now)
		for range 10 {
			if err := a.SendDatagramApart(make([]byte, 300), 7); err != nil {
				t.Fatal(err)
			}
		}
	}
	drain := func(a *Association, now time.Time) {
		for {
			if n, _ := a.Send(now, buf); n == 0 {
				return
			}
		}
	}
	for _, tc := range []struct {
		name       string
		fullWindow bool
		stall      time.Duration
		sent       uint64
	}{
		{"stalled 300ms", false, 300 * time.Millisecond, 10},
		{"behind a full window", true, 300 * time.Millisecond, 0},
		{"stalled 2s", false, 2 * time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, a, now := parityPair(t)
			if tc.fullWindow {
				id, err := a.OpenStream(nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := a.StreamWrite(id, make([]byte, 1<<20)); err != nil {
					t.Fatal(err)
				}
				for i := 0; a.sent.WindowOpen(); i++ {
					if i > 10000 {
						t.Fatal("the window never filled")
					}
					now = now.Add(time.Millisecond)
					drain(a, now)
				}
			}
			before := a.Stats()
			queue(t, a, now)
			drain(a, now.Add(tc.stall))
			st := a.Stats()
			sent, dropped := st.DatagramsSent-before.DatagramsSent, st.DatagramsDropped-before.DatagramsDropped
			t.Logf("%s: %d sent, %d dropped", tc.name, sent, dropped)
			if sent != tc.sent || sent+dropped != 10 {
				t.Errorf("%d of 10 sent, %d dropped, want %d sent", sent, dropped, tc.sent)
			}
		})
	}
}
