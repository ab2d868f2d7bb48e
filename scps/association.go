package scps

// This file owns the Association type: its state, construction, the
// time-driven entry points (Deadline, Tick), association close and Stats.
// doc.go maps the other files.

import (
	"fmt"
	"time"

	"scpsvpn/scps/internal/ackhandler"
	"scpsvpn/scps/internal/streams"
	"scpsvpn/scps/internal/wire"
	"scpsvpn/scps/varint"

	"scpsvpn/scps/cc"
)

type assocState uint8

const (
	stateOpen assocState = iota
	stateClosing
	stateClosed
)

// closeSends is how many packets carry our CLOSE: more than one, since the
// peer cannot ask for it again and a lost CLOSE leaves its streams hanging
// until its idle timeout.
const closeSends = 2

// Association is the sans-IO core of one SCPS association. It is not safe
// for concurrent use.
type Association struct {
	cfg       Config
	epoch     time.Time     // internal time is the duration since epoch
	now       time.Duration // latest time seen; never goes back
	state     assocState
	err       error
	closeCode uint64
	closeWhy  string
	closeLeft int

	// Sender side of reliability, congestion control and pacing.
	sent        ackhandler.SentPacketHandler
	ackBudget   ackhandler.AckBudget
	pingPending bool
	// Tail copies (internal/ackhandler/tailcopy.go): the frames of the
	// packet being copied, and a switch for tests that compare.
	copyFrames []ackhandler.SentFrame
	// copyNow: the packet being built is a light packet's copy, its
	// frames in copyFrames (latency.go, sendLightCopy).
	copyNow      bool
	noTailCopies bool
	// Tail parity (parity.go): the blocks sent, and the payloads
	// received with the peer's parities being assembled.
	parityOut paritySender
	parityIn  parityReceiver
	idleSince time.Duration // when Send last found nothing to send after having had some; 0 = busy
	// holdSince: when a timed first flight began to wait for the rest
	// of its data (flightHold); holding says it has.
	holdSince time.Duration
	holding   bool
	// trainLeft is how many bytes of the path train are still to go
	// (ProbePath), trainSent how many went.
	trainLeft, trainSent int
	trainAt              time.Duration  // when it may go
	trainLog             func(sent int) // told how a train ended
	// trainRecvd: a peer's path train arrived; the receive windows
	// follow its rate once its ACK goes (trainWindows).
	trainRecvd bool

	outage outageDetector

	paths    pathSet  // the links to the peer (paths.go)
	lastSent sentKind // what Send's last packet was
	pathLog  func(i int, name, what string)

	// Receiver side.
	ack      ackhandler.ReceivedPacketHandler
	ackDelay time.Duration
	// arrival times the peer's packet trains: the link's rate, which
	// sizes the receive windows as a configured rate would (rateWindow).
	arrival cc.ArrivalRate
	// rxArrived is when the host took in the packet being received, if
	// the layer below knows (ReceiveArrived); rxAt is that time as the
	// packet's timing uses it (arrivedAt), lastRxAt the previous one's.
	rxArrived      time.Time
	rxAt, lastRxAt time.Duration
	// rxPath is the path the packet being received came on (ReceiveOn).
	rxPath int

	streams streams.Manager // the streams, their flow control and the memory budget

	dgrams      datagramQueue
	share       shareBalance // datagrams' and streams' shares of the link (datagramshare.go)
	onDatagram  func([]byte)
	maxDatagram int

	events []Event
	evHead int

	stats Stats
}

// NewAssociation builds an association; zero Config fields take their
// defaults.
func NewAssociation(cfg Config, now time.Time) (*Association, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	a := &Association{
		cfg: cfg,
		// Internal time starts at one second so that zero can mean "no
		// timer".
		epoch: now.Add(-time.Second),
		now:   time.Second,
	}
	// A datagram must fit whatever packet number carries it.
	a.maxDatagram = a.packetRoom(varint.Max) - wire.DatagramLen(0) - 1
	a.outage.init(cfg, a.now, &a.stats)
	a.paths.init(cfg, a.now)
	a.streams.Mem.Limit = cfg.streamMemory()
	a.sizeParity()
	a.streams.Flow.Init(InitialConnCredit, cfg.initialConnWindow(), a.now)
	a.streams.Init(cfg.EvenStreams, cfg.streamLimit(), InitialMaxStreams)
	a.streams.Limits = streams.Limits{
		StreamWindow:        cfg.streamWindowLimit(),
		ConnWindow:          cfg.connWindowLimit(),
		InitialStreamWindow: cfg.initialStreamWindow(),
		InitialSendBuffer:   cfg.initialSendBuffer(),
		SendBuffer:          cfg.sendBufferLimit(),
		MaxPending:          cfg.MaxStreams,
	}
	a.streams.UnsentLimit = a.streams.Limits.InitialSendBuffer
	a.streams.Events = assocEvents{a}
	a.streams.Frames = &a.sent
	hc := a.ackhandlerConfig()
	if err := a.sent.Init(hc, a.epoch, a.now, assocFrames{a}); err != nil {
		return nil, fmt.Errorf("scps: %w", err)
	}
	a.stats.Congestion = a.sent.Controller().Name()
	a.stats.Loss = cfg.Loss
	a.ackBudget.Init(hc, a.now, a.ackPacketCost())
	a.ackDelay = MaxAckDelay
	a.streams.MaybeMaxStreams()
	return a, nil
}

// ackhandlerConfig is what the ACK and loss handling takes from the
// configuration.
func (a *Association) ackhandlerConfig() ackhandler.Config {
	cfg := a.cfg
	loss := ackhandler.LossAuto
	switch cfg.Loss {
	case LossCongestion:
		loss = ackhandler.LossCongestion
	case LossCorruption:
		loss = ackhandler.LossCorruption
	}
	var resume *cc.Resume
	if cfg.Resume.Saved.Rate > 0 {
		resume = &cfg.Resume
	}
	return ackhandler.Config{
		MaxPacketSize: cfg.MaxPacketSize,
		WireOverhead:  cfg.WireOverhead,
		SendRate:      cfg.SendRate,
		RecvRate:      cfg.RecvRate,
		InitialRTT:    cfg.InitialRTT,
		MinRTO:        cfg.MinRTO,
		ProbeInterval: cfg.ProbeInterval,
		MaxAckDelay:   MaxAckDelay,
		Congestion:    cfg.Congestion,
		Loss:          loss,
		RTTNoise:      a.rttNoise(),
		Resume:        resume,
	}
}

// rttNoise is the RTT variation our own ACKs cause on the return link:
// three ACK packets' serialization at RecvRate (two ACKs back to back, and
// one carrying credit frames), at least minRTTNoise. Delay-based decisions
// (congestion control, loss cause) ignore that much queueing delay.
func (a *Association) rttNoise() time.Duration {
	d := minRTTNoise
	if r := a.cfg.RecvRate; r > 0 {
		ack := time.Duration(float64(8*a.ackPacketCost()) / float64(r) * float64(time.Second))
		d = max(d, 3*ack)
	}
	return d
}

// minRTTNoise is the RTT variation assumed of any path (timers,
// scheduling).
const minRTTNoise = time.Millisecond

// packetRoom is the most bytes packet pn may hold (Config.HeaderGrowth).
func (a *Association) packetRoom(pn uint64) int {
	if a.cfg.HeaderGrowth == nil {
		return a.cfg.MaxPacketSize
	}
	return a.cfg.MaxPacketSize - a.cfg.HeaderGrowth(pn)
}

// Config returns the configuration in use (defaults filled in).
func (a *Association) Config() Config { return a.cfg }

// MaxDatagramSize is the largest payload SendDatagram accepts.
func (a *Association) MaxDatagramSize() int { return a.maxDatagram }

// SetDatagramHandler sets the function Receive calls for each received
// datagram; p aliases the packet and is valid only during the call.
func (a *Association) SetDatagramHandler(h func(p []byte)) { a.onDatagram = h }

// Err is why the association closed, nil while it is open.
func (a *Association) Err() error { return a.err }

// Closed reports whether the association has closed (it may still have a
// CLOSE to send).
func (a *Association) Closed() bool { return a.state != stateOpen }

// Done reports whether the association is closed and has nothing more to
// send.
func (a *Association) Done() bool { return a.state == stateClosed }

// maxHold bounds how long before now a packet may have arrived
// (ReceiveArrived): a timestamp further back is not believed.
const maxHold = time.Second

// arrivedAt is when the packet being received arrived: the host's
// timestamp when there is one (ReceiveArrived), within maxHold before
// now and no earlier than the packet before it, else now.
func (a *Association) arrivedAt() time.Duration {
	at := a.now
	if !a.rxArrived.IsZero() {
		at = min(max(a.rxArrived.Sub(a.epoch), a.now-maxHold, a.lastRxAt), a.now)
	}
	a.lastRxAt = at
	return at
}

// setNow moves the association's clock to t. Time its driver let pass
// beyond when the queued datagrams could have gone (a host that did not
// run the association: a loaded machine, a paused process) does not age
// them (datagramQueue.postpone): their age is the time the association
// itself had to send them.
func (a *Association) setNow(t time.Time) {
	d := t.Sub(a.epoch)
	if d <= a.now {
		return
	}
	if due, ok := a.datagramsDueAt(); ok && d > max(due, a.now) {
		a.dgrams.postpone(d - max(due, a.now))
	}
	a.now = d
}

func (a *Association) abs(d time.Duration) time.Time { return a.epoch.Add(d) }

// Deadline is the earliest time Tick or Send has something to do; zero
// means no timer is armed (wait for input).
func (a *Association) Deadline() time.Time {
	switch a.state {
	case stateClosed:
		return time.Time{}
	case stateClosing:
		return a.abs(a.now)
	}
	var d time.Duration
	consider := func(t time.Duration) {
		if t != 0 && (d == 0 || t < d) {
			d = t
		}
	}
	if a.cfg.IdleTimeout > 0 {
		consider(a.outage.lastRecv + a.cfg.IdleTimeout)
	}
	if a.outage.active {
		// Only probes and the end of patience.
		consider(a.outage.nextProbe)
		consider(a.outage.start + a.cfg.MaxOutage)
		return a.abs(d)
	}
	consider(a.outage.deadline(a.sent.ElicitingInFlight()))
	consider(a.pathDeadline())
	consider(a.lightDeadline())
	consider(a.outage.keepAliveDue(a.sent.ElicitingInFlight(), a.pingPending))
	consider(a.sent.TimerDeadline())
	if at, _ := a.trainDue(); at > a.now {
		consider(at)
	}
	if a.paths.multi() {
		a.sendPath(false)
	}
	if a.sent.Probes() > 0 || a.pingPending {
		consider(a.now)
	}
	if t, ok := a.ack.Deadline(a.now); ok {
		a.ackBudget.Refill(a.now)
		consider(max(t, a.ackBudget.ReadyAt(a.now, a.ackPacketCost())))
	}
	if a.quietHold() {
		consider(a.paths.quietUntil)
	} else if a.sent.WindowOpen() || a.lightPastWindow() {
		if until, held := a.flightHold(); held {
			consider(until)
		} else if a.hasWork() {
			consider(a.sent.PacedWake(a.now))
		} else if at, ok := a.copyAt(); ok && !a.silenceHold() {
			consider(max(at, a.sent.PacedAt(a.now)))
		}
	}
	if d == 0 {
		return time.Time{}
	}
	return a.abs(d)
}

// Tick runs the timers that expired by now: idle timeout, outage entry
// and maximum outage, loss detection by time, probe timeout, keep-alive.
func (a *Association) Tick(now time.Time) {
	a.setNow(now)
	if a.state != stateOpen {
		return
	}
	if a.cfg.IdleTimeout > 0 && a.now-a.outage.lastRecv >= a.cfg.IdleTimeout {
		a.closeWith(ErrIdleTimeout, CodeIdleTimeout, "idle timeout", ErrIdleTimeout)
		return
	}
	if a.paths.multi() {
		a.checkPaths()
		a.resendLight()
	}
	a.checkOutage()
	if a.outage.active {
		if a.outage.expired(a.now) {
			a.closeWith(ErrOutage, CodeOutage, "link outage", ErrOutage)
		}
		return
	}
	a.sent.OnTimer(a.now, a.streams.DataQueued())
	if a.outage.keepAliveTimer(a.now, a.sent.ElicitingInFlight(), a.pingPending) {
		a.pingPending = true
	}
}

// Close closes the association: every stream is reset locally, a CLOSE
// with code goes to the peer (its streams fail with a ResetError carrying
// code), and nothing else is sent.
func (a *Association) Close(code uint64, reason string) {
	if a.state != stateOpen {
		return
	}
	a.closeWith(ErrClosed, code, reason, ErrClosed)
}

// closeWith ends the association: streams fail with streamErr, the
// association with err, and a CLOSE with code is queued.
func (a *Association) closeWith(err error, code uint64, reason string, streamErr error) {
	a.state = stateClosing
	a.closeLeft = closeSends
	a.err, a.closeCode, a.closeWhy = err, code, reason
	a.shutdownStreams(streamErr)
	a.emit(Event{Kind: EventClosed, Err: err})
}

// closeByPeer handles the peer's CLOSE: no answer is sent.
func (a *Association) closeByPeer(code uint64, reason string) {
	err := &PeerClosedError{Code: code, Reason: reason}
	a.state = stateClosed
	a.err = err
	a.shutdownStreams(&ResetError{Code: code})
	a.emit(Event{Kind: EventClosed, Err: err})
}

// shutdownStreams ends every stream with streamErr and drops the queued
// datagrams (the association ended).
func (a *Association) shutdownStreams(streamErr error) {
	for _, id := range a.streams.Shutdown() {
		a.emit(Event{Kind: EventStreamClosed, StreamID: id, Err: streamErr})
	}
	for a.dgrams.count > 0 {
		a.dgrams.pop()
	}
}

// protocolError closes the association because the peer broke the rules.
func (a *Association) protocolError(format string, args ...any) error {
	err := fmt.Errorf("%w: %s", ErrProtocol, fmt.Sprintf(format, args...))
	a.stats.ProtocolErrors++
	a.closeWith(err, CodeProtocolViolation, "protocol violation", err)
	return err
}

// Stats returns counters and the current congestion state.
func (a *Association) Stats() Stats {
	s := a.stats
	s.StreamsOpen = len(a.streams.ByID)
	s.BufferedBytes = a.streams.Buffered()
	s.addSent(&a.sent)
	s.Retransmits += a.streams.Sent.Retransmits
	s.RetransmitBytes += a.streams.Sent.RetransmitBytes
	s.StreamBytesSent += a.streams.Sent.BytesSent
	s.TailCopyBytes += a.streams.Sent.CopyBytes
	s.Outage = a.outage.active
	if a.outage.active {
		s.OutageTime += a.now - a.outage.start
	}
	return s
}

// PathState is what the association learned of its path, stamped at (for
// careful resume: Config.Resume of a later association to the same peer);
// ok is false while it has measured no delivery rate or its controller
// does not report one.
func (a *Association) PathState(at time.Time) (p cc.PathState, ok bool) {
	if p, ok = a.controllerState(0, at); ok {
		if st := a.Stats(); st.PacketsSent > 0 {
			p.Loss = min(float64(st.PacketsLost)/float64(st.PacketsSent), 1)
		}
	}
	return p, ok
}

// PathStateOf is PathState of path i alone (1 <= i < MaxPaths, set by
// SetPath): its controller's delivery rate, its minimum RTT and its loss
// (PathStats.Loss), for careful resume per path (PathOptions.Resume).
func (a *Association) PathStateOf(i int, at time.Time) (p cc.PathState, ok bool) {
	if i <= 0 || i >= MaxPaths || !a.paths.p[i].inUse {
		return cc.PathState{}, false
	}
	if p, ok = a.controllerState(i, at); ok {
		if st := a.paths.p[i].stats; st.Checked > 0 {
			p.Loss = float64(st.Lost) / float64(st.Checked)
		}
	}
	return p, ok
}

// controllerState is path i's controller's part of PathState.
func (a *Association) controllerState(i int, at time.Time) (cc.PathState, bool) {
	r, isResumer := a.sent.PathController(i).(cc.Resumer)
	rtt := a.sent.PathRTT(i)
	if !isResumer || r.PathRate() <= 0 || rtt.Min() <= 0 {
		return cc.PathState{}, false
	}
	return cc.PathState{Rate: r.PathRate(), MinRTT: rtt.Min(), At: at, Retreated: r.ResumePhase() == cc.ResumeRetreated}, true
}

// InOutage reports whether the association is in outage mode.
func (a *Association) InOutage() bool { return a.outage.active }
