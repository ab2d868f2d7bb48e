package scps

// This file owns the receive path: a packet is first decoded completely
// without touching any state (so a malformed packet is rejected, counted
// and leaves the association as it was), then recorded for acknowledgement
// and its frames applied in order.

import (
	"errors"
	"fmt"
	"time"

	"scpsvpn/scps/internal/streams"
	"scpsvpn/scps/internal/wire"
	"scpsvpn/scps/varint"
)

// Receive processes one association packet, pkt, numbered pn (the number
// the peer's Send returned, carried beside the packet by the layer below,
// which authenticates both). A malformed packet returns an error wrapping
// ErrBadPacket and changes nothing but Stats.BadPackets. A well-formed
// packet that breaks the protocol (flow control, final size) closes the
// association and returns an error wrapping ErrProtocol. Packets after
// close are ignored.
func (a *Association) Receive(now time.Time, pn uint64, pkt []byte) error {
	a.setNow(now)
	if a.state != stateOpen {
		return nil
	}
	if pn > varint.Max {
		a.stats.BadPackets++
		return fmt.Errorf("%w: packet number %d beyond %d", ErrBadPacket, pn, uint64(varint.Max))
	}
	eliciting, err := a.validate(pkt)
	if a.ack.Duplicate(pn) && (err == nil || errors.Is(err, ErrRangesFull)) {
		a.stats.DuplicatePackets++
		return nil
	}
	if errors.Is(err, ErrRangesFull) {
		return a.refuseForRanges(pn, err)
	}
	if err != nil {
		a.stats.BadPackets++
		return fmt.Errorf("%w: packet %d: %w", ErrBadPacket, pn, err)
	}
	a.stats.PacketsReceived++
	a.stats.BytesReceived += uint64(len(pkt))
	a.ackBudget.OnReceived(a.now, len(pkt)+a.cfg.WireOverhead, a.sent.RTT().Smoothed())
	a.outage.onPacketReceived(a.now, a.sent.ElicitingInFlight())
	a.ackDelay = max(min(MaxAckDelay, a.sent.RTT().Smoothed()/time.Duration(a.cfg.AcksPerRTT)), time.Millisecond)
	a.ack.OnReceived(pn, a.now, eliciting, a.cfg.AckEvery, a.ackDelay)
	defer a.maybeResume()

	var f wire.Frame
	for p := 0; p < len(pkt); {
		n, _ := wire.ParseFrame(pkt[p:], &f) // validated above
		p += n
		if err := a.apply(&f); err != nil {
			return err
		}
		if a.state != stateOpen {
			return nil // the peer closed
		}
	}
	return nil
}

// validate decodes every frame and checks what can be checked without
// changing state. It reports whether the packet is ack-eliciting; an error
// wrapping ErrRangesFull means the packet is well-formed but its stream
// frames would break the received-range bounds (recvranges.go).
func (a *Association) validate(payload []byte) (eliciting bool, err error) {
	if len(payload) == 0 {
		return false, fmt.Errorf("no frames")
	}
	var full error
	fresh := 0
	var f wire.Frame
	for p := 0; p < len(payload); {
		n, err := wire.ParseFrame(payload[p:], &f)
		if err != nil {
			return false, fmt.Errorf("frame at %d: %w", p, err)
		}
		p += n
		if f.AckEliciting() {
			eliciting = true
		}
		switch f.Type {
		case wire.FrameAck:
			if f.Ack.Largest >= a.sent.NextPN() {
				return false, fmt.Errorf("ACK of packet %d never sent (next %d)", f.Ack.Largest, a.sent.NextPN())
			}
		case wire.FrameStream, wire.FrameResetStream, wire.FrameMaxStreamData:
			if err := a.streams.CheckID(f.StreamID); err != nil {
				return false, err
			}
			if f.Type == wire.FrameStream && full == nil {
				full = a.streams.NewRange(&f, &fresh)
			}
		}
	}
	return eliciting, full
}

// streamFor returns the stream a frame refers to, creating a peer stream
// on first sight; nil means the stream is already gone (late frame).
func (a *Association) streamFor(id uint64) *streams.State {
	if s, ok := a.streams.ByID[id]; ok {
		return s
	}
	if a.streams.IsLocal(id) || a.streams.PeerClosed.Contains(id>>1) {
		return nil
	}
	return a.streams.NewStream(id, false, a.now)
}

func (a *Association) apply(f *wire.Frame) error {
	switch f.Type {
	case wire.FramePadding, wire.FramePing:
	case wire.FrameAck:
		if a.sent.OnAck(a.now, &f.Ack) {
			a.outage.onNewlyAcked(a.now)
		}
	case wire.FrameStream:
		return a.onStreamFrame(f)
	case wire.FrameResetStream:
		return a.onResetStream(f)
	case wire.FrameMaxData:
		if f.Max > a.streams.Flow.PeerMax {
			a.streams.Flow.PeerMax = f.Max
		}
	case wire.FrameMaxStreamData:
		s := a.streamFor(f.StreamID)
		if s != nil && f.Max > s.PeerMax {
			s.PeerMax = f.Max
			if s.CreditWait {
				s.CreditWait = false
				a.streams.ScheduleNew(s)
			}
		}
	case wire.FrameMaxStreams:
		if f.Max > a.streams.PeerMax {
			a.streams.PeerMax = min(f.Max, varint.Max/2)
			a.streams.ReleasePending()
		}
	case wire.FrameDatagram:
		a.stats.DatagramsReceived++
		if a.onDatagram != nil {
			a.onDatagram(f.Data)
		}
	case wire.FrameClose:
		a.closeByPeer(f.Code, string(f.Data))
	}
	return nil
}

// addRecvd accounts bytes up to end as received on s for connection flow
// control.
func (a *Association) addRecvd(s *streams.State, end uint64) error {
	if end <= s.HighestRecv {
		return nil
	}
	a.streams.Flow.Recvd += end - s.HighestRecv
	s.HighestRecv = end
	if a.streams.Flow.Recvd > a.streams.Flow.RecvMax {
		return a.protocolError("connection flow control: %d bytes received, credit %d", a.streams.Flow.Recvd, a.streams.Flow.RecvMax)
	}
	return nil
}

func (a *Association) onStreamFrame(f *wire.Frame) error {
	s := a.streamFor(f.StreamID)
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
			if err := a.addRecvd(s, end); err != nil {
				return err
			}
			a.streams.Flow.Consumed += d
			s.ReadOff = s.HighestRecv
			a.streams.Flow.Settle(s, s.HighestRecv)
			a.streams.MaybeConnCredit(a.now, a.sent.RTT().Smoothed())
		}
		if f.Fin && !s.FinKnown {
			s.FinKnown, s.FinalSize = true, end
			a.streams.MaybeFinish(s)
		}
		return nil
	}
	if end > s.RecvMax {
		return a.protocolError("stream %d flow control: data to %d, credit %d", s.ID, end, s.RecvMax)
	}
	if s.FinKnown && (end > s.FinalSize || f.Fin && end != s.FinalSize) {
		return a.protocolError("stream %d final size %d changed (frame ends at %d)", s.ID, s.FinalSize, end)
	}
	if f.Fin && end < s.HighestRecv {
		return a.protocolError("stream %d final size %d below data received (%d)", s.ID, end, s.HighestRecv)
	}
	if err := a.addRecvd(s, end); err != nil {
		return err
	}
	if f.Fin && !s.FinKnown {
		s.FinKnown, s.FinalSize = true, end
		a.streams.Mem.Account(s)
	}
	if f.HasMeta && !s.Local && !s.MetaKnown {
		s.Meta = append([]byte(nil), f.Meta...)
		s.MetaKnown = true
		a.stats.StreamsAccepted++
		a.emit(Event{Kind: EventAccept, StreamID: s.ID})
	}
	if s.ReadClosed {
		if end > s.ReadOff {
			// The application closed its end; new data cannot be
			// delivered: reset, as TCP does.
			a.resetStream(s, CodeStreamClosed)
			return nil
		}
		a.streams.MaybeFinish(s)
		return nil
	}
	if end > s.ReadOff && len(f.Data) > 0 {
		start := max(f.Offset, s.ReadOff)
		if !s.Recvd.Covers(start, end) {
			s.RecvBuf.Write(start, f.Data[start-f.Offset:])
			n := s.Recvd.Len()
			s.Recvd.Add(start, end)
			a.streams.RecvdChanged(s, n)
			if c := s.Contiguous(); c > s.SettledOff {
				a.streams.Flow.Settle(s, c)
				a.streams.MaybeConnCredit(a.now, a.sent.RTT().Smoothed())
			}
		}
	}
	if s.ReadWait && s.Readable() {
		s.ReadWait = false
		a.notify(s)
	}
	return nil
}

func (a *Association) onResetStream(f *wire.Frame) error {
	s := a.streamFor(f.StreamID)
	if s == nil || s.PeerReset {
		return nil
	}
	if f.FinalSize < s.HighestRecv || s.FinKnown && f.FinalSize != s.FinalSize {
		return a.protocolError("stream %d reset with final size %d (received %d)", s.ID, f.FinalSize, s.HighestRecv)
	}
	if err := a.addRecvd(s, f.FinalSize); err != nil {
		return err
	}
	s.PeerReset, s.PeerCode = true, f.Code
	a.streams.Abort(s, a.now, a.sent.RTT().Smoothed())
	if !s.ResetSent {
		// Answer with our own RESET_STREAM so the peer learns our final
		// size and both sides can forget the stream.
		s.ResetSent, s.ResetQueued, s.ResetCode = true, true, f.Code
		a.streams.ScheduleCtrl(s)
	}
	a.notify(s)
	a.streams.MaybeFinish(s)
	return nil
}
