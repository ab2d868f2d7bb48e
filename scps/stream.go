package scps

// This file owns Stream, the blocking, net.Conn-like view of one stream of
// a Session (the core's state of a stream is streams.State).

import (
	"errors"
	"io"
	"net"
	"strconv"
	"time"
)

// Stream is one reliable, ordered byte stream of a Session. It implements
// net.Conn; all methods are safe for concurrent use.
type Stream struct {
	s       *Session
	id      uint64
	meta    []byte
	readCh  chan struct{}
	writeCh chan struct{}
	goneCh  chan struct{} // closed when gone is set
	rdl     deadline
	wdl     deadline

	// Guarded by s.mu.
	gone        bool  // left the association's table
	goneErr     error // why: nil = finished normally
	localClosed bool  // Close or Reset was called
}

func newSessionStream(s *Session, id uint64, meta []byte) *Stream {
	return &Stream{
		s:       s,
		id:      id,
		meta:    meta,
		readCh:  make(chan struct{}, 1),
		writeCh: make(chan struct{}, 1),
		goneCh:  make(chan struct{}),
		rdl:     newDeadline(),
		wdl:     newDeadline(),
	}
}

func (st *Stream) signal() {
	signal(st.readCh)
	signal(st.writeCh)
}

// settle marks the stream gone after the session ended, in case no event
// did.
func (st *Stream) settle() {
	s := st.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dispatchLocked()
	if !st.gone {
		err := s.a.Err()
		if err == nil {
			err = ErrClosed
		}
		st.goneLocked(err)
	}
}

// goneLocked marks the stream gone (left the association's table) for
// err (nil: it finished normally) and wakes whoever waits on it.
func (st *Stream) goneLocked(err error) {
	st.gone, st.goneErr = true, err
	close(st.goneCh)
	st.signal()
}

// Gone is closed when the stream has left the association: finished,
// reset by either end, or its association ended. A goroutine that waits
// on something else for the stream's sake (a local connection's next
// bytes, tunnel's copyToStream) waits on it too, so that it learns of
// the end rather than waiting for bytes that have nowhere to go.
func (st *Stream) Gone() <-chan struct{} { return st.goneCh }

// ID is the stream id.
func (st *Stream) ID() uint64 { return st.id }

// Meta is the metadata the opener attached.
func (st *Stream) Meta() []byte { return st.meta }

// goneErrLocked is the error of operations after the stream left the
// table.
func (st *Stream) goneErrLocked(write bool) error {
	switch {
	case st.localClosed:
		return ErrStreamClosed
	case st.goneErr != nil:
		return st.goneErr
	case write:
		return ErrWriteClosed
	}
	return io.EOF
}

// Read reads received data; io.EOF after the peer's FIN, a *ResetError
// after the peer's reset.
func (st *Stream) Read(p []byte) (int, error) {
	s := st.s
	for {
		s.mu.Lock()
		if st.gone {
			err := st.goneErrLocked(false)
			s.mu.Unlock()
			return 0, err
		}
		if len(p) == 0 {
			s.mu.Unlock()
			return 0, nil
		}
		n, err := s.a.StreamRead(st.id, p)
		if n > 0 {
			s.kickLocked() // credit may be due
		}
		s.dispatchLocked()
		if errors.Is(err, ErrUnknownStream) && st.gone {
			err = st.goneErrLocked(false)
		}
		s.mu.Unlock()
		if n > 0 || err != nil {
			return n, err
		}
		select {
		case <-st.readCh:
		case <-st.rdl.wait():
			return 0, ErrTimeout
		case <-s.done:
			st.settle()
		}
	}
}

// Write writes all of p, blocking while the stream's send buffer is full
// (backpressure toward the local sender).
func (st *Stream) Write(p []byte) (int, error) {
	s := st.s
	written := 0
	for {
		s.mu.Lock()
		if st.gone {
			err := st.goneErrLocked(true)
			s.mu.Unlock()
			return written, err
		}
		n, err := s.a.StreamWrite(st.id, p[written:])
		written += n
		if n > 0 {
			s.kickLocked()
		}
		s.dispatchLocked()
		if errors.Is(err, ErrUnknownStream) && st.gone {
			err = st.goneErrLocked(true)
		}
		s.mu.Unlock()
		if err != nil || written == len(p) {
			return written, err
		}
		if err := st.waitRoom(); err != nil {
			return written, err
		}
	}
}

// waitRoom waits for room in the stream after a write found none, until
// the write deadline (ErrTimeout).
func (st *Stream) waitRoom() error {
	select {
	case <-st.writeCh:
	case <-st.wdl.wait():
		return ErrTimeout
	case <-st.s.done:
		st.settle()
	}
	return nil
}

// WriteWith lets fill write straight into the stream's send buffer,
// saving the copy through a buffer of the caller's: fill is called with
// the session locked and with room for max > 0 bytes (WriteWith waits for
// room as Write does), and w takes up to max bytes without waiting. fill
// must not block nor use the session. WriteWith returns what fill
// returns, or the stream's error before fill is called.
func (st *Stream) WriteWith(fill func(w io.Writer, max int) (int, error)) (int, error) {
	s := st.s
	for {
		s.mu.Lock()
		if st.gone {
			err := st.goneErrLocked(true)
			s.mu.Unlock()
			return 0, err
		}
		room, err := s.a.StreamWriteRoom(st.id)
		if errors.Is(err, ErrUnknownStream) && st.gone {
			err = st.goneErrLocked(true)
		}
		var n int
		if room > 0 {
			n, err = fill(streamWriter{st}, room)
			if n > 0 {
				s.kickLocked()
			}
		}
		s.dispatchLocked()
		s.mu.Unlock()
		if room > 0 || err != nil {
			return n, err
		}
		if err := st.waitRoom(); err != nil {
			return 0, err
		}
	}
}

// streamWriter is WriteWith's writer: the session is locked, and what it
// is given fits.
type streamWriter struct{ st *Stream }

func (w streamWriter) Write(p []byte) (int, error) {
	n, err := w.st.s.a.StreamWrite(w.st.id, p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	return n, err
}

// CloseWrite sends FIN after the data written so far; the peer reads EOF.
func (st *Stream) CloseWrite() error {
	s := st.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.gone {
		if st.goneErr != nil {
			return st.goneErr
		}
		return nil
	}
	err := s.a.StreamCloseWrite(st.id)
	s.kickLocked()
	s.dispatchLocked()
	if errors.Is(err, ErrUnknownStream) && st.gone {
		err = st.goneErr
	}
	return err
}

// Close ends the stream for this side: CloseWrite, then stop reading. If
// unread data is waiting (or arrives later) the stream is reset instead.
// Blocked Reads and Writes return ErrStreamClosed.
func (st *Stream) Close() error {
	s := st.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.localClosed {
		return nil
	}
	st.localClosed = true
	if !st.gone {
		_ = s.a.StreamClose(st.id)
		s.dispatchLocked()
		s.kickLocked()
	}
	st.signal()
	return nil
}

// Reset aborts the stream both ways: the peer's Read and Write fail with a
// *ResetError carrying code.
func (st *Stream) Reset(code uint64) {
	s := st.s
	s.mu.Lock()
	defer s.mu.Unlock()
	st.localClosed = true
	if !st.gone {
		_ = s.a.StreamReset(st.id, code)
		s.dispatchLocked()
		s.kickLocked()
	}
	st.signal()
}

// SetDeadline sets both deadlines.
func (st *Stream) SetDeadline(t time.Time) error {
	st.rdl.set(t)
	st.wdl.set(t)
	return nil
}

// SetReadDeadline makes blocked and future Reads fail with ErrTimeout after
// t; zero disables it.
func (st *Stream) SetReadDeadline(t time.Time) error { st.rdl.set(t); return nil }

// SetWriteDeadline makes blocked and future Writes fail with ErrTimeout
// after t; zero disables it.
func (st *Stream) SetWriteDeadline(t time.Time) error { st.wdl.set(t); return nil }

// StreamAddr is the net.Addr of a stream: its id.
type StreamAddr uint64

// Network implements net.Addr.
func (StreamAddr) Network() string { return "scps" }

func (a StreamAddr) String() string { return "stream/" + strconv.FormatUint(uint64(a), 10) }

// LocalAddr implements net.Conn.
func (st *Stream) LocalAddr() net.Addr { return StreamAddr(st.id) }

// RemoteAddr implements net.Conn.
func (st *Stream) RemoteAddr() net.Addr { return StreamAddr(st.id) }

var _ net.Conn = (*Stream)(nil)
