package scps

// This file owns Session: the goroutine-safe driver of one Association. One
// goroutine ("scps session") runs the timers and collects outgoing packets
// into batches for Transmit; Input runs Receive on the caller's goroutine;
// Streams block in Read and Write on channels the session signals when the
// core reports a change. The association is guarded by one mutex that is
// never held while calling out (Transmit, OnDatagram, OnState).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"scpsvpn/scps/cc"
	"scpsvpn/scps/internal/ackhandler"
)

// maxBatch is how many packets one Transmit call carries at most.
const maxBatch = 64

// Packet is one association packet on its way out: its number and its
// bytes. The layer below carries the number beside the bytes and hands
// both to the peer's Input.
type Packet struct {
	Number uint64
	Data   []byte
	// Path is the path it goes on (Association.SendOn): always 0 unless
	// the layer below set other paths (SetPath).
	Path int
}

// SessionConfig configures a Session.
type SessionConfig struct {
	Config
	// Transmit is called from the session goroutine with a batch of
	// packets, in packet number order; the buffers are valid only during
	// the call.
	Transmit func(pkts []Packet)
	// OnDatagram is called for each received datagram, on the goroutine
	// that called Input; p is valid only during the call. It must not
	// block. It may call into the Session.
	OnDatagram func(p []byte)
	// OnState, if set, is called when the association enters (true) or
	// leaves (false) outage mode, so the owner can log "association
	// down/up". Calls come in order, never concurrently, from the session
	// goroutine or the caller of Input; it must not block for long. It may
	// call into the Session.
	OnState func(outage bool)
	// Paths, if set, are the association's paths from the start, path i
	// as Paths[i] (Association.SetPath); none: the one path 0.
	Paths []PathOptions
	// Logger may be nil.
	Logger *slog.Logger
	// Now is the clock [time.Now]; tests inject a virtual one. The
	// session's timer still sleeps in real time, for the span the clock
	// says is left.
	Now func() time.Time
}

// Session drives one Association for concurrent users.
type Session struct {
	cfg SessionConfig
	log *slog.Logger

	mu         sync.Mutex
	a          *Association
	streams    map[uint64]*Stream
	acceptQ    []*Stream
	sleepUntil time.Time // when the loop's timer fires; zero = asleep without timer
	sleeping   bool
	closing    bool
	lateWakes  uint64        // Stats.LateWakes
	lateTime   time.Duration // Stats.LateWakeTime

	wake     chan struct{}
	acceptCh chan struct{}
	sent     chan struct{} // signalled after packets left (DatagramSent)
	done     chan struct{}

	inputMu sync.Mutex
	dgrams  [][]byte // datagrams of the packet being received (alias the packet)

	stateQ  []bool     // outage state changes not yet handed to OnState (guarded by mu)
	stateMu sync.Mutex // serializes OnState calls

	bufs  [][]byte
	batch []Packet
}

// NewSession validates cfg, builds the association and starts the session
// goroutine.
func NewSession(cfg SessionConfig) (*Session, error) {
	if cfg.Transmit == nil {
		return nil, errors.New("scps: SessionConfig.Transmit is nil")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	a, err := NewAssociation(cfg.Config, cfg.Now())
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Session{
		cfg:      cfg,
		log:      log,
		a:        a,
		streams:  make(map[uint64]*Stream),
		wake:     make(chan struct{}, 1),
		sent:     make(chan struct{}, 1),
		acceptCh: make(chan struct{}, 1),
		done:     make(chan struct{}),
		bufs:     make([][]byte, maxBatch),
		batch:    make([]Packet, 0, maxBatch),
	}
	size := a.Config().MaxPacketSize
	for i := range s.bufs {
		s.bufs[i] = make([]byte, size)
	}
	a.SetDatagramHandler(func(p []byte) { s.dgrams = append(s.dgrams, p) })
	a.SetPathLogger(func(i int, name, what string) { s.log.Info(what, "path", name, "path_index", i) })
	a.SetTrainLogger(func(sent int) {
		if sent == 0 {
			s.log.Info("path train dropped: data went first")
			return
		}
		s.log.Info("path train sent", "bytes", sent)
	})
	for i, p := range cfg.Paths {
		if err := a.SetPath(i, p); err != nil {
			return nil, err
		}
	}
	go s.run()
	return s, nil
}

// run is the session goroutine.
func (s *Session) run() {
	s.log.Debug("scps session started")
	defer func() {
		s.log.Debug("scps session stopped", "err", s.a.Err())
		close(s.done)
	}()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		s.mu.Lock()
		now := s.cfg.Now()
		if dl := s.a.Deadline(); !dl.IsZero() && !now.Before(dl) {
			s.a.Tick(now)
		}
		batch := s.batch[:0]
		for len(batch) < maxBatch {
			buf := s.bufs[len(batch)]
			n, pn, path := s.a.SendOn(now, buf)
			if n == 0 {
				break
			}
			batch = append(batch, Packet{Number: pn, Data: buf[:n], Path: path})
		}
		s.dispatchLocked()
		finished := s.a.Done()
		dl := s.a.Deadline()
		if len(batch) < maxBatch && !finished {
			s.sleeping, s.sleepUntil = true, dl
		}
		s.mu.Unlock()

		if len(batch) > 0 {
			s.cfg.Transmit(batch)
			clear(batch) // drop references to the buffers
			signal(s.sent)
		}
		s.deliverStates()
		if finished {
			return
		}
		if len(batch) == maxBatch {
			continue // more may be due right away
		}
		if !dl.IsZero() {
			timer.Reset(dl.Sub(s.cfg.Now()))
		}
		var late time.Duration
		select {
		case <-s.wake:
		case <-timer.C:
			late = lateBeyondBurst(dl, s.cfg.Now())
		}
		timer.Stop()
		s.mu.Lock()
		s.sleeping = false
		if late > 0 {
			s.lateWakes++
			s.lateTime += late
		}
		s.mu.Unlock()
	}
}

// lateBeyondBurst is how much later than planned (at dl) a timer wake-up
// at woke came, beyond the pacer's burst (Stats.LateWakeTime); 0 when it
// was on time or within the burst.
func lateBeyondBurst(dl, woke time.Time) time.Duration {
	return max(woke.Sub(dl)-ackhandler.PacerBurstTime, 0)
}

// kickLocked wakes the session goroutine if the association now has
// something to do earlier than the goroutine planned to wake up.
func (s *Session) kickLocked() {
	if !s.sleeping {
		return // it will look again before sleeping
	}
	s.kickAtLocked(s.cfg.Now())
}

// kickAtLocked is kickLocked with the time already read.
func (s *Session) kickAtLocked(now time.Time) {
	if !s.sleeping {
		return
	}
	s.a.setNow(now)
	if !s.a.sendReady() {
		dl := s.a.Deadline()
		if dl.IsZero() || (!s.sleepUntil.IsZero() && !dl.Before(s.sleepUntil)) {
			return
		}
	}
	s.sleeping = false
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// dispatchLocked hands the association's events to streams and the accept
// queue.
func (s *Session) dispatchLocked() {
	for {
		ev, ok := s.a.PollEvent()
		if !ok {
			return
		}
		switch ev.Kind {
		case EventAccept:
			st := newSessionStream(s, ev.StreamID, append([]byte(nil), s.a.StreamMeta(ev.StreamID)...))
			s.streams[ev.StreamID] = st
			s.acceptQ = append(s.acceptQ, st)
			signal(s.acceptCh)
		case EventStream:
			if st, ok := s.streams[ev.StreamID]; ok {
				st.signal()
			}
		case EventStreamClosed:
			if st, ok := s.streams[ev.StreamID]; ok {
				st.goneLocked(ev.Err)
				delete(s.streams, ev.StreamID)
			}
		case EventClosed:
			s.log.Debug("scps association closed", "err", ev.Err)
			signal(s.acceptCh)
		case EventOutage:
			s.log.Debug("scps link state", "outage", ev.Outage)
			s.stateQ = append(s.stateQ, ev.Outage)
			// The session goroutine hands it on if nobody else does.
			s.sleeping = false
			signal(s.wake)
		}
	}
}

// deliverStates hands queued outage state changes to OnState, in order,
// without holding the session lock.
func (s *Session) deliverStates() {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	for {
		s.mu.Lock()
		if len(s.stateQ) == 0 {
			s.mu.Unlock()
			return
		}
		outage := s.stateQ[0]
		s.stateQ = s.stateQ[1:]
		s.mu.Unlock()
		if s.cfg.OnState != nil {
			s.cfg.OnState(outage)
		}
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Input hands the session packet number pn received from the peer. It may
// be called from any goroutine; pkt may be reused after it returns.
func (s *Session) Input(pn uint64, pkt []byte) { s.InputOn(0, pn, pkt) }

// InputOn is Input for a packet that arrived on path i
// (Association.ReceiveOn).
func (s *Session) InputOn(i int, pn uint64, pkt []byte) { s.InputArrived(i, pn, pkt, time.Time{}) }

// InputArrived is InputOn for a packet the host took in at arrived (a
// kernel receive timestamp; zero: unknown), which the packet's timing
// counts from (Association.ReceiveArrived).
func (s *Session) InputArrived(i int, pn uint64, pkt []byte, arrived time.Time) {
	s.inputMu.Lock()
	defer s.inputMu.Unlock()
	s.mu.Lock()
	now := s.cfg.Now()
	err := s.a.ReceiveArrived(now, arrived, i, pn, pkt)
	s.dispatchLocked()
	s.kickAtLocked(now)
	if s.a.Done() {
		s.sleeping = false
		signal(s.wake)
	}
	s.mu.Unlock()
	s.deliverStates()
	if err != nil {
		s.log.Debug("scps packet rejected", "err", err)
	}
	for i, p := range s.dgrams {
		if s.cfg.OnDatagram != nil {
			s.cfg.OnDatagram(p)
		}
		s.dgrams[i] = nil
	}
	s.dgrams = s.dgrams[:0]
}

// OpenStream opens a stream whose first frame carries meta. It never waits
// for the network.
func (s *Session) OpenStream(meta []byte) (*Stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, err := s.a.OpenStream(meta)
	if err != nil {
		return nil, fmt.Errorf("scps: open stream: %w", err)
	}
	st := newSessionStream(s, id, append([]byte(nil), meta...))
	s.streams[id] = st
	s.kickLocked()
	return st, nil
}

// AcceptStream waits for a stream opened by the peer.
func (s *Session) AcceptStream(ctx context.Context) (*Stream, error) {
	for {
		s.mu.Lock()
		if len(s.acceptQ) > 0 {
			st := s.acceptQ[0]
			s.acceptQ[0] = nil
			s.acceptQ = s.acceptQ[1:]
			if len(s.acceptQ) > 0 {
				signal(s.acceptCh)
			}
			s.mu.Unlock()
			return st, nil
		}
		if s.a.Closed() {
			err := s.a.Err()
			s.mu.Unlock()
			return nil, err
		}
		s.mu.Unlock()
		select {
		case <-s.acceptCh:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.done:
		}
	}
}

// SendDatagram queues p for unreliable delivery; it never blocks. Over
// budget it drops p, counts it and returns ErrDatagramDropped.
func (s *Session) SendDatagram(p []byte) error { return s.SendDatagramApart(p, 0) }

// SendDatagramApart is SendDatagram for a datagram of a group no packet
// carries two of (Association.SendDatagramApart).
func (s *Session) SendDatagramApart(p []byte, group uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	// The association's clock only moves when it is driven; a datagram
	// queued after an idle spell must be stamped with the time now, or it
	// looks too old to send.
	s.a.setNow(s.cfg.Now())
	err := s.a.SendDatagramApart(p, group)
	if err == nil {
		s.kickLocked()
	}
	return err
}

// Config is the association's configuration, with its memory budget as
// SetMemory last set it.
func (s *Session) Config() Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.a.Config()
}

// SetMemory changes the association's memory budget (Association.SetMemory).
func (s *Session) SetMemory(limit uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.a.SetMemory(limit); err != nil {
		return err
	}
	s.dispatchLocked()
	s.kickLocked()
	return nil
}

// ProbePath sends a path train after the wait if one is due then
// (Association.ProbePath).
func (s *Session) ProbePath(after time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.a.ProbePath(s.cfg.Now(), after) {
		return false
	}
	s.kickLocked()
	return true
}

// DatagramRoom reports whether a datagram of n bytes fits in the first
// quarter of the datagram queue (Association.DatagramRoom).
func (s *Session) DatagramRoom(n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.a.DatagramRoom(n)
}

// DatagramSent is signalled (at most one waiter, no backlog) after the
// session sent packets, which may have taken datagrams off the queue: a
// sender waiting for DatagramRoom waits on it rather than polling.
func (s *Session) DatagramSent() <-chan struct{} { return s.sent }

// MaxDatagramSize is the largest payload SendDatagram accepts.
func (s *Session) MaxDatagramSize() int { return s.a.MaxDatagramSize() }

// InOutage reports whether the association is in outage mode (the link
// is silent; streams wait, writers block once their buffers fill).
func (s *Session) InOutage() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.a.InOutage()
}

// Stats returns the association's counters.
func (s *Session) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.a.Stats()
	st.LateWakes, st.LateWakeTime = s.lateWakes, s.lateTime
	return st
}

// SetPath is Association.SetPath.
func (s *Session) SetPath(i int, opts PathOptions) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.a.SetPath(i, opts)
	s.kickLocked()
	return err
}

// RemovePath is Association.RemovePath.
func (s *Session) RemovePath(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.a.RemovePath(i)
}

// Paths is Association.Paths.
func (s *Session) Paths() []PathStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.a.Paths()
}

// PathState is Association.PathState, stamped now.
func (s *Session) PathState() (cc.PathState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.a.PathState(time.Now())
}

// PathStateOf is Association.PathStateOf, stamped now.
func (s *Session) PathStateOf(i int) (cc.PathState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.a.PathStateOf(i, time.Now())
}

// Err is why the session ended (nil while it runs).
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.a.Err()
}

// Close resets every stream (the peer's streams fail with a ResetError),
// sends CLOSE, stops the session goroutine and unblocks every waiter. It
// returns once the goroutine has stopped.
func (s *Session) Close() error {
	s.mu.Lock()
	if !s.closing {
		s.closing = true
		s.a.Close(CodeNoError, "session closed")
		s.dispatchLocked()
	}
	s.sleeping = false
	signal(s.wake)
	s.mu.Unlock()
	<-s.done
	return nil
}

// Done is closed when the session has ended (closed locally, by the peer,
// by idle timeout or protocol error).
func (s *Session) Done() <-chan struct{} { return s.done }
