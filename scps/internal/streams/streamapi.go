package streams

// This file owns the application's operations on a stream, by id: open,
// write, read, half-close, close, reset and its metadata: what the
// application may do in each state of the stream and the error it gets
// otherwise. The association's public entry points
// (scps.Association.StreamWrite and kin) call these, count what moved and
// turn ErrUnknownStream into the association's error once it closed.

import (
	"errors"
	"fmt"
	"time"

	"scpsvpn/scps/internal/wire"
)

// The errors of the application's operations (scps exports them).
var (
	// ErrWriteClosed: Write after CloseWrite.
	ErrWriteClosed = errors.New("scps: write after CloseWrite")
	// ErrUnknownStream: no such stream (never opened, or already gone).
	ErrUnknownStream = errors.New("scps: unknown stream")
	// ErrStreamLimit: too many streams wait for the peer's stream credit.
	ErrStreamLimit = errors.New("scps: stream limit reached")
	// ErrMetaTooLarge: stream metadata over wire.MaxMetaLen.
	ErrMetaTooLarge = errors.New("scps: stream metadata too large")
)

// ResetError is returned by reads and writes after the peer reset the
// stream (or closed the association) with Code.
type ResetError struct{ Code uint64 }

func (e *ResetError) Error() string {
	return fmt.Sprintf("scps: stream reset by peer (code %d)", e.Code)
}

// Open opens a local stream carrying meta (at most wire.MaxMetaLen bytes)
// and returns its id. It never waits: the metadata goes out with the
// stream's first frame, at once even without data; a stream beyond the
// peer's stream limit waits in Pending (at most Limits.MaxPending of
// them) until MAX_STREAMS lets it on the wire.
func (m *Manager) Open(meta []byte, now time.Duration) (uint64, error) {
	if len(meta) > wire.MaxMetaLen {
		return 0, ErrMetaTooLarge
	}
	if len(m.Pending) >= m.Limits.MaxPending {
		return 0, ErrStreamLimit
	}
	id := m.NextLocalID
	m.NextLocalID += 2
	s := m.NewStream(id, true, now)
	s.meta = append([]byte(nil), meta...)
	s.openPending = true
	if m.OnWire(s) {
		m.ScheduleNew(s)
	} else {
		m.Pending = append(m.Pending, s)
	}
	return id, nil
}

// lookup returns a stream the application may use.
func (m *Manager) lookup(id uint64) (*State, error) {
	s, ok := m.ByID[id]
	if !ok {
		return nil, ErrUnknownStream
	}
	return s, nil
}

// Meta returns the stream's open metadata (nil while a peer stream's
// metadata has not arrived). The slice must not be modified.
func (m *Manager) Meta(id uint64) []byte {
	if s, ok := m.ByID[id]; ok {
		return s.meta
	}
	return nil
}

// Write copies as much of p into the stream's send buffer as fits and
// returns how much; 0 with a nil error means the buffer is full (the
// writer waits for room: Events.Notify follows when space frees up).
func (m *Manager) Write(id uint64, p []byte) (int, error) {
	s, err := m.writable(id)
	if err != nil {
		return 0, err
	}
	return m.write(s, p), nil
}

// WriteRoom is how many bytes Write would take now, or the error it would
// return. With no room, the stream waits for it as after a short Write.
func (m *Manager) WriteRoom(id uint64) (int, error) {
	s, err := m.writable(id)
	if err != nil {
		return 0, err
	}
	space, why := m.SendSpace(s)
	if space <= 0 {
		m.AwaitRoom(s, why)
		return 0, nil
	}
	return space, nil
}

// writable returns a stream the application may write to.
func (m *Manager) writable(id uint64) (*State, error) {
	s, err := m.lookup(id)
	if err != nil {
		return nil, err
	}
	switch {
	case s.peerReset:
		return nil, &ResetError{Code: s.peerCode}
	case s.localErr != nil:
		return nil, s.localErr
	case s.finQueued:
		return nil, ErrWriteClosed
	}
	return s, nil
}

// Writable is how many bytes Write would accept now.
func (m *Manager) Writable(id uint64) int {
	s, ok := m.ByID[id]
	if !ok || s.Aborted() || s.finQueued || s.localErr != nil {
		return 0
	}
	space, _ := m.SendSpace(s)
	return max(space, 0)
}

// Read copies received in-order data into p. It returns io.EOF after the
// peer's FIN once everything was read, a *ResetError after the peer's
// reset, and 0 with a nil error when nothing is available yet (the reader
// waits: Events.Notify follows when that changes). srtt is the smoothed
// round-trip time, for the credit the read may grant.
func (m *Manager) Read(id uint64, p []byte, now, srtt time.Duration) (int, error) {
	s, err := m.lookup(id)
	if err != nil {
		return 0, err
	}
	switch {
	case s.peerReset:
		return 0, &ResetError{Code: s.peerCode}
	case s.localErr != nil && s.resetSent:
		return 0, s.localErr
	case s.readClosed:
		return 0, ErrStreamClosed
	}
	return m.read(s, p, now, srtt)
}

// Readable is how many in-order bytes Read would return now.
func (m *Manager) Readable(id uint64) int {
	s, ok := m.ByID[id]
	if !ok || s.Aborted() {
		return 0
	}
	return int(s.Contiguous() - s.readOff)
}

// CloseWrite ends our direction of the stream: the peer reads EOF after
// all data written so far.
func (m *Manager) CloseWrite(id uint64) error {
	s, err := m.lookup(id)
	if err != nil {
		return err
	}
	switch {
	case s.peerReset:
		return &ResetError{Code: s.peerCode}
	case s.resetSent:
		return s.localErr
	case s.finQueued:
		return nil
	}
	s.finQueued = true
	s.finOffset = s.writeOff
	s.unsentHeld = false // the writer is done (a tail already queued as bulk stays bulk: bulkRun)
	m.ScheduleNew(s)
	return nil
}

// Close closes the stream for the application: our direction ends with a
// FIN after the data already written; reading stops. If unread data is
// waiting (or arrives later), the stream is reset instead, like a TCP
// close with unread data.
func (m *Manager) Close(id uint64, now, srtt time.Duration) error {
	s, err := m.lookup(id)
	if err != nil {
		return err
	}
	if s.Aborted() {
		m.closeAborted(s)
		return nil
	}
	if s.localErr != nil {
		return nil
	}
	if s.Contiguous() > s.readOff || s.recvd.Len() > 0 && s.recvd.Last().End > s.readOff {
		m.reset(s, CodeStreamClosed, now, srtt)
		return nil
	}
	if !s.finQueued {
		s.finQueued = true
		s.finOffset = s.writeOff
		s.unsentHeld = false
		m.ScheduleNew(s)
	}
	s.localErr = ErrStreamClosed
	s.readClosed = true
	s.recvBuf.Free()
	m.Mem.Account(s)
	m.MaybeFinish(s)
	return nil
}

// Reset aborts the stream in both directions with code: queued data is
// dropped and the peer's reads and writes fail with a *ResetError.
func (m *Manager) Reset(id uint64, code uint64, now, srtt time.Duration) error {
	s, err := m.lookup(id)
	if err != nil {
		return err
	}
	if s.Aborted() {
		m.closeAborted(s)
		return nil
	}
	m.reset(s, code, now, srtt)
	return nil
}

// closeAborted is the application's close or reset of a stream already
// aborted: it may no longer use it, and the stream leaves once both
// resets went through.
func (m *Manager) closeAborted(s *State) {
	if s.localErr == nil {
		s.localErr = ErrStreamClosed
	}
	m.MaybeFinish(s)
}
