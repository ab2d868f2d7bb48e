package streams

// This file owns Manager, the association's streams as one owner: the
// stream table and queues (Map), connection-level flow control (ConnFlow)
// and the memory budget (MemBudget), and the rules that join them:
// creating a stream with its windows, the application's writes into its
// send buffer and reads from its receive buffer, resetting and aborting
// it and removing it once both sides are done, granting stream and
// connection credit as the application reads, and waking writers that
// wait for the budget. What the driver must hear goes to Events; times come from the
// caller.

import (
	"errors"
	"io"
	"slices"
	"time"

	"scpsvpn/scps/settings"
)

// Events is where the streams report what the association's driver must
// act on.
type Events interface {
	// Notify: s became readable or writable, or was reset: the driver
	// retries its blocked reads and writes. Once per change until the
	// driver calls s.EventTaken.
	Notify(s *State)
	// Closed: s left the stream table.
	Closed(s *State)
	// Accepted: the peer opened s and its metadata arrived.
	Accepted(s *State)
}

// CodeStreamClosed resets a stream the application closed with unread
// data, or that received data after the application closed it
// (scps.CodeStreamClosed).
const CodeStreamClosed = 0x1

// ErrStreamClosed: the stream was closed or reset locally
// (scps.ErrStreamClosed).
var ErrStreamClosed = errors.New("scps: stream closed")

// Limits are the window sizes and the stream limit the configuration sets
// for the streams.
type Limits struct {
	StreamWindow        uint64 // how far a stream's receive window may grow
	ConnWindow          uint64 // how far the association's receive window may grow
	InitialStreamWindow uint64 // a new stream's receive window
	InitialSendBuffer   uint64 // a new stream's send buffer
	SendBuffer          uint64 // how far a stream's send buffer may grow
	MaxPending          int    // local streams that may wait for the peer's stream credit (Open)
}

// Manager holds the association's streams, their flow control and the
// memory budget. The stream table's fields and methods are Map's,
// promoted.
type Manager struct {
	Map
	Flow   ConnFlow
	Mem    MemBudget
	Limits Limits
	Events Events
	Frames Frames     // records the frames the writers add (appendframes.go)
	Sent   SendCounts // what the frame writers sent
	// Unsent is what the application wrote that has not been sent once,
	// all streams: data that waits for credit is not the end of a burst
	// (tail copies, internal/ackhandler/tailcopy.go).
	Unsent uint64

	RangeStrikes int // packets dropped in a row for the received-range bounds (recvranges.go)
	// RateWindow is the receive window the link's measured rate calls
	// for (the association times the peer's packet trains): a stream
	// whose reader keeps up gets it at once instead of doubling up to it
	// once per round trip.
	RateWindow uint64
	// RateWindowHeld: the flight's ACKs are held for their points
	// (ackhandler.ReceivedPacketHandler.Holding): the window follows
	// RateWindow in steps of rateWindowStep, not packet by packet.
	RateWindowHeld bool
	// HoleCredit: the receive windows were sized from a told rate on
	// one path, so a hole that holds a reader long may take credit
	// beyond them (holecredit.go).
	HoleCredit bool
	// SendRateWindow is the send buffer the controller's rate calls for
	// (told no rate, the association's pacing rate times the RTT): a
	// writer that finds its buffer full gets it at once.
	SendRateWindow uint64
	// UnsentLimit is how much written data the streams together may hold
	// not yet sent (0: no limit); the association sets it from its rate
	// and RTT (UnsentShare splits it). Data that waits unsent beyond what
	// keeps the link busy adds only delay: at the far endpoint of a
	// thousand bulk downloads, the servers' fill of hundreds of MB of
	// send buffers kept its TUN queue full for tens of seconds, and a new
	// connection's handshake and answer waited behind it.
	UnsentLimit uint64
}

// Room says what limits a writer's room in its send buffer.
type Room uint8

const (
	RoomOwn    Room = iota // the stream's own send buffer (auto-tuned)
	RoomBudget             // the memory budget (MemBudget)
	RoomUnsent             // its share of UnsentLimit
)

// UnsentShare is the most written data one stream may hold unsent: an
// even share of UnsentLimit among the streams, at least SendFloor, so a
// request or a reply header always goes in at once.
func (m *Manager) UnsentShare() uint64 {
	return max(m.UnsentLimit/uint64(max(len(m.ByID), 1)), SendFloor)
}

// NewStream adds a stream to the table. With a known receive rate its
// receive window starts at twice the bandwidth-delay product and the
// credit goes out at once (with the stream's first frame for a local
// stream, with the first ACK for a peer's), so a known link fills from the
// second round trip on.
func (m *Manager) NewStream(id uint64, local bool, now time.Duration) *State {
	s := &State{
		id:      id,
		local:   local,
		peerMax: settings.InitialStreamCredit,
	}
	m.ByID[id] = s
	w := min(m.Limits.InitialStreamWindow, m.RecvWindowLimit(s))
	s.recvMax, s.recvBound = w, w
	m.Mem.Account(s)
	s.recvWin.Init(w, now, 0)
	s.sendWin.Init(m.Limits.InitialSendBuffer, now, 0)
	if w > settings.InitialStreamCredit {
		s.maxDataQueued = true
		m.ScheduleCtrl(s)
	}
	return s
}

// notify tells the driver that s became readable or writable, or was
// reset, once until it takes the event (State.EventTaken): a stream that
// changes many times before the driver looks costs one event.
func (m *Manager) notify(s *State) {
	if s.eventQueued || s.gone {
		return
	}
	s.eventQueued = true
	m.Events.Notify(s)
}

// Shutdown forgets every stream, their buffers and queue entries (the
// association ended), and returns their ids in order, for the driver's
// events.
func (m *Manager) Shutdown() []uint64 {
	ids := make([]uint64, 0, len(m.ByID))
	for id := range m.ByID {
		ids = append(ids, id)
	}
	slices.Sort(ids) // deterministic event order
	for _, id := range ids {
		s := m.ByID[id]
		s.gone = true
		s.sendBuf.Free()
		s.recvBuf.Free()
	}
	m.Clear()
	return ids
}

// Buffered is how many bytes the streams' buffers hold in memory.
func (m *Manager) Buffered() int {
	n := 0
	for _, s := range m.ByID {
		send, recv := s.Buffered()
		n += send + recv
	}
	return n
}

// SendSpace is how many bytes s's send buffer accepts now
// (MemBudget.SendSpace with the association's streams and credit, and
// s's share of UnsentLimit), and what limits it.
func (m *Manager) SendSpace(s *State) (space int, why Room) {
	if w := min(m.SendRateWindow, m.Limits.SendBuffer); w > s.sendWin.Size && s.writeOff-s.ackedPrefix >= s.sendWin.Size/2 && s.writeOff < s.peerMax {
		// The writer fills its buffer, the peer's reader would take more
		// than is written, and the link is faster than it drains: size
		// it as a configured rate would. A peer whose credit holds the
		// stream (a slow reader over there) grows nothing here: what
		// the writer adds would only wait in memory.
		s.sendWin.Size = w
	}
	space, budget := m.Mem.SendSpace(s, len(m.ByID), m.Flow.RecvMax-m.Flow.Consumed)
	if budget {
		why = RoomBudget
	}
	if m.UnsentLimit > 0 {
		if u := int(m.UnsentShare()) - int(s.Unsent()); u < space {
			return u, RoomUnsent
		}
	}
	return space, why
}

// AwaitRoom marks a writer waiting for room in s's send buffer: room the
// memory budget withholds, its share of the unsent data, or the stream's
// own.
func (m *Manager) AwaitRoom(s *State, why Room) {
	s.writeWait = true
	switch why {
	case RoomBudget:
		m.Mem.Wait(s)
	case RoomUnsent:
		s.unsentWait, s.unsentHeld = true, true
	default:
		s.sendLimited = true
	}
}

// unsentSent wakes s's writer once what it waited for, its unsent data
// below its share, has gone out down to half of the share: the link has
// what it needs meanwhile, and the writer is not woken for every packet.
func (m *Manager) unsentSent(s *State) {
	if s.Unsent() == 0 && !s.writeWait {
		s.unsentHeld = false // drained: its next write may be light
		s.bulkRun = false
	}
	if !s.unsentWait || s.Unsent() > m.UnsentShare()/2 {
		return
	}
	s.unsentWait = false
	if s.writeWait {
		s.writeWait = false
		m.notify(s)
	}
}

// BudgetReleased wakes writers waiting for the budget once some of it is
// free (acknowledged data, reads or resets released memory): the longest
// waiting first, as many as a share each can serve, so thousands of
// stalled writers are not all woken for every acknowledgement. A writer
// that still finds no room waits again at the back.
func (m *Manager) BudgetReleased() {
	b := &m.Mem
	if len(b.Waiters) == 0 {
		return
	}
	free := b.SendFree(m.Flow.RecvMax - m.Flow.Consumed)
	share := b.SendShare(len(m.ByID))
	i := 0
	for ; i < len(b.Waiters) && free > 0; i++ {
		s := b.Waiters[i]
		s.budgetWait = false
		if !s.gone && s.writeWait {
			s.writeWait = false
			m.notify(s)
			free -= min(free, share)
		}
	}
	n := copy(b.Waiters, b.Waiters[i:])
	clear(b.Waiters[n:])
	b.Waiters = b.Waiters[:n]
}

// SendReleased accounts n bytes of send buffer acknowledged (or dropped
// by a reset).
func (m *Manager) SendReleased(n uint64) {
	m.Mem.SendHeld -= n
	m.BudgetReleased()
}

// RecvWindowLimit is how far s's receive window may reach now: the
// configured limit, and with a budget the initial credit plus s's even
// share of an eighth of the budget, and what that eighth has left beside
// the other streams' credit; never below the initial credit.
func (m *Manager) RecvWindowLimit(s *State) uint64 {
	l := m.Limits.StreamWindow
	if b := &m.Mem; b.Limit > 0 {
		pool := b.Limit / 8
		share := pool / uint64(max(len(m.ByID), 1))
		others := b.RecvGranted - s.credited
		left := uint64(0)
		if others < pool {
			left = pool - others
		}
		l = max(min(l, settings.InitialStreamCredit+min(share, left)), settings.InitialStreamCredit)
	}
	return l
}

// ConnHold is how far the association's credit may reach beyond what the
// application consumed (ConnFlow.MaybeCredit).
func (m *Manager) ConnHold() uint64 {
	l := m.Limits.ConnWindow
	if m.Mem.Limit > 0 {
		l = min(l, m.Mem.RecvHold())
	}
	return l
}

// rateWindowStep: while the first flight's ACKs are held for its points
// (RateWindowHeld), a receive window that follows the link's measured
// rate (RateWindow) moves only when the rate calls for at least a
// 1/rateWindowStep more. Each move is a MAX_STREAM_DATA, most often in a
// packet of its own that carries the ACK so far and its points. The
// receiver's arrival rate, timed over a train from its first packet,
// creeps up with each arrival of a flight whose first packet came a
// moment ahead of the rest (the far end's writer, idle before the
// burst): through the binary (20M/64k told nothing) that was a window
// update per packet of the flight, 30 packets that queued 7.6 ms each on
// the 64 kbit/s return link, no ACK packet held the flight's timing, and
// the sender timed the return link's queue: 0.2 MB/s of 2.5. Not beyond
// the hold: a flight timed again at 250 Mbit/s in batches needs the
// window at once (TestUntoldStartupFlightInOneBatch lost 2 points).
const rateWindowStep = 8

// MaybeStreamCredit grants more stream credit once a quarter of the
// window was consumed; srtt is the smoothed round-trip time.
func (m *Manager) MaybeStreamCredit(s *State, now, srtt time.Duration) {
	if s.finKnown || s.Aborted() || s.readClosed {
		return
	}
	limit := m.RecvWindowLimit(s)
	step := uint64(0)
	if m.RateWindowHeld {
		step = s.recvWin.Size / rateWindowStep
	}
	if w := min(m.RateWindow, limit); w > s.recvWin.Size+step && s.readOff == s.Contiguous() && !s.cut {
		// The reader keeps up with what arrives, and the link is
		// faster than the window: size it as a configured rate would.
		// Not once it fell behind (readerstall.go): a slow reader
		// catches up now and then, and would draw the link's window.
		s.recvWin.Init(w, now, s.readOff)
	} else if s.recvMax-s.readOff > s.recvWin.Size*3/4 {
		return
	} else {
		s.recvWin.Update(s.readOff, limit, now, srtt)
	}
	s.recvWin.Size = min(s.recvWin.Size, limit) // more streams: a smaller share
	if want := s.recvWin.Size * 3 / 2; want > m.Flow.Window.Size {
		m.Flow.Window.Size = min(want, m.Limits.ConnWindow)
	}
	if e := s.readOff + s.recvWin.Size; e > s.recvMax {
		m.grantStream(s, e)
	}
}

// grantStream raises s's credit to e and queues its MAX_STREAM_DATA.
func (m *Manager) grantStream(s *State, e uint64) {
	s.recvMax = e
	s.recvBound = max(s.recvBound, e)
	s.maxDataQueued = true
	m.ScheduleCtrl(s)
	m.Mem.Account(s)
}

// RateWindowGrown sizes the streams' receive windows afresh from
// RateWindow (MaybeStreamCredit) outside a read: the link's rate was
// timed before data came (a path train, scps ProbePath), and a stream
// opened before it (a download's request) kept its initial window until
// its first data was read, the sender held at 1 MiB in flight for a
// round trip of the train's estimate (250/3 told nothing).
func (m *Manager) RateWindowGrown(now, srtt time.Duration) {
	for _, s := range m.ByID {
		m.MaybeStreamCredit(s, now, srtt)
	}
	m.MaybeConnCredit(now, srtt)
}

// MaybeConnCredit grants more connection credit as data arrives in order
// and as the application reads (ConnFlow.MaybeCredit).
func (m *Manager) MaybeConnCredit(now, srtt time.Duration) {
	m.Flow.MaybeCredit(now, srtt, m.Limits.ConnWindow, m.ConnHold())
}

// Abort drops both directions' data of s; bytes the peer sent that will
// never be read are returned to connection credit.
func (m *Manager) Abort(s *State, now, srtt time.Duration) {
	if !s.sendFreed {
		s.sendFreed = true
		m.Unsent -= s.writeOff - s.sentOff
		m.SendReleased(s.writeOff - s.ackedPrefix)
	}
	s.sendBuf.Free()
	s.acked.Clear()
	s.retx.Clear()
	s.finLost, s.openPending = false, false
	if s.highestRecv > s.readOff {
		m.Flow.Consumed += s.highestRecv - s.readOff
		s.readOff = s.highestRecv
	}
	m.Flow.Settle(s, s.highestRecv) // bytes behind holes are discarded too
	s.recvBuf.Free()
	before := s.recvd.Len()
	s.recvd.Clear()
	m.RecvdChanged(s, before)
	s.maxDataQueued = false
	m.Mem.Account(s)
	m.MaybeConnCredit(now, srtt)
}

// MaybeFinish removes s when both sides are done with it.
func (m *Manager) MaybeFinish(s *State) {
	if s.gone {
		return
	}
	var done bool
	if s.Aborted() {
		// Our RESET_STREAM must be acknowledged, and we must know how
		// much the peer sent: from its own RESET_STREAM, or from its FIN
		// when it had finished (it may have forgotten the stream then, and
		// will not answer our reset).
		done = s.resetAcked && (s.peerReset || s.finKnown && s.highestRecv == s.finalSize)
	} else {
		done = s.SendDone() && s.RecvDone() && (s.eofRead || s.readClosed)
	}
	if done {
		m.finish(s)
	}
}

// finish takes s out of the table and frees its buffers.
func (m *Manager) finish(s *State) {
	s.gone = true
	m.Mem.Account(s)
	s.sendBuf.Free()
	s.recvBuf.Free()
	m.Remove(s)
	m.Events.Closed(s)
}

// reset aborts s from our side (the application's reset or close, or data
// for a stream the application closed) with code.
func (m *Manager) reset(s *State, code uint64, now, srtt time.Duration) {
	s.localErr = ErrStreamClosed
	m.Abort(s, now, srtt)
	s.resetSent, s.resetQueued, s.resetCode = true, true, code
	m.ScheduleCtrl(s)
	m.notify(s)
}

// write copies as much of p into s's send buffer as fits and returns how
// much; short of all of p, the writer waits for room (AwaitRoom).
func (m *Manager) write(s *State, p []byte) int {
	space, why := m.SendSpace(s)
	n := min(len(p), space)
	if n < len(p) {
		m.AwaitRoom(s, why)
	}
	if n <= 0 {
		return 0
	}
	s.sendBuf.Write(s.writeOff, p[:n])
	s.writeOff += uint64(n)
	m.Mem.SendHeld += uint64(n)
	m.Unsent += uint64(n)
	m.ScheduleNew(s)
	return n
}

// read copies received in-order data of s into p and grants credit for
// what was read; io.EOF after the peer's FIN once everything was read, 0
// with a nil error when nothing is available yet (the reader waits:
// readWait). srtt is the smoothed round-trip time.
func (m *Manager) read(s *State, p []byte, now, srtt time.Duration) (int, error) {
	avail := s.Contiguous() - s.readOff
	if avail == 0 {
		if s.finKnown && s.readOff == s.finalSize {
			s.eofRead = true
			m.MaybeFinish(s)
			return 0, io.EOF
		}
		s.readWait = true
		return 0, nil
	}
	n := int(min(uint64(len(p)), avail))
	if n == 0 {
		return 0, nil
	}
	s.recvBuf.Read(s.readOff, p[:n])
	s.readOff += uint64(n)
	s.readAt()
	s.recvBuf.Release(s.readOff)
	before := s.recvd.Len()
	s.recvd.RemoveBelow(s.readOff)
	m.RecvdChanged(s, before)
	m.Flow.Consumed += uint64(n)
	m.Mem.Account(s)
	m.MaybeStreamCredit(s, now, srtt)
	m.MaybeConnCredit(now, srtt)
	m.BudgetReleased()
	return n, nil
}
