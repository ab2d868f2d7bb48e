package scps

// This file owns the path train: told no rate, an association that comes
// up with nothing to send times its path before the first transfer needs
// it. Its first flight, which the controller times from the ACKs
// (cc.FlightTimer, hybrid's capacity estimate), goes out at once as a
// burst of full-size packets of one PING and padding, so the rate is known
// about a round trip after the association came up rather than a round
// trip after the first transfer's first byte (docs/startup.md, "A train
// when the association comes up").

import (
	"time"

	"scpsvpn/scps/internal/ackhandler"
	"scpsvpn/scps/internal/wire"
)

// PathTrainWait is how long the tunnel's path train waits after the
// association came up (ProbePath): a side's own first flows, opened as
// it came up, go first and cancel it. The bench opens its download 0-50
// ms after both endpoints report the association up (it polls their
// logs), and a train ahead of the request on a 64 kbit/s uplink held it
// 250-330 ms (GEO 50/0.5: 330 ms).
const PathTrainWait = 100 * time.Millisecond

// PathTrainAfter is how long a side waits after its association came up
// before it asks for its path train (ProbePath): PathTrainWait after the
// later of the two sides came up, whichever side it is. The handshake's
// responder comes up a one way after the initiator (on the initiator's
// first packet on the session), so the initiator waits that one way
// longer, half its handshake's round trip: both trains fall due at the
// same moment, after the requests either side makes as the association
// comes up (which cancel the train of the side that makes them). Where
// the initiator will answer (its peer asks), its train times the path
// its answer takes; an initiator that trained at once went a one way
// ahead of a responder's request on a thin uplink (docs/startup.md).
func PathTrainAfter(responder bool, handshakeRTT time.Duration) time.Duration {
	if responder {
		return PathTrainWait
	}
	return handshakeRTT/2 + PathTrainWait
}

// ProbePath asks for a path train after the given wait: the timed first
// flight of the controller, sent as padding. It reports whether one is
// due; it is not when the controller times no first flight (told a rate,
// resuming a saved path, a flight already sent), with several paths, or
// when stream data has been sent or waits (that data's first flight times
// the link itself). Stream data or datagrams that come before the train
// went take its place: the train is dropped. The wait lets a side's own
// first flows go first: a train ahead of them on a thin link (64 kbit/s)
// would hold them for seconds.
func (a *Association) ProbePath(now time.Time, after time.Duration) bool {
	a.setNow(now)
	if a.state != stateOpen || a.outage.active || a.paths.multi() || a.dataSent() {
		return false
	}
	flight, ok := a.sent.FirstFlight(a.now)
	if !ok || flight <= 0 {
		return false
	}
	a.trainLeft, a.trainAt = flight, a.now+max(after, 0)
	return true
}

// sendTrain builds the path train's next packet into buf, if one is due:
// a PING and padding up to the packet's room, counted in flight as any
// ack-eliciting packet and timed by the controller as its first flight.
// The train's last packet tells the controller the flight went without
// data (ackhandler's TrainSent), so data that comes before the train's
// ACKs is not held behind it.
func (a *Association) sendTrain(buf []byte, pn uint64) (int, bool) {
	if a.trainLeft <= 0 {
		return 0, false
	}
	if a.dataSent() {
		a.endTrain()
		return 0, false
	}
	if a.now < a.trainAt || a.hasWork() {
		// Control frames (the first MAX_STREAMS) go first.
		return 0, false
	}
	a.sent.UpdatePacer(a.now)
	if !a.sent.WindowOpen() || !a.sent.Paced() {
		return 0, false
	}
	limit := a.limit(buf, pn)
	if limit < a.cfg.MaxPacketSize/2 {
		return 0, false
	}
	firstFrame := a.sent.FrameEnd()
	b := append(buf[:0:limit], wire.FramePing)
	a.sent.AddFrame().Kind = ackhandler.KindPing
	for len(b) < limit {
		b = append(b, wire.FramePadding)
	}
	a.onSent(builtPacket{firstFrame: firstFrame, size: len(b), eliciting: true})
	a.stats.TrainPacketsSent++
	a.stats.TrainBytesSent += uint64(len(b))
	a.trainSent += len(b)
	if a.trainLeft -= len(b); a.trainLeft <= 0 {
		a.endTrain()
	}
	return len(b), true
}

// endTrain ends the path train, sent or cut short by data.
func (a *Association) endTrain() {
	a.trainLeft, a.trainAt = 0, 0
	if a.trainLog != nil {
		a.trainLog(a.trainSent)
	}
	if a.trainSent > 0 {
		a.sent.TrainSent(a.now, a.trainSent)
		a.trainSent = 0
	}
}

// SetTrainLogger sets the function told how each path train ended: the
// bytes of it that went (0: data came first and took its place). It is
// called with the association's lock held.
func (a *Association) SetTrainLogger(f func(sent int)) { a.trainLog = f }

// trainDue reports whether the path train may go now, and when it may
// (0: none is due).
func (a *Association) trainDue() (at time.Duration, now bool) {
	if a.trainLeft <= 0 {
		return 0, false
	}
	return a.trainAt, a.now >= a.trainAt
}

// trainWindows sizes the receive windows from the rate a peer's path
// train arrived at, once the train's ACKs are no longer held: the window
// updates then ride in the packet of the held ACK (control frames follow
// the ACK), not in packets of their own that would split the train's
// timing (streams.rateWindowStep). Without it a stream opened before the
// train (the download's request) kept its initial window until its first
// data was read, and the sender, paced at the train's estimate, held at
// 1 MiB in flight for a round trip.
func (a *Association) trainWindows() {
	if !a.trainRecvd || a.ack.Holding(a.now) {
		return
	}
	a.trainRecvd = false
	a.streams.RateWindowHeld = false
	a.streams.RateWindowGrown(a.now, a.sent.RTT().Smoothed())
}

// isTrainPacket reports whether pkt is a path train's packet: a PING and
// at least one PADDING frame, nothing else.
func isTrainPacket(pkt []byte) bool {
	if len(pkt) < 2 || pkt[0] != wire.FramePing {
		return false
	}
	for _, b := range pkt[1:] {
		if b != wire.FramePadding {
			return false
		}
	}
	return true
}

// dataSent reports whether stream data or datagrams have been sent or
// wait: their own first flight times the path.
func (a *Association) dataSent() bool {
	return a.stats.StreamBytesSent > 0 || a.streams.Unsent > 0 || a.dgrams.count > 0 || a.stats.DatagramsSent > 0
}
