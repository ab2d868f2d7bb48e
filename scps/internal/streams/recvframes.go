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
	if end <= s.HighestRecv {
		return nil
	}
	m.Flow.Recvd += end - s.HighestRecv
	s.HighestRecv = end
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
		if s.PeerReset {
			return nil
		}
		if end > s.HighestRecv {
			d := end - s.HighestRecv
			if err := m.addRecvd(s, end); err != nil {
				return err
			}
			m.Flow.Consumed += d
			s.ReadOff = s.HighestRecv
			m.Flow.Settle(s, s.HighestRecv)
			m.MaybeConnCredit(now, srtt)
		}
		if f.Fin && !s.finKnown {
			s.finKnown, s.finalSize = true, end
			m.MaybeFinish(s)
		}
		return nil
	}
	if end > s.recvBound {
		return fmt.Errorf("stream %d flow control: data to %d, credit %d", s.ID, end, s.recvBound)
	}
	if s.finKnown && (end > s.finalSize || f.Fin && end != s.finalSize) {
		return fmt.Errorf("stream %d final size %d changed (frame ends at %d)", s.ID, s.finalSize, end)
	}
	if f.Fin && end < s.HighestRecv {
		return fmt.Errorf("stream %d final size %d below data received (%d)", s.ID, end, s.HighestRecv)
	}
	if err := m.addRecvd(s, end); err != nil {
		return err
	}
	// Data sent before a cut of the credit arrived (readerstall.go): the
	// credit covers it.
	s.RecvMax = max(s.RecvMax, s.HighestRecv)
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
		if end > s.ReadOff {
			// The application closed its end; new data cannot be
			// delivered: reset, as TCP does.
			m.reset(s, CodeStreamClosed, now, srtt)
			return nil
		}
		m.MaybeFinish(s)
		return nil
	}
	if end > s.ReadOff && len(f.Data) > 0 {
		start := max(f.Offset, s.ReadOff)
		if !s.Recvd.Covers(start, end) {
			s.RecvBuf.Write(start, f.Data[start-f.Offset:])
			n := s.Recvd.Len()
			s.Recvd.Add(start, end)
			m.RecvdChanged(s, n)
			if c := s.Contiguous(); c > s.SettledOff {
				m.Flow.Settle(s, c)
				m.MaybeConnCredit(now, srtt)
			}
			m.checkReader(s, now, srtt)
		}
	}
	if s.readWait && s.Readable() {
		s.readWait = false
		m.Events.Notify(s)
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
	raised := max > s.PeerMax
	s.PeerMax = max
	if raised && s.CreditWait {
		s.CreditWait = false
		m.ScheduleNew(s)
	}
}

// OnResetStream applies a RESET_STREAM frame; an error is the peer's
// breach of the protocol (final size): the association closes.
func (m *Manager) OnResetStream(f *wire.Frame, now, srtt time.Duration) error {
	s := m.StreamFor(f.StreamID, now)
	if s == nil || s.PeerReset {
		return nil
	}
	if f.FinalSize < s.HighestRecv || s.finKnown && f.FinalSize != s.finalSize {
		return fmt.Errorf("stream %d reset with final size %d (received %d)", s.ID, f.FinalSize, s.HighestRecv)
	}
	if err := m.addRecvd(s, f.FinalSize); err != nil {
		return err
	}
	s.PeerReset, s.PeerCode = true, f.Code
	m.Abort(s, now, srtt)
	if !s.ResetSent {
		// Answer with our own RESET_STREAM so the peer learns our final
		// size and both sides can forget the stream.
		s.ResetSent, s.resetQueued, s.resetCode = true, true, f.Code
		m.ScheduleCtrl(s)
	}
	m.Events.Notify(s)
	m.MaybeFinish(s)
	return nil
}
