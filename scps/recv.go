package scps

// This file owns the receive path: a packet is first decoded completely
// without touching any state (so a malformed packet is rejected, counted
// and leaves the association as it was), then recorded for acknowledgement
// and its frames applied in order.

import (
	"errors"
	"fmt"
	"time"

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
	a.rxAt = a.arrivedAt()
	if a.state != stateOpen {
		return nil
	}
	if pn > varint.Max {
		a.stats.BadPackets++
		return fmt.Errorf("%w: packet number %d beyond %d", ErrBadPacket, pn, uint64(varint.Max))
	}
	eliciting, mark, err := a.validate(pkt)
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
	// Timed from its arrival, the ACK's reported delay covers the time
	// the host held the packet, which the peer then leaves out of its RTT
	// sample.
	a.ack.SetTimed(!a.rxArrived.IsZero())
	a.ack.OnReceived(pn, a.rxAt, eliciting, a.cfg.AckEvery, a.ackDelay)
	train := isTrainPacket(pkt)
	if mark || train && !a.ack.Holding(a.rxAt) {
		// A path train's packets all look alike: the first that
		// comes outside a hold marks the train (ProbePath).
		a.ack.AckAtOnce()
	}
	a.trainRecvd = a.trainRecvd || train
	// With several paths a told rate is the first path's alone (the
	// association's [peer.link]): the windows follow what is measured
	// there too, or a bonded transfer is held to the first link's
	// bandwidth-delay product.
	multi := a.paths.multi()
	if eliciting && (a.cfg.RecvRate == 0 || multi) {
		// Told no rate, the windows follow the rate the peer's
		// trains arrive at (told one, they start at its product).
		a.arrival.OnPacket(a.abs(a.rxAt), len(pkt))
		a.streams.RateWindow = uint64(windowBDPs * a.arrival.Peak() * a.windowRTT().Seconds())
	}
	a.streams.RateWindowHeld = a.ack.Holding(a.rxAt)
	// Told the rate on one path, the windows are its bandwidth-delay
	// products: a hole that holds a reader long may take credit beyond
	// them (streams' holecredit.go).
	a.streams.HoleCredit = a.cfg.RecvRate > 0 && !multi
	defer a.maybeResume()

	a.sent.OnPacketReceived()
	a.parityIn.store(pn, pkt)
	var f wire.Frame
	for p := 0; p < len(pkt); {
		n, _ := wire.ParseFrame(pkt[p:], &f) // validated above
		p += n
		if err := a.apply(&f, pn); err != nil {
			return err
		}
		if a.state != stateOpen {
			return nil // the peer closed
		}
	}
	a.recoverParity()
	if a.state != stateOpen {
		return nil
	}
	a.sizeSendBuffers(multi)
	return nil
}

// sizeSendBuffers sizes the send buffers after a packet's frames, from
// the pacer's rate as its ACKs leave it (UpdatePacer). Sized before them,
// they followed the rate of the last packet sent: the ACK packet that
// brings the first flight's estimate left the streams at the 4 MiB floor
// until the next ACK, a round trip later, and through the binary (250/3
// told nothing) the first paced round at 378 Mbit/s carried 4 MB of the
// 30 it was paced for, slow start then ending with the window cut to what
// that round delivered.
func (a *Association) sizeSendBuffers(multi bool) {
	a.sent.UpdatePacer(a.now)
	if a.cfg.SendRate == 0 || multi {
		// Told no rate, the send buffers follow the controller's rate
		// as the receive windows follow the peer's trains (Receive).
		a.streams.SendRateWindow = max(a.streams.SendRateWindow, uint64(windowBDPs*a.pacingRate()*a.windowRTT().Seconds()))
	}
	// What the streams may hold unsent follows the rate as well: enough
	// to keep the link busy while the writers refill, not what the memory
	// budget allows (streams.Manager.UnsentLimit).
	a.streams.UnsentLimit = max(a.streams.Limits.InitialSendBuffer, uint64(unsentBDPs*a.pacingRate()*a.windowRTT().Seconds()))
}

// validate decodes every frame and checks what can be checked without
// changing state. It reports whether the packet is ack-eliciting and
// whether it carries a timing mark (a PING beside stream data: the first
// packet of a flight the peer times, acknowledged at once); an error
// wrapping ErrRangesFull means the packet is well-formed but its stream
// frames would break the received-range bounds (recvranges.go).
func (a *Association) validate(payload []byte) (eliciting, mark bool, err error) {
	if len(payload) == 0 {
		return false, false, fmt.Errorf("no frames")
	}
	ping, data := false, false
	var full error
	fresh := 0
	var f wire.Frame
	for p := 0; p < len(payload); {
		n, err := wire.ParseFrame(payload[p:], &f)
		if err != nil {
			return false, false, fmt.Errorf("frame at %d: %w", p, err)
		}
		p += n
		if f.AckEliciting() {
			eliciting = true
		}
		switch f.Type {
		case wire.FramePing:
			ping = true
		case wire.FrameAck:
			if f.Ack.Largest >= a.sent.NextPN() {
				return false, false, fmt.Errorf("ACK of packet %d never sent (next %d)", f.Ack.Largest, a.sent.NextPN())
			}
		case wire.FrameStream, wire.FrameResetStream, wire.FrameMaxStreamData:
			if err := a.streams.CheckID(f.StreamID); err != nil {
				return false, false, err
			}
			data = data || f.Type == wire.FrameStream
			if f.Type == wire.FrameStream && full == nil {
				full = a.streams.NewRange(&f, &fresh)
			}
		}
	}
	return eliciting, ping && data, full
}

// apply acts on one frame of packet pn.
func (a *Association) apply(f *wire.Frame, pn uint64) error {
	switch f.Type {
	case wire.FramePadding, wire.FramePing:
	case wire.FrameAck:
		// Timed from the packet's arrival: a host that held it (a
		// loaded machine's scheduling, a batch of packets handled at
		// once) would otherwise add the hold to every RTT sample, and
		// the delay signal would read it as a queue.
		if a.sent.OnAckOn(a.rxAt, &f.Ack, a.rxPath) {
			a.outage.onNewlyAcked(a.now)
		}
		a.onPathAck(&f.Ack)
	case wire.FrameStream:
		if err := a.streams.OnStreamFrame(f, a.now, a.sent.RTT().Smoothed()); err != nil {
			return a.protocolError("%v", err)
		}
		if f.HasMeta && !a.streams.IsLocal(f.StreamID) {
			// A peer's stream opens (or its opening is repaired).
			a.quietForAnswer()
		}
	case wire.FrameResetStream:
		if err := a.streams.OnResetStream(f, a.now, a.sent.RTT().Smoothed()); err != nil {
			return a.protocolError("%v", err)
		}
	case wire.FrameMaxData:
		if f.Max > a.streams.Flow.PeerMax {
			a.streams.Flow.PeerMax = f.Max
		}
	case wire.FrameMaxStreamData:
		if s := a.streams.StreamFor(f.StreamID, a.now); s != nil {
			a.streams.OnMaxStreamData(s, f.Max, pn)
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
	case wire.FrameParity:
		a.onParityFrame(f)
	case wire.FramePathRole:
		a.onPathRole(f.Backup)
	}
	return nil
}
