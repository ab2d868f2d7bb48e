package streams

// This file tests the stream state's own rules: the scheduler's queues,
// the window's auto-tuning and the light/bulk split of new data.

import (
	"testing"
	"time"

	"scpsvpn/scps/settings"
)

// TestQueueKeepsOrder pushes and pops past the queue's compaction: the
// order is first in, first out throughout.
func TestQueueKeepsOrder(t *testing.T) {
	var q Queue
	next, want := uint64(0), uint64(0)
	for round := range 50 {
		for range round%7 + 1 {
			q.Push(&State{ID: next})
			next++
		}
		for range round % 5 {
			if q.Len() == 0 {
				break
			}
			if s := q.Peek(); s.ID != want {
				t.Fatalf("peek %d, want %d", s.ID, want)
			}
			if s := q.Pop(); s.ID != want {
				t.Fatalf("pop %d, want %d", s.ID, want)
			}
			want++
		}
	}
	if q.Len() != int(next-want) {
		t.Fatalf("len %d, want %d", q.Len(), next-want)
	}
	q.Clear()
	if q.Len() != 0 || q.Pop() != nil {
		t.Fatal("not empty after Clear")
	}
}

// TestWindowGrowsOnlyWhileDraining: a window doubles when more than half
// of it drained per smoothed RTT, up to its limit, and stays put
// otherwise.
func TestWindowGrowsOnlyWhileDraining(t *testing.T) {
	const srtt = 100 * time.Millisecond
	var w Window
	w.Init(1000, 0, 0)
	w.Update(600, 1<<20, srtt, srtt) // 600 of 1000 in one RTT
	if w.Size != 2000 {
		t.Fatalf("after a fast drain: %d, want 2000", w.Size)
	}
	w.Update(600+400, 1<<20, 2*srtt, srtt) // 400 of 2000: slow
	if w.Size != 2000 {
		t.Fatalf("after a slow drain: %d, want 2000", w.Size)
	}
	w.Update(1000, 1<<20, 3*srtt, srtt) // nothing drained
	if w.Size != 2000 {
		t.Fatalf("while stalled: %d, want 2000", w.Size)
	}
	w.Update(1000+2000, 3000, 4*srtt, srtt) // fast, but the limit holds
	if w.Size != 3000 {
		t.Fatalf("at the limit: %d, want 3000", w.Size)
	}
}

// TestScheduleLightBeforeBulk: a stream with little new data goes to the
// light queue, one with more (or whose writer waits) to the bulk queue,
// and a stream without the peer's credit to neither.
func TestScheduleLightBeforeBulk(t *testing.T) {
	var m Map
	m.Init(true, 100, 8)
	light := &State{ID: 0, Local: true, WriteOff: 100, PeerMax: 1 << 20}
	bulk := &State{ID: 2, Local: true, WriteOff: LightThreshold + 1, PeerMax: 1 << 20}
	waiting := &State{ID: 4, Local: true, WriteOff: 100, PeerMax: 1 << 20, WriteWait: true}
	noCredit := &State{ID: 6, Local: true, WriteOff: 100}
	for _, s := range []*State{light, bulk, waiting, noCredit} {
		m.ScheduleNew(s)
	}
	if m.LightQ.Len() != 1 || m.LightQ.Peek() != light || m.BulkQ.Len() != 2 {
		t.Fatalf("light %d, bulk %d", m.LightQ.Len(), m.BulkQ.Len())
	}
	if noCredit.queued != 0 || !noCredit.CreditWait {
		t.Fatal("a stream without credit was queued")
	}
	m.ScheduleNew(light) // already queued: no second entry
	if m.LightQ.Len() != 1 || !m.HasWork() {
		t.Fatal("queued twice")
	}
	m.PopNew(&m.LightQ) // sent its turn: it may queue again
	m.ScheduleNew(light)
	if m.LightQ.Len() != 1 || m.LightQ.Peek() != light {
		t.Fatal("a stream taken off its queue could not queue again")
	}
}

// TestBudgetAccountsGrantedCredit: a stream's receive credit beyond the
// initial credit and not yet read counts against the budget, never below
// what was read, and none of it once the stream is aborted.
func TestBudgetAccountsGrantedCredit(t *testing.T) {
	var m MemBudget
	s := &State{RecvMax: settings.InitialStreamCredit + 5000}
	m.Account(s)
	if m.RecvGranted != 5000 {
		t.Fatalf("granted %d, want 5000", m.RecvGranted)
	}
	s.ReadOff = 3000 // read: the credit beyond the initial shrinks
	m.Account(s)
	if m.RecvGranted != 2000 {
		t.Fatalf("after reading: %d, want 2000", m.RecvGranted)
	}
	s.PeerReset = true
	m.Account(s)
	if m.RecvGranted != 0 || s.Credited != 0 {
		t.Fatalf("after a reset: %d", m.RecvGranted)
	}
	var f ConnFlow
	f.Settle(s, 100)
	f.Settle(s, 50) // never back
	if f.Settled != 100 || s.SettledOff != 100 {
		t.Fatalf("settled %d (stream %d), want 100", f.Settled, s.SettledOff)
	}
}
