package streams

// This file tests the stream state's own rules: the scheduler's queues,
// the window's auto-tuning, the light/bulk split of new data and the
// waking of writers waiting for the memory budget, a stream's abort and
// removal, its received frames, its frames of acknowledged and lost
// packets, and the frame writers.

import (
	"testing"
	"time"

	"scpsvpn/scps/internal/ackhandler"
	"scpsvpn/scps/internal/ranges"
	"scpsvpn/scps/internal/wire"
	"scpsvpn/scps/settings"
)

// TestQueueKeepsOrder pushes and pops past the queue's compaction: the
// order is first in, first out throughout.
func TestQueueKeepsOrder(t *testing.T) {
	var q Queue
	next, want := uint64(0), uint64(0)
	for round := range 50 {
		for range round%7 + 1 {
			q.Push(&State{id: next})
			next++
		}
		for range round % 5 {
			if q.Len() == 0 {
				break
			}
			if s := q.Peek(); s.id != want {
				t.Fatalf("peek %d, want %d", s.id, want)
			}
			if s := q.Pop(); s.id != want {
				t.Fatalf("pop %d, want %d", s.id, want)
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
	light := &State{id: 0, local: true, writeOff: 100, peerMax: 1 << 20}
	bulk := &State{id: 2, local: true, writeOff: LightThreshold + 1, peerMax: 1 << 20}
	waiting := &State{id: 4, local: true, writeOff: 100, peerMax: 1 << 20, writeWait: true}
	noCredit := &State{id: 6, local: true, writeOff: 100}
	for _, s := range []*State{light, bulk, waiting, noCredit} {
		m.ScheduleNew(s)
	}
	if m.LightQ.Len() != 1 || m.LightQ.Peek() != light || m.BulkQ.Len() != 2 {
		t.Fatalf("light %d, bulk %d", m.LightQ.Len(), m.BulkQ.Len())
	}
	if noCredit.queued != 0 || !noCredit.creditWait {
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

// TestLongRunIsBulk: a stream that keeps sending, LightRun or more since
// all it wrote was last acknowledged, is bulk however little it has
// unsent (a writer slower than the links); once everything it wrote is
// acknowledged, its next write is light again (a request on a kept-alive
// connection after a download).
func TestLongRunIsBulk(t *testing.T) {
	ev := &recordedEvents{}
	m := Manager{Events: ev, Limits: Limits{StreamWindow: 1 << 20, ConnWindow: 2 << 20, InitialStreamWindow: 1 << 20, InitialSendBuffer: 1 << 20, SendBuffer: 1 << 20}}
	m.Init(true, 100, 100)
	s := m.NewStream(0, true, time.Second)
	s.openPending, s.peerMax = false, 1<<40
	s.writeOff, s.sentOff = LightRun-1000+100, LightRun-1000
	if !s.light() {
		t.Fatal("a short run with 100 bytes unsent is not light")
	}
	m.FrameAcked(&ackhandler.SentFrame{Kind: ackhandler.KindStream, ID: 0, Off: 0, N: LightRun / 2}, time.Second, 0)
	s.writeOff, s.sentOff = LightRun+100, LightRun
	if s.light() {
		t.Fatal("a stream that sent LightRun without going idle is light")
	}
	m.FrameAcked(&ackhandler.SentFrame{Kind: ackhandler.KindStream, ID: 0, Off: LightRun / 2, N: LightRun/2 + 100}, time.Second, 0)
	s.sentOff = s.writeOff // all sent and acknowledged: idle
	s.writeOff += 100
	if !s.light() {
		t.Fatalf("the first write after an idle stream is not light (run from %d)", s.runStart)
	}
}

// sendingManager is a Manager with room to send: the peer's connection
// credit, sendBuf of send buffer a stream and maxStreams streams a side.
func sendingManager(sendBuf uint64, maxStreams int) (*Manager, *recordedEvents) {
	ev := &recordedEvents{}
	m := &Manager{Events: ev, Frames: &recordedFrames{}, Limits: Limits{StreamWindow: 1 << 20, ConnWindow: 64 << 20, InitialStreamWindow: settings.InitialStreamCredit, InitialSendBuffer: sendBuf}}
	m.Init(true, maxStreams, uint64(maxStreams))
	m.Flow.Init(settings.InitialConnCredit, 64<<20, time.Second)
	m.Flow.PeerMax = 64 << 20
	return m, ev
}

// TestBulkTailStaysBulk: a stream queued as bulk stays bulk once its
// unsent tail falls below LightThreshold, its FIN's too, until all it
// wrote has gone out: otherwise each of a thousand 30 kB downloads jumped
// ahead of the others once it had 16 KiB left, and they finished one
// after another instead of together. Its next write after that is light.
func TestBulkTailStaysBulk(t *testing.T) {
	m, _ := sendingManager(1<<20, 100)
	s := m.NewStream(0, true, time.Second)
	s.peerMax = 1 << 30
	if n := m.write(s, make([]byte, 30_000)); n != 30_000 {
		t.Fatalf("wrote %d of 30000", n)
	}
	if m.BulkQ.Len() != 1 || s.light() {
		t.Fatalf("30 kB unsent: light %d, bulk %d", m.LightQ.Len(), m.BulkQ.Len())
	}
	for s.Unsent() > 10_000 { // its turns send most of it
		if _, ok := m.AppendStreams(make([]byte, 0, 1400), 1400); !ok {
			t.Fatal("nothing to send")
		}
	}
	if m.LightQ.Len() != 0 || s.light() {
		t.Fatalf("a bulk stream's tail of %d: light %d, bulk %d", s.Unsent(), m.LightQ.Len(), m.BulkQ.Len())
	}
	if err := m.CloseWrite(s.id); err != nil || s.light() {
		t.Fatalf("after its FIN (err %v), the bulk stream's tail is light", err)
	}
	for s.Unsent() > 0 || !s.finSent {
		if _, ok := m.AppendStreams(make([]byte, 0, 1400), 1400); !ok {
			t.Fatal("nothing to send")
		}
	}
	s.writeOff += 100 // all gone out: a new write
	if !s.light() {
		t.Fatal("the first write after the bulk run went out is not light")
	}
}

// TestBudgetAccountsGrantedCredit: a stream's receive credit beyond the
// initial credit and not yet read counts against the budget, never below
// what was read, and none of it once the stream is aborted.
func TestBudgetAccountsGrantedCredit(t *testing.T) {
	var m MemBudget
	s := &State{recvMax: settings.InitialStreamCredit + 5000}
	m.Account(s)
	if m.RecvGranted != 5000 {
		t.Fatalf("granted %d, want 5000", m.RecvGranted)
	}
	s.readOff = 3000 // read: the credit beyond the initial shrinks
	m.Account(s)
	if m.RecvGranted != 2000 {
		t.Fatalf("after reading: %d, want 2000", m.RecvGranted)
	}
	s.peerReset = true
	m.Account(s)
	if m.RecvGranted != 0 || s.credited != 0 {
		t.Fatalf("after a reset: %d", m.RecvGranted)
	}
	var f ConnFlow
	f.Settle(s, 100)
	f.Settle(s, 50) // never back
	if f.Settled != 100 || s.settledOff != 100 {
		t.Fatalf("settled %d (stream %d), want 100", f.Settled, s.settledOff)
	}
}

// recordedEvents is an Events sink that records the streams notified and
// closed.
type recordedEvents struct{ ids, closed, accepted []uint64 }

func (r *recordedEvents) Notify(s *State)   { r.ids = append(r.ids, s.id) }
func (r *recordedEvents) Closed(s *State)   { r.closed = append(r.closed, s.id) }
func (r *recordedEvents) Accepted(s *State) { r.accepted = append(r.accepted, s.id) }

// TestBudgetReleasedWakesOldestFirst frees room for about one share and a
// bit: the oldest waiting writers are woken (a gone one is dropped without
// using room), as many as the room serves, and the rest keep waiting in
// order.
func TestBudgetReleasedWakesOldestFirst(t *testing.T) {
	ev := &recordedEvents{}
	m := Manager{Events: ev}
	m.Init(true, 100, 100)
	m.Mem.Limit = 8 << 20
	var ws []*State
	for id := range uint64(4) {
		s := &State{id: id}
		m.ByID[id] = s
		ws = append(ws, s)
	}
	ws[0].gone = true
	for _, s := range ws {
		m.AwaitRoom(s, RoomBudget)
	}
	share := m.Mem.SendShare(len(m.ByID))
	if share != 256<<10 {
		t.Fatalf("share %d, want 256 KiB", share)
	}
	m.Mem.SendHeld = 1<<20 + share + share/2 // above an eighth: nothing free
	m.BudgetReleased()
	if len(ev.ids) != 0 || len(m.Mem.Waiters) != 4 {
		t.Fatalf("no room: woke %v, %d waiting", ev.ids, len(m.Mem.Waiters))
	}
	m.SendReleased(2*share + share/2 + share/4) // frees share + share/4
	if len(ev.ids) != 2 || ev.ids[0] != 1 || ev.ids[1] != 2 {
		t.Fatalf("woke %v, want [1 2]", ev.ids)
	}
	if len(m.Mem.Waiters) != 1 || m.Mem.Waiters[0] != ws[3] || !ws[3].writeWait || !ws[3].budgetWait {
		t.Fatalf("still waiting %d, want stream 3 alone", len(m.Mem.Waiters))
	}
	if ws[1].writeWait || ws[1].budgetWait || ws[0].budgetWait {
		t.Fatal("a woken or gone writer still marked waiting")
	}
}

// TestAbortFinishesOnceBothSidesKnow aborts a stream holding send data
// and unread received data: its send buffer goes back to the budget, the
// unread bytes to connection credit, and it leaves the table only once
// our reset is acknowledged and the peer's final size is known.
func TestAbortFinishesOnceBothSidesKnow(t *testing.T) {
	ev := &recordedEvents{}
	m := Manager{Events: ev, Limits: Limits{StreamWindow: 1 << 20, ConnWindow: 2 << 20, InitialStreamWindow: 1 << 20, InitialSendBuffer: 1 << 20}}
	m.Init(true, 100, 100)
	m.Flow.Init(settings.InitialConnCredit, 2<<20, time.Second)
	s := m.NewStream(0, true, time.Second)
	s.writeOff, s.ackedPrefix = 5000, 1000
	m.Mem.SendHeld = 4000
	s.highestRecv, s.readOff = 3000, 1000
	s.resetSent = true
	m.Abort(s, time.Second, 100*time.Millisecond)
	if m.Mem.SendHeld != 0 || m.Flow.Consumed != 2000 || s.readOff != 3000 {
		t.Fatalf("after abort: send held %d, consumed %d, read to %d", m.Mem.SendHeld, m.Flow.Consumed, s.readOff)
	}
	m.MaybeFinish(s)
	if len(ev.closed) != 0 || m.ByID[0] == nil {
		t.Fatal("finished before our reset was acknowledged")
	}
	s.resetAcked = true
	m.MaybeFinish(s)
	if len(ev.closed) != 0 {
		t.Fatal("finished before the peer's final size was known")
	}
	s.peerReset = true
	m.MaybeFinish(s)
	m.MaybeFinish(s)
	if len(ev.closed) != 1 || ev.closed[0] != 0 || m.ByID[0] != nil || !s.gone {
		t.Fatalf("closed %v, in table %v: want closed once", ev.closed, m.ByID[0] != nil)
	}
}

// TestLostDataSkipsWhatWasAcked loses a frame part of which a later
// packet's copy delivered: only the rest is queued for repair, and once
// the prefix is acknowledged the send buffer is released and the
// waiting writer woken.
func TestLostDataSkipsWhatWasAcked(t *testing.T) {
	ev := &recordedEvents{}
	m := Manager{Events: ev, Limits: Limits{StreamWindow: 1 << 20, ConnWindow: 2 << 20, InitialStreamWindow: 1 << 20, InitialSendBuffer: 1 << 20, SendBuffer: 1 << 20}}
	m.Init(true, 100, 100)
	s := m.NewStream(0, true, time.Second)
	s.writeOff, s.openPending = 3000, false
	m.Mem.SendHeld = 3000
	m.FrameAcked(&ackhandler.SentFrame{Kind: ackhandler.KindStream, ID: 0, Off: 1000, N: 1000}, time.Second, 0)
	m.FrameLost(&ackhandler.SentFrame{Kind: ackhandler.KindStream, ID: 0, Off: 0, N: 3000})
	if s.retx.Len() != 2 || s.retx.At(0) != (ranges.Range{Start: 0, End: 1000}) || s.retx.At(1) != (ranges.Range{Start: 2000, End: 3000}) {
		t.Fatalf("repair queued %d ranges, want [0,1000) and [2000,3000)", s.retx.Len())
	}
	s.writeWait = true
	m.FrameAcked(&ackhandler.SentFrame{Kind: ackhandler.KindStream, ID: 0, Off: 0, N: 1000}, time.Second, 0)
	if s.ackedPrefix != 2000 || m.Mem.SendHeld != 1000 || s.retx.Len() != 1 || len(ev.ids) != 1 {
		t.Fatalf("acked to %d, held %d, repairs %d, woken %v", s.ackedPrefix, m.Mem.SendHeld, s.retx.Len(), ev.ids)
	}
}

// TestStreamFrameWithinCredit opens a peer stream with a STREAM frame:
// it is accepted once, its data counts for connection flow control, a
// frame beyond the stream's credit is an error (the association closes)
// after which nothing was buffered, and the application reads what came.
func TestStreamFrameWithinCredit(t *testing.T) {
	ev := &recordedEvents{}
	m := Manager{Events: ev, Limits: Limits{StreamWindow: 1 << 20, ConnWindow: 2 << 20, InitialStreamWindow: settings.InitialStreamCredit, InitialSendBuffer: 1 << 20}}
	m.Init(true, 100, 100)
	m.Flow.Init(settings.InitialConnCredit, 2<<20, time.Second)
	f := wire.Frame{Type: wire.FrameStream, StreamID: 1, Data: make([]byte, 100), HasMeta: true, Meta: []byte("m")}
	if err := m.OnStreamFrame(&f, time.Second, 0); err != nil {
		t.Fatal(err)
	}
	f.Offset, f.HasMeta = 100, false
	if err := m.OnStreamFrame(&f, time.Second, 0); err != nil {
		t.Fatal(err)
	}
	s := m.ByID[1]
	if len(ev.accepted) != 1 || s == nil || s.Contiguous() != 200 || m.Flow.Recvd != 200 {
		t.Fatalf("accepted %v, flow received %d", ev.accepted, m.Flow.Recvd)
	}
	f.Offset = s.recvMax
	if err := m.OnStreamFrame(&f, time.Second, 0); err == nil {
		t.Fatal("data beyond the stream's credit was taken")
	}
	if s.Contiguous() != 200 {
		t.Fatalf("%d bytes in order after the refused frame, want 200", s.Contiguous())
	}
	p := make([]byte, 500)
	if n, err := m.read(s, p, time.Second, 0); n != 200 || err != nil || m.Flow.Consumed != 200 {
		t.Fatalf("read %d, %v, consumed %d: want all 200", n, err, m.Flow.Consumed)
	}
	if n, err := m.read(s, p, time.Second, 0); n != 0 || err != nil || !s.readWait {
		t.Fatalf("read %d, %v with nothing left, waiting %v", n, err, s.readWait)
	}
}

// recordedFrames is a Frames recorder keeping the frames written.
type recordedFrames struct{ fs []ackhandler.SentFrame }

func (r *recordedFrames) AddFrame() *ackhandler.SentFrame {
	r.fs = append(r.fs, ackhandler.SentFrame{})
	return &r.fs[len(r.fs)-1]
}

// TestAppendStreamsRepairsFirst has one stream with a repair and another
// with new data: the repair goes first, each frame is recorded with what
// it carried, and the counts split repairs from first transmissions.
func TestAppendStreamsRepairsFirst(t *testing.T) {
	rec := &recordedFrames{}
	m := Manager{Events: &recordedEvents{}, Frames: rec, Limits: Limits{StreamWindow: 1 << 20, ConnWindow: 2 << 20, InitialStreamWindow: settings.InitialStreamCredit, InitialSendBuffer: 1 << 20}}
	m.Init(true, 100, 100)
	m.Flow.Init(settings.InitialConnCredit, 2<<20, time.Second)
	m.Flow.PeerMax = 1 << 20
	old, fresh := m.NewStream(0, true, time.Second), m.NewStream(2, true, time.Second)
	data := make([]byte, 1000)
	for _, s := range []*State{old, fresh} {
		s.sendBuf.Write(0, data)
		s.writeOff, s.openAcked = 1000, true
	}
	old.sentOff = 1000
	old.retx.Add(200, 300)
	m.ScheduleRetx(old)
	m.ScheduleNew(fresh)
	b, eliciting := m.AppendStreams(make([]byte, 0, 1400), 1400) // the packet buffer
	if !eliciting || len(rec.fs) != 2 {
		t.Fatalf("%d frames (eliciting %v), want 2", len(rec.fs), eliciting)
	}
	if f := rec.fs[0]; f.ID != 0 || f.Off != 200 || f.N != 100 {
		t.Fatalf("first frame stream %d [%d,+%d), want the repair of stream 0 [200,+100)", f.ID, f.Off, f.N)
	}
	if f := rec.fs[1]; f.ID != 2 || f.Off != 0 || f.N != 1000 {
		t.Fatalf("second frame stream %d [%d,+%d), want stream 2's new data", f.ID, f.Off, f.N)
	}
	if m.Sent.Retransmits != 1 || m.Sent.RetransmitBytes != 100 || m.Sent.BytesSent != 1000 || len(b) > 1400 {
		t.Fatalf("counts %+v, packet %d bytes", m.Sent, len(b))
	}
}

// TestAppendLightLeavesBulk: AppendLight, for a packet past its path's
// window, takes the light streams' new data and nothing of the bulk's,
// nor a repair; AppendStreams after it takes the rest.
func TestAppendLightLeavesBulk(t *testing.T) {
	m, _ := sendingManager(1<<20, 100)
	rec := m.Frames.(*recordedFrames)
	bulk, light := m.NewStream(0, true, time.Second), m.NewStream(2, true, time.Second)
	for _, s := range []*State{bulk, light} {
		s.peerMax, s.openAcked = 1<<30, true
	}
	if n := m.write(bulk, make([]byte, 100_000)); n != 100_000 {
		t.Fatalf("wrote %d of 100000", n)
	}
	bulk.sentOff = 10_000
	bulk.retx.Add(0, 500)
	m.ScheduleRetx(bulk)
	if n := m.write(light, make([]byte, 300)); n != 300 {
		t.Fatalf("wrote %d of 300", n)
	}
	if m.LightQ.Len() != 1 || m.BulkQ.Len() != 1 {
		t.Fatalf("light %d, bulk %d: want one each", m.LightQ.Len(), m.BulkQ.Len())
	}
	if _, ok := m.AppendLight(make([]byte, 0, 1400), 1400); !ok {
		t.Fatal("AppendLight added nothing")
	}
	if len(rec.fs) != 1 || rec.fs[0].ID != light.id || rec.fs[0].N != 300 {
		t.Fatalf("frames %+v: want stream %d's 300 bytes alone", rec.fs, light.id)
	}
	if _, ok := m.AppendLight(make([]byte, 0, 1400), 1400); ok {
		t.Fatal("AppendLight added the bulk's data or a repair")
	}
	if _, ok := m.AppendStreams(make([]byte, 0, 1400), 1400); !ok || rec.fs[1].ID != bulk.id {
		t.Fatalf("frames %+v: want the bulk's repair after", rec.fs)
	}
}

// TestCutCreditWhenReaderStalls: data that waits unread for stallAfter
// cuts the stream's window to StallWindow and its credit to what arrived
// or that window beyond what was read; data in flight under the old
// credit is still taken, and reading grows the credit again.
func TestCutCreditWhenReaderStalls(t *testing.T) {
	const srtt = 600 * time.Millisecond
	m := Manager{Events: &recordedEvents{}, Limits: Limits{StreamWindow: 8 << 20, ConnWindow: 16 << 20, InitialStreamWindow: 4 << 20, InitialSendBuffer: 1 << 20}}
	m.Map.Init(true, 100, 8)
	m.Flow.Init(settings.InitialConnCredit, 16<<20, 0)
	s := m.NewStream(1, false, 0)
	data := make([]byte, 1000)
	frame := func(off uint64, now time.Duration) {
		t.Helper()
		f := wire.Frame{Type: wire.FrameStream, StreamID: 1, Offset: off, Data: data}
		if err := m.OnStreamFrame(&f, now, srtt); err != nil {
			t.Fatal(err)
		}
	}
	frame(0, 0)
	frame(1000, stallAfter(srtt)-time.Millisecond) // not waited long enough yet
	if s.recvMax != 4<<20 || s.recvWin.Size != 4<<20 {
		t.Fatalf("cut too early: credit %d, window %d", s.recvMax, s.recvWin.Size)
	}
	m.CtrlQ.Clear()
	s.maxDataQueued = false
	frame(2000, stallAfter(srtt))
	if s.recvWin.Size != StallWindow || s.recvMax != StallWindow || !s.maxDataQueued {
		t.Fatalf("after the reader stalled: credit %d, window %d, announced %v; want %d", s.recvMax, s.recvWin.Size, s.maxDataQueued, StallWindow)
	}
	// What the peer sent before it heard of the cut arrives: taken.
	frame(1<<20, stallAfter(srtt)+srtt)
	if s.recvMax != 1<<20+1000 || s.recvBound != 4<<20 {
		t.Fatalf("in flight: credit %d, bound %d", s.recvMax, s.recvBound)
	}
	// Reading catches up: credit returns beyond what was read.
	buf := make([]byte, 3000)
	if n, err := m.Read(s.id, buf, 2*srtt, srtt); n != 3000 || err != nil {
		t.Fatalf("read %d, %v", n, err)
	}
	if s.waiting {
		t.Fatal("nothing waits after the reader caught up")
	}
}

// TestMaxStreamDataNewestWins: the credit a stream's sender may use is
// the newest packet's MAX_STREAM_DATA, lower or higher; an older frame
// that arrives late changes nothing, and a raise wakes a stream waiting
// for credit.
func TestMaxStreamDataNewestWins(t *testing.T) {
	m := Manager{Events: &recordedEvents{}, Limits: Limits{StreamWindow: 1 << 20, ConnWindow: 2 << 20, InitialStreamWindow: 1 << 20, InitialSendBuffer: 1 << 20}}
	m.Map.Init(true, 100, 8)
	s := m.NewStream(0, true, 0)
	m.OnMaxStreamData(s, 1<<20, 10)
	m.OnMaxStreamData(s, 300_000, 20) // cut
	m.OnMaxStreamData(s, 1<<20, 10)   // the old grant, late
	if s.peerMax != 300_000 {
		t.Fatalf("credit %d after a late old grant, want the cut's 300000", s.peerMax)
	}
	s.writeOff, s.sentOff, s.creditWait = 400_000, 300_000, true
	m.OnMaxStreamData(s, 500_000, 30)
	if s.peerMax != 500_000 || s.creditWait || m.BulkQ.Len()+m.LightQ.Len() != 1 {
		t.Fatalf("after a new grant: credit %d, waiting %v", s.peerMax, s.creditWait)
	}
}

// TestSendBufferGrowsOnlyForTheLink: told no rate, a writer that fills its
// buffer gets the buffer the pacing rate calls for, but only while the
// peer's credit is not what holds the stream: a slow reader at the far end
// must not let the writer park the rate's worth of bytes in our memory.
func TestSendBufferGrowsOnlyForTheLink(t *testing.T) {
	for _, tc := range []struct {
		name    string
		peerMax uint64
		want    uint64
	}{
		{"peer credit holds the stream", 1 << 20, 1 << 20},
		{"the buffer holds the stream", 64 << 20, 32 << 20},
	} {
		m := Manager{Events: &recordedEvents{}, Limits: Limits{StreamWindow: 8 << 20, ConnWindow: 16 << 20, InitialStreamWindow: 1 << 20, InitialSendBuffer: 1 << 20, SendBuffer: 256 << 20}}
		m.Map.Init(true, 100, 8)
		m.Flow.Init(settings.InitialConnCredit, 16<<20, 0)
		m.SendRateWindow = 32 << 20
		s := m.NewStream(0, true, 0)
		s.peerMax = tc.peerMax
		s.writeOff = 1 << 20 // the writer filled the initial buffer
		m.SendSpace(s)
		if s.sendWin.Size != tc.want {
			t.Errorf("%s: send buffer %d, want %d", tc.name, s.sendWin.Size, tc.want)
		}
	}
}

// TestUnsentShareHoldsWriterUntilSent: with many streams, a bulk writer
// may hold only its share of UnsentLimit (at least SendFloor) written and
// not yet sent, whatever its own send buffer would take; it is woken
// once its data has gone out down to half of that share, not for every
// packet, and a stream with nothing unsent still takes a request of
// SendFloor at once. A writer so held stays bulk, its FIN's tail too,
// until all it wrote has gone out (TestBulkTailStaysBulk).
func TestUnsentShareHoldsWriterUntilSent(t *testing.T) {
	m, ev := sendingManager(4<<20, 1000)
	m.UnsentLimit = 4 << 20
	var ss []*State
	for i := range uint64(1000) {
		ss = append(ss, m.NewStream(2*i, true, time.Second))
	}
	share := m.UnsentShare()
	if share != SendFloor {
		t.Fatalf("share of 4 MiB among 1,000 streams %d, want the floor %d", share, SendFloor)
	}
	bulk := ss[0]
	bulk.peerMax = 1 << 30
	if n := m.write(bulk, make([]byte, 1<<20)); n != int(share) {
		t.Fatalf("bulk writer put in %d bytes, want its share %d", n, share)
	}
	if !bulk.writeWait || !bulk.unsentWait {
		t.Fatal("the bulk writer does not wait for its unsent data")
	}
	if n := m.write(ss[1], make([]byte, 1000)); n != 1000 {
		t.Fatalf("a request beside it put in %d of 1000 bytes", n)
	}
	// Packets go out; the writer is woken once, when half its share has
	// gone.
	for len(ev.ids) == 0 && bulk.Unsent() > 0 {
		if _, ok := m.AppendStreams(make([]byte, 0, 1400), 1400); !ok {
			t.Fatal("nothing to send")
		}
		if len(ev.ids) == 0 && bulk.Unsent() <= share/2 {
			t.Fatalf("unsent %d, at most half the share, and the writer still waits", bulk.Unsent())
		}
	}
	if len(ev.ids) != 1 || ev.ids[0] != bulk.id || bulk.Unsent() > share/2 || bulk.Unsent()+1400 < share/2 {
		t.Fatalf("woken %v with %d unsent, want stream %d once with about half of %d", ev.ids, bulk.Unsent(), bulk.id, share)
	}
	// Woken, with little unsent, it is still bulk: a request keeps its
	// precedence over it. Its FIN does not change that: the tail goes
	// with the other bulk streams' turns.
	if bulk.light() {
		t.Fatal("a woken bulk writer counts as light")
	}
	if err := m.CloseWrite(bulk.id); err != nil || bulk.light() {
		t.Fatalf("after its FIN (err %v), the bulk stream with %d unsent is light", err, bulk.Unsent())
	}
	// Without a limit (no association set one), the stream's own buffer
	// decides.
	m.UnsentLimit = 0
	if space, why := m.SendSpace(bulk); why != RoomOwn || space < 1<<20 {
		t.Fatalf("no limit: room %d (%v), want the own buffer's", space, why)
	}
}

// TestHoleCreditBounded: told its rate, a stream whose reader waits on a
// hole gets credit beyond its window only for what waits behind the hole
// beyond a quarter of the window, in steps of a sixteenth, at most half
// the window more; untold (or bonded), or with its window at its cap,
// none. The reads that follow the repair move the credit on as before.
func TestHoleCreditBounded(t *testing.T) {
	const w = 4 << 20
	for _, c := range []struct {
		told   bool
		window uint64 // the window's cap
	}{{true, 64 << 20}, {false, 64 << 20}, {true, w}} {
		told := c.told && c.window > w
		m := Manager{Events: &recordedEvents{}, Limits: Limits{StreamWindow: c.window, ConnWindow: 128 << 20, InitialStreamWindow: w, InitialSendBuffer: 1 << 20}}
		m.Map.Init(true, 100, 8)
		m.Flow.Init(settings.InitialConnCredit, 128<<20, 0)
		m.HoleCredit = c.told
		s := m.NewStream(1, false, 0)
		data := make([]byte, 1000)
		// The first kilobyte is lost; what follows arrives behind it.
		most := uint64(0)
		for off := uint64(1000); off+1000 <= s.recvMax; off += 1000 {
			f := wire.Frame{Type: wire.FrameStream, StreamID: 1, Offset: off, Data: data}
			if err := m.OnStreamFrame(&f, time.Second, 600*time.Millisecond); err != nil {
				t.Fatalf("told %v: %v", told, err)
			}
			behind := s.highestRecv - s.Contiguous()
			want := uint64(w)
			if told && behind > w/4 {
				want = w + min(behind-w/4, w/2)
			}
			if s.recvMax > want || s.recvMax+w/16 < want {
				t.Fatalf("told %v: %d bytes behind the hole: credit %d, want %d less a sixteenth of the window at most", told, behind, s.recvMax, want)
			}
			most = max(most, s.recvMax)
		}
		if !told && most != w || told && (most > w+w/2 || most+w/16 < w+w/2) {
			t.Errorf("told %v: credit reached %d", told, most)
		}
		// The repair arrives; reading it all moves the credit on.
		f := wire.Frame{Type: wire.FrameStream, StreamID: 1, Offset: 0, Data: data}
		if err := m.OnStreamFrame(&f, 2*time.Second, 600*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64<<10)
		for s.readOff < s.highestRecv {
			if _, err := m.Read(s.id, buf, 2*time.Second, 600*time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		if s.recvMax < s.readOff+w*3/4 {
			t.Errorf("told %v: after the repair, credit %d with %d read", told, s.recvMax, s.readOff)
		}
	}
}
