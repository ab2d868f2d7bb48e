package scps

// This file owns streamMap, the Association's stream table: the streams by
// id, the ids we open and the stream limits both ways (MAX_STREAMS), the
// local streams waiting for the peer's stream credit, and the queues the
// packet scheduler draws streams from: repairs, light and bulk new data,
// control frames.

import (
	"fmt"

	"scpsvpn/scps/internal/ranges"
)

type streamMap struct {
	evenLocal  bool // we open even ids (Config.EvenStreams)
	maxStreams int  // Config.MaxStreams

	byID             map[uint64]*streamState
	nextLocalID      uint64
	pending          []*streamState // local streams waiting for the peer's stream credit
	peerMax          uint64         // our streams must have id>>1 below this
	localMax         uint64         // the peer's streams must have id>>1 below this
	peerClosed       ranges.Set     // id>>1 of the peer's streams that are gone
	peerClosedCount  uint64
	maxStreamsQueued bool // a MAX_STREAMS with localMax must (again) go out
	recvRanges       int  // received ranges held by all streams (recvranges.go)

	retxQ  streamQueue // streams with data to repair
	lightQ streamQueue // streams with little new data: ahead of bulk
	bulkQ  streamQueue
	ctrlQ  streamQueue // streams with a RESET_STREAM or MAX_STREAM_DATA to send
}

func (m *streamMap) init(cfg Config) {
	m.evenLocal, m.maxStreams = cfg.EvenStreams, cfg.streamLimit()
	m.byID = make(map[uint64]*streamState)
	m.peerMax, m.localMax = InitialMaxStreams, InitialMaxStreams
	if !cfg.EvenStreams {
		m.nextLocalID = 1
	}
}

func (m *streamMap) isLocal(id uint64) bool {
	return (id&1 == 0) == m.evenLocal
}

// onWire reports whether s may appear in packets: a local stream needs the
// peer's stream credit.
func (m *streamMap) onWire(s *streamState) bool {
	return !s.local || s.id>>1 < m.peerMax
}

// checkID reports a stream id a well-formed packet must not name: our own
// stream we never opened, or a peer stream beyond the limit we granted.
func (m *streamMap) checkID(id uint64) error {
	if m.isLocal(id) {
		if id >= m.nextLocalID {
			return fmt.Errorf("stream %d: ours, never opened", id)
		}
		return nil
	}
	if id>>1 >= m.localMax {
		return fmt.Errorf("stream %d: over the stream limit %d", id, m.localMax)
	}
	return nil
}

// remove takes s out of the table; a peer stream's id is remembered (late
// frames for it create nothing) and counts toward raising the peer's
// stream limit.
func (m *streamMap) remove(s *streamState) {
	delete(m.byID, s.id)
	m.recvRanges -= s.recvd.Len()
	s.recvd.Clear()
	if !s.local {
		idx := s.id >> 1
		m.peerClosed.Add(idx, idx+1)
		m.peerClosedCount++
		m.maybeMaxStreams()
	}
}

// clear forgets every stream and queue entry (the association ended).
func (m *streamMap) clear() {
	clear(m.byID)
	m.pending = nil
	m.retxQ.clear()
	m.lightQ.clear()
	m.bulkQ.clear()
	m.ctrlQ.clear()
}

// dataQueued reports whether streams wait to send repairs or new data.
func (m *streamMap) dataQueued() bool {
	return m.retxQ.len() > 0 || m.lightQ.len() > 0 || m.bulkQ.len() > 0
}

// hasWork reports whether any stream-related frame waits to be sent.
func (m *streamMap) hasWork() bool {
	return m.ctrlQ.len() > 0 || m.maxStreamsQueued || m.dataQueued()
}

// scheduleNew puts s in a new-data queue if it can send new data now.
func (m *streamMap) scheduleNew(s *streamState) {
	if s.gone || s.aborted() || s.queued&inNewQ != 0 || !m.onWire(s) {
		return
	}
	if !s.canSendNew() {
		if s.sentOff < s.writeOff && s.sentOff >= s.peerMax {
			s.creditWait = true
		}
		return
	}
	s.queued |= inNewQ
	if s.unsent() <= lightThreshold && !s.writeWait {
		m.lightQ.push(s)
	} else {
		m.bulkQ.push(s)
	}
}

func (m *streamMap) scheduleRetx(s *streamState) {
	if s.gone || s.aborted() || s.queued&inRetxQ != 0 || !s.hasRetx() {
		return
	}
	s.queued |= inRetxQ
	m.retxQ.push(s)
}

func (m *streamMap) scheduleCtrl(s *streamState) {
	if s.gone || s.queued&inCtrlQ != 0 || !m.onWire(s) {
		return
	}
	s.queued |= inCtrlQ
	m.ctrlQ.push(s)
}

// maybeMaxStreams raises the peer's stream limit as its streams close.
func (m *streamMap) maybeMaxStreams() {
	target := m.peerClosedCount + uint64(m.maxStreams)
	step := uint64(max(1, m.maxStreams/8))
	if target >= m.localMax+step {
		m.localMax = target
		m.maxStreamsQueued = true
	}
}

// releasePending moves local streams that now have stream credit onto the
// wire.
func (m *streamMap) releasePending() {
	n := 0
	for _, s := range m.pending {
		if s.gone {
			n++
			continue
		}
		if !m.onWire(s) {
			break
		}
		n++
		if s.resetQueued || s.maxDataQueued {
			m.scheduleCtrl(s)
		}
		if !s.resetQueued {
			m.scheduleNew(s)
		}
	}
	m.pending = m.pending[n:]
	if len(m.pending) == 0 {
		m.pending = nil
	}
}
