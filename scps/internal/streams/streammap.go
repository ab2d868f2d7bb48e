package streams

// This file owns Map, the association's stream table: the streams by
// id, the ids we open and the stream limits both ways (MAX_STREAMS), the
// local streams waiting for the peer's stream credit, and the queues the
// packet scheduler draws streams from: repairs, light and bulk new data,
// control frames.

import (
	"fmt"

	"scpsvpn/scps/internal/ranges"
)

// Map is the association's stream table and send queues.
type Map struct {
	evenLocal  bool // we open even ids (Config.EvenStreams)
	maxStreams int  // Config.MaxStreams

	ByID             map[uint64]*State
	NextLocalID      uint64
	Pending          []*State   // local streams waiting for the peer's stream credit
	PeerMax          uint64     // our streams must have id>>1 below this
	LocalMax         uint64     // the peer's streams must have id>>1 below this
	PeerClosed       ranges.Set // id>>1 of the peer's streams that are gone
	peerClosedCount  uint64
	MaxStreamsQueued bool // a MAX_STREAMS with localMax must (again) go out
	RecvRanges       int  // received ranges held by all streams (recvranges.go)

	RetxQ  Queue // streams with data to repair
	LightQ Queue // streams with little new data: ahead of bulk
	BulkQ  Queue
	CtrlQ  Queue // streams with a RESET_STREAM or MAX_STREAM_DATA to send
}

// Init sets up the table: we open even ids when evenLocal; the peer may
// have maxStreams open at once; both sides may open initialMax streams
// before the first MAX_STREAMS.
func (m *Map) Init(evenLocal bool, maxStreams int, initialMax uint64) {
	m.evenLocal, m.maxStreams = evenLocal, maxStreams
	m.ByID = make(map[uint64]*State)
	m.PeerMax, m.LocalMax = initialMax, initialMax
	if !evenLocal {
		m.NextLocalID = 1
	}
}

func (m *Map) IsLocal(id uint64) bool {
	return (id&1 == 0) == m.evenLocal
}

// OnWire reports whether s may appear in packets: a local stream needs the
// peer's stream credit.
func (m *Map) OnWire(s *State) bool {
	return !s.local || s.id>>1 < m.PeerMax
}

// CheckID reports a stream id a well-formed packet must not name: our own
// stream we never opened, or a peer stream beyond the limit we granted.
func (m *Map) CheckID(id uint64) error {
	if m.IsLocal(id) {
		if id >= m.NextLocalID {
			return fmt.Errorf("stream %d: ours, never opened", id)
		}
		return nil
	}
	if id>>1 >= m.LocalMax {
		return fmt.Errorf("stream %d: over the stream limit %d", id, m.LocalMax)
	}
	return nil
}

// Remove takes s out of the table; a peer stream's id is remembered (late
// frames for it create nothing) and counts toward raising the peer's
// stream limit.
func (m *Map) Remove(s *State) {
	delete(m.ByID, s.id)
	m.RecvRanges -= s.recvd.Len()
	s.recvd.Clear()
	if !s.local {
		idx := s.id >> 1
		m.PeerClosed.Add(idx, idx+1)
		m.peerClosedCount++
		m.MaybeMaxStreams()
	}
}

// Clear forgets every stream and queue entry (the association ended).
func (m *Map) Clear() {
	clear(m.ByID)
	m.Pending = nil
	m.RetxQ.Clear()
	m.LightQ.Clear()
	m.BulkQ.Clear()
	m.CtrlQ.Clear()
}

// DataQueued reports whether streams wait to send repairs or new data.
func (m *Map) DataQueued() bool {
	return m.RetxQ.Len() > 0 || m.LightQ.Len() > 0 || m.BulkQ.Len() > 0
}

// HasWork reports whether any stream-related frame waits to be sent.
func (m *Map) HasWork() bool {
	return m.CtrlQ.Len() > 0 || m.MaxStreamsQueued || m.DataQueued()
}

// ScheduleNew puts s in a new-data queue if it can send new data now.
func (m *Map) ScheduleNew(s *State) {
	if s.gone || s.Aborted() || s.queued&inNewQ != 0 || !m.OnWire(s) {
		return
	}
	if !s.CanSendNew() {
		if s.sentOff < s.writeOff && s.sentOff >= s.peerMax {
			s.creditWait = true
		}
		return
	}
	s.queued |= inNewQ
	if s.light() {
		m.LightQ.Push(s)
	} else {
		s.bulkRun = true
		m.BulkQ.Push(s)
	}
}

// light reports whether s has little new data to send and its writer
// waits for no room: a request, a reply, an interactive write. A writer
// the unsent share holds (Manager.UnsentShare) has little unsent by
// construction: it stays bulk, woken or not, until it queues its FIN or
// everything it wrote has gone out; otherwise each wake would put a
// bulk stream ahead of the others and of the requests. So does a stream
// that sent LightRun or more since it was last idle (runStart): a
// download whose writer is slower than the links (a server, or a loaded
// host's netstack, short of the LEO's 100 Mbit/s) has little unsent
// whenever it is looked at, and as light every byte of it went on the
// lowest-delay path, none on a GEO beside it. And a stream queued as bulk
// stays bulk, its FIN's tail too, until all it wrote has gone out: once
// 16 KiB were left, each of a thousand 30 kB downloads went ahead of the
// others, and they finished one after another instead of together (the
// first at 7.3 s, the last at 25.5 s; Jain's index 0.908, now 0.998).
func (s *State) light() bool {
	return s.Unsent() <= LightThreshold && !s.writeWait && !s.unsentHeld && !s.bulkRun && s.sentOff-s.runStart < LightRun
}

// LightWaiting reports whether a light stream's data waits to go: new
// data in the light queue (an entry may be stale: the answer errs towards
// light) or a repair of one among the first lightRetxScan repairs; they
// go out within a packet or a few. Several paths put it on the
// lowest-delay one. Looking at the head of the repairs alone, a reply
// queued behind a bulk repair went with it on whichever path bonding
// chose, a GEO one beside a cellular one now and then (its answer 350 ms
// late).
func (m *Map) LightWaiting() bool {
	if m.LightQ.Len() > 0 {
		return true
	}
	for i := range min(m.RetxQ.Len(), lightRetxScan) {
		if s := m.RetxQ.At(i); !s.gone && s.light() {
			return true
		}
	}
	return false
}

// Light reports whether stream id is a light one (see LightWaiting).
func (m *Map) Light(id uint64) bool {
	s := m.ByID[id]
	return s != nil && !s.gone && s.light()
}

// lightRetxScan is how many repairs from the head LightWaiting looks at:
// a few bulk streams' repairs ahead of a light one's go in a packet or
// two; a light repair further back waits longer anyway.
const lightRetxScan = 4

func (m *Map) ScheduleRetx(s *State) {
	if s.gone || s.Aborted() || s.queued&inRetxQ != 0 || !s.HasRetx() {
		return
	}
	s.queued |= inRetxQ
	m.RetxQ.Push(s)
}

func (m *Map) ScheduleCtrl(s *State) {
	if s.gone || s.queued&inCtrlQ != 0 || !m.OnWire(s) {
		return
	}
	s.queued |= inCtrlQ
	m.CtrlQ.Push(s)
}

// SetMaxStreams changes how many streams the peer may have open at once
// and raises its limit if that allows.
func (m *Map) SetMaxStreams(n int) {
	m.maxStreams = n
	m.MaybeMaxStreams()
}

// PopCtrl takes the stream at the head of CtrlQ off it.
func (m *Map) PopCtrl() { m.CtrlQ.Pop().queued &^= inCtrlQ }

// PopRetx takes the stream at the head of RetxQ off it.
func (m *Map) PopRetx() { m.RetxQ.Pop().queued &^= inRetxQ }

// PopNew takes the stream at the head of q, LightQ or BulkQ, off it.
func (m *Map) PopNew(q *Queue) { q.Pop().queued &^= inNewQ }

// MaybeMaxStreams raises the peer's stream limit as its streams close.
func (m *Map) MaybeMaxStreams() {
	target := m.peerClosedCount + uint64(m.maxStreams)
	step := uint64(max(1, m.maxStreams/8))
	if target >= m.LocalMax+step {
		m.LocalMax = target
		m.MaxStreamsQueued = true
	}
}

// ReleasePending moves local streams that now have stream credit onto the
// wire.
func (m *Map) ReleasePending() {
	n := 0
	for _, s := range m.Pending {
		if s.gone {
			n++
			continue
		}
		if !m.OnWire(s) {
			break
		}
		n++
		if s.resetQueued || s.maxDataQueued {
			m.ScheduleCtrl(s)
		}
		if !s.resetQueued {
			m.ScheduleNew(s)
		}
	}
	m.Pending = m.Pending[n:]
	if len(m.Pending) == 0 {
		m.Pending = nil
	}
}
