package streams

// This file owns the streams' frames of a received packet: STREAM data
// into the receive buffer with the stream's and the association's flow
// control, and a peer's RESET_STREAM. A peer that breaks flow control or
// changes a final size gets an error back, and the association closes.

import (
	"fmt"
	"time"

	"scpsvpn/scps/internal/wire"
)

// StreamFor returns the stream a frame refers to, creating a peer stream
// on first sight; nil means the stream is already gone (late frame).
func (m *Manager) StreamFor(id uint64, now time.Duration) *State {
	if s, ok := m.ByID[id]; ok {
		return s
	}
	if m.IsLocal(id) || m.PeerClosed.Contains(id>>1) {
		return nil
	}
	return m.NewStream(id, false, now)
}

// addRecvd accounts bytes up to end as received on s for connection flow
// control.
func (m *Manager) addRecvd(s *State, end uint64) error {
	if end <= s.highestRecv {
		return nil
	}
	m.Flow.Recvd += end - s.highestRecv
	s.highestRecv = end
	if m.Flow.Recvd > m.Flow.RecvMax {
		return fmt.Errorf("connection flow control: %d bytes received, credit %d", m.Flow.Recvd, m.Flow.RecvMax)
	}
	return nil
}

// OnStreamFrame applies a STREAM frame; srtt is the smoothed round-trip
// time. An error is the peer's breach of the protocol (flow control,
// final size): the association closes.
func (m *Manager) OnStreamFrame(f *wire.Frame, now, srtt time.Duration) error {
	s := m.StreamFor(f.StreamID, now)
	if s == nil {
		return nil
	}
	end := f.Offset + uint64(len(f.Data))
	if s.Aborted() {
		// Data in flight when the stream was reset: count it for
		// connection credit and drop it.
		if s.peerReset {
			return nil
		}
		if end > s.highestRecv {
			d := end - s.highestRecv
			if err := m.addRecvd(s, end); err != nil {
				return err
			}
			m.Flow.Consumed += d
			s.readOff = s.highestRecv
			m.Flow.Settle(s, s.highestRecv)
			m.MaybeConnCredit(now, srtt)
		}
		if f.Fin && !s.finKnown {
			s.finKnown, s.finalSize = true, end
			m.MaybeFinish(s)
		}
		return nil
	}
	if end > s.recvBound {
		return fmt.Errorf("stream %d flow control: data to %d, credit %d", s.id, end, s.recvBound)
	}
	if s.finKnown && (end > s.finalSize || f.Fin && end != s.finalSize) {
		return fmt.Errorf("stream %d final size %d changed (frame ends at %d)", s.id, s.finalSize, end)
	}
	if f.Fin && end < s.highestRecv {
		return fmt.Errorf("stream %d final size %d below data received (%d)", s.id, end, s.highestRecv)
	}
	if err := m.addRecvd(s, end); err != nil {
		return err
	}
	// Data sent before a cut of the credit arrived (readerstall.go): the
	// credit covers it.
	s.recvMax = max(s.recvMax, s.highestRecv)
	if f.Fin && !s.finKnown {
		s.finKnown, s.finalSize = true, end
		m.Mem.Account(s)
	}
	if f.HasMeta && !s.local && !s.metaKnown {
		s.meta = append([]byte(nil), f.Meta...)
		s.metaKnown = true
		m.Events.Accepted(s)
	}
	if s.readClosed {
		if end > s.readOff {
			// The application closed its end; new data cannot be
			// delivered: reset, as TCP does.
			m.reset(s, CodeStreamClosed, now, srtt)
			return nil
		}
		m.MaybeFinish(s)
		return nil
	}
	if end > s.readOff && len(f.Data) > 0 {
		start := max(f.Offset, s.readOff)
		if !s.recvd.Covers(start, end) {
			s.recvBuf.Write(start, f.Data[start-f.Offset:])
			n := s.recvd.Len()
			s.recvd.Add(start, end)
			m.RecvdChanged(s, n)
			if c := s.Contiguous(); c > s.settledOff {
				m.Flow.Settle(s, c)
				m.MaybeConnCredit(now, srtt)
			}
			m.checkReader(s, now, srtt)
			m.holeCredit(s)
		}
	}
	if s.readWait && s.Readable() {
		s.readWait = false
		m.notify(s)
	}
	return nil
}

// OnMaxStreamData applies a MAX_STREAM_DATA of packet pn granting max
// on s. The newest packet's frame sets the credit, up or down: the peer
// withdraws credit we have not used when its reader falls behind
// (readerstall.go), and an older frame that arrives late must not undo
// that. Data sent beyond a withdrawn credit is in flight and the peer
// takes it; repairs need no credit.
func (m *Manager) OnMaxStreamData(s *State, max, pn uint64) {
	if pn+1 < s.peerMaxPN {
		return
	}
	s.peerMaxPN = pn + 1
	raised := max > s.peerMax
	s.peerMax = max
	if raised && s.creditWait {
		s.creditWait = false
		m.ScheduleNew(s)
	}
}

// OnResetStream applies a RESET_STREAM frame; an error is the peer's
// breach of the protocol (final size): the association closes.
func (m *Manager) OnResetStream(f *wire.Frame, now, srtt time.Duration) error {
	s := m.StreamFor(f.StreamID, now)
	if s == nil || s.peerReset {
		return nil
	}
	if f.FinalSize < s.highestRecv || s.finKnown && f.FinalSize != s.finalSize {
		return fmt.Errorf("stream %d reset with final size %d (received %d)", s.id, f.FinalSize, s.highestRecv)
	}
	if err := m.addRecvd(s, f.FinalSize); err != nil {
		return err
	}
	s.peerReset, s.peerCode = true, f.Code
	m.Abort(s, now, srtt)
	if !s.resetSent {
		// Answer with our own RESET_STREAM so the peer learns our final
		// size and both sides can forget the stream.
		s.resetSent, s.resetQueued, s.resetCode = true, true, f.Code
		m.ScheduleCtrl(s)
	}
	m.notify(s)
	m.MaybeFinish(s)
	return nil
}
