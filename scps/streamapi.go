package scps

// This file owns the Association's stream API: the application-facing
// stream operations of the core (open, write, read, half-close, close,
// reset, metadata): what the application may do and the errors it gets.
// Creating, resetting, aborting and removing a stream, moving its data in
// and out of its buffers, granting credit and the memory budget's rules
// are streams.Manager's (internal/streams).

import "scpsvpn/scps/internal/streams"

// OpenStream opens a stream carrying meta (at most MaxMetaSize bytes). It
// never waits: the metadata goes out with the stream's first frame, at
// once even without data.
func (a *Association) OpenStream(meta []byte) (uint64, error) {
	if a.state != stateOpen {
		return 0, a.err
	}
	if len(meta) > MaxMetaSize {
		return 0, ErrMetaTooLarge
	}
	if len(a.streams.Pending) >= a.cfg.MaxStreams {
		return 0, ErrStreamLimit
	}
	id := a.streams.NextLocalID
	a.streams.NextLocalID += 2
	s := a.streams.NewStream(id, true, a.now)
	s.Meta = append([]byte(nil), meta...)
	s.OpenPending = true
	a.stats.StreamsOpened++
	if a.streams.OnWire(s) {
		a.streams.ScheduleNew(s)
	} else {
		a.streams.Pending = append(a.streams.Pending, s)
	}
	return id, nil
}

// lookup returns a stream the application may use.
func (a *Association) lookup(id uint64) (*streams.State, error) {
	s, ok := a.streams.ByID[id]
	if !ok {
		if a.state != stateOpen {
			return nil, a.err
		}
		return nil, ErrUnknownStream
	}
	return s, nil
}

// StreamMeta returns the stream's open metadata (nil while a peer
// stream's metadata has not arrived). The slice must not be modified.
func (a *Association) StreamMeta(id uint64) []byte {
	if s, ok := a.streams.ByID[id]; ok {
		return s.Meta
	}
	return nil
}

// StreamWrite copies as much of p into the stream's send buffer as fits
// and returns how much; 0 with a nil error means the buffer is full (an
// EventStream follows when space frees up).
func (a *Association) StreamWrite(id uint64, p []byte) (int, error) {
	s, err := a.writableStream(id)
	if err != nil {
		return 0, err
	}
	return a.streams.Write(s, p), nil
}

// StreamWriteRoom is how many bytes StreamWrite would take now, or the
// error it would return. With no room, the stream waits for it as after a
// short StreamWrite: an EventStream follows when room frees up.
func (a *Association) StreamWriteRoom(id uint64) (int, error) {
	s, err := a.writableStream(id)
	if err != nil {
		return 0, err
	}
	space, budget := a.streams.SendSpace(s)
	if space <= 0 {
		a.streams.AwaitRoom(s, budget)
		return 0, nil
	}
	return space, nil
}

// writableStream returns a stream the application may write to.
func (a *Association) writableStream(id uint64) (*streams.State, error) {
	s, err := a.lookup(id)
	if err != nil {
		return nil, err
	}
	switch {
	case s.PeerReset:
		return nil, &ResetError{Code: s.PeerCode}
	case s.LocalErr != nil:
		return nil, s.LocalErr
	case s.FinQueued:
		return nil, ErrWriteClosed
	}
	return s, nil
}

// StreamWritable is how many bytes StreamWrite would accept now.
func (a *Association) StreamWritable(id uint64) int {
	s, ok := a.streams.ByID[id]
	if !ok || s.Aborted() || s.FinQueued || s.LocalErr != nil {
		return 0
	}
	space, _ := a.streams.SendSpace(s)
	return max(space, 0)
}

// StreamRead copies received in-order data into p. It returns io.EOF after
// the peer's FIN once everything was read, a *ResetError after the peer's
// reset, and 0 with a nil error when nothing is available yet (an
// EventStream follows when that changes).
func (a *Association) StreamRead(id uint64, p []byte) (int, error) {
	s, err := a.lookup(id)
	if err != nil {
		return 0, err
	}
	switch {
	case s.PeerReset:
		return 0, &ResetError{Code: s.PeerCode}
	case s.LocalErr != nil && s.ResetSent:
		return 0, s.LocalErr
	case s.ReadClosed:
		return 0, ErrStreamClosed
	}
	n, err := a.streams.Read(s, p, a.now, a.sent.RTT().Smoothed())
	a.stats.StreamBytesReceived += uint64(n)
	return n, err
}

// StreamReadable is how many in-order bytes StreamRead would return now.
func (a *Association) StreamReadable(id uint64) int {
	s, ok := a.streams.ByID[id]
	if !ok || s.Aborted() {
		return 0
	}
	return int(s.Contiguous() - s.ReadOff)
}

// StreamCloseWrite ends our direction of the stream: the peer reads EOF
// after all data written so far.
func (a *Association) StreamCloseWrite(id uint64) error {
	s, err := a.lookup(id)
	if err != nil {
		return err
	}
	switch {
	case s.PeerReset:
		return &ResetError{Code: s.PeerCode}
	case s.ResetSent:
		return s.LocalErr
	case s.FinQueued:
		return nil
	}
	s.FinQueued = true
	s.FinOffset = s.WriteOff
	a.streams.ScheduleNew(s)
	return nil
}

// StreamClose closes the stream for the application: our direction ends
// with a FIN after the data already written; reading stops. If unread data
// is waiting (or arrives later), the stream is reset instead, like a TCP
// close with unread data.
func (a *Association) StreamClose(id uint64) error {
	s, err := a.lookup(id)
	if err != nil {
		return err
	}
	if s.Aborted() {
		if s.LocalErr == nil {
			s.LocalErr = ErrStreamClosed
		}
		a.streams.MaybeFinish(s)
		return nil
	}
	if s.LocalErr != nil {
		return nil
	}
	if s.Contiguous() > s.ReadOff || s.Recvd.Len() > 0 && s.Recvd.Last().End > s.ReadOff {
		a.streams.Reset(s, CodeStreamClosed, a.now, a.sent.RTT().Smoothed())
		return nil
	}
	if !s.FinQueued {
		s.FinQueued = true
		s.FinOffset = s.WriteOff
		a.streams.ScheduleNew(s)
	}
	s.LocalErr = ErrStreamClosed
	s.ReadClosed = true
	s.RecvBuf.Free()
	a.streams.Mem.Account(s)
	a.streams.MaybeFinish(s)
	return nil
}

// StreamReset aborts the stream in both directions with code: queued data
// is dropped and the peer's Read and Write fail with a *ResetError.
func (a *Association) StreamReset(id uint64, code uint64) error {
	s, err := a.lookup(id)
	if err != nil {
		return err
	}
	if s.Aborted() {
		if s.LocalErr == nil {
			s.LocalErr = ErrStreamClosed
		}
		a.streams.MaybeFinish(s)
		return nil
	}
	a.streams.Reset(s, code, a.now, a.sent.RTT().Smoothed())
	return nil
}
