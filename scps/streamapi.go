package scps

// This file owns the Association's stream API: the application-facing
// stream operations of the core (open, write, read, half-close, close,
// reset, metadata). Each is a thin entry point: what the application may
// do with a stream in each state, and the stream's side of every
// operation, are streams.Manager's (internal/streams/streamapi.go); here
// the association checks that it is open, counts what moved and hands in
// the time.

import "scpsvpn/scps/internal/streams"

// OpenStream opens a stream carrying meta (at most MaxMetaSize bytes). It
// never waits: the metadata goes out with the stream's first frame, at
// once even without data.
func (a *Association) OpenStream(meta []byte) (uint64, error) {
	if a.state != stateOpen {
		return 0, a.err
	}
	id, err := a.streams.Open(meta, a.now)
	if err != nil {
		return 0, err
	}
	a.stats.StreamsOpened++
	return id, nil
}

// streamErr is the error of a stream operation: once the association
// closed (and took its streams with it), its own error rather than
// ErrUnknownStream.
func (a *Association) streamErr(err error) error {
	if err == streams.ErrUnknownStream && a.state != stateOpen {
		return a.err
	}
	return err
}

// StreamMeta returns the stream's open metadata (nil while a peer
// stream's metadata has not arrived). The slice must not be modified.
func (a *Association) StreamMeta(id uint64) []byte { return a.streams.Meta(id) }

// StreamWrite copies as much of p into the stream's send buffer as fits
// and returns how much; 0 with a nil error means the buffer is full (an
// EventStream follows when space frees up).
func (a *Association) StreamWrite(id uint64, p []byte) (int, error) {
	n, err := a.streams.Write(id, p)
	return n, a.streamErr(err)
}

// StreamWriteRoom is how many bytes StreamWrite would take now, or the
// error it would return. With no room, the stream waits for it as after a
// short StreamWrite: an EventStream follows when room frees up.
func (a *Association) StreamWriteRoom(id uint64) (int, error) {
	n, err := a.streams.WriteRoom(id)
	return n, a.streamErr(err)
}

// StreamWritable is how many bytes StreamWrite would accept now.
func (a *Association) StreamWritable(id uint64) int { return a.streams.Writable(id) }

// StreamRead copies received in-order data into p. It returns io.EOF after
// the peer's FIN once everything was read, a *ResetError after the peer's
// reset, and 0 with a nil error when nothing is available yet (an
// EventStream follows when that changes).
func (a *Association) StreamRead(id uint64, p []byte) (int, error) {
	n, err := a.streams.Read(id, p, a.now, a.sent.RTT().Smoothed())
	a.stats.StreamBytesReceived += uint64(n)
	return n, a.streamErr(err)
}

// StreamReadable is how many in-order bytes StreamRead would return now.
func (a *Association) StreamReadable(id uint64) int { return a.streams.Readable(id) }

// StreamCloseWrite ends our direction of the stream: the peer reads EOF
// after all data written so far.
func (a *Association) StreamCloseWrite(id uint64) error {
	return a.streamErr(a.streams.CloseWrite(id))
}

// StreamClose closes the stream for the application: our direction ends
// with a FIN after the data already written; reading stops. If unread data
// is waiting (or arrives later), the stream is reset instead, like a TCP
// close with unread data.
func (a *Association) StreamClose(id uint64) error {
	return a.streamErr(a.streams.Close(id, a.now, a.sent.RTT().Smoothed()))
}

// StreamReset aborts the stream in both directions with code: queued data
// is dropped and the peer's Read and Write fail with a *ResetError.
func (a *Association) StreamReset(id uint64, code uint64) error {
	return a.streamErr(a.streams.Reset(id, code, a.now, a.sent.RTT().Smoothed()))
}
