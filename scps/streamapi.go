package scps

// This file owns the Association's stream API: the application-facing
// stream operations of the core (open, write, read, half-close, close,
// reset, metadata) and the stream bookkeeping they share with the receive
// and send paths: creating a stream, granting credit as the application
// reads, aborting a stream, and removing it once both sides are finished
// with it. The table and send queues are streamMap's (streammap.go).

import "io"

// newStream adds a stream to the table. With a known receive rate its
// receive window starts at twice the bandwidth-delay product and the
// credit goes out at once (with the stream's first frame for a local
// stream, with the first ACK for a peer's), so a known link fills from the
// second round trip on.
func (a *Association) newStream(id uint64, local bool) *streamState {
	s := &streamState{
		id:      id,
		local:   local,
		peerMax: InitialStreamCredit,
	}
	a.streams.byID[id] = s
	w := min(a.cfg.initialStreamWindow(), a.recvWindowLimit(s))
	s.recvMax = w
	a.recvAccount(s)
	s.recvWin.init(w, a.now, 0)
	s.sendWin.init(a.cfg.initialSendBuffer(), a.now, 0)
	if w > InitialStreamCredit {
		s.maxDataQueued = true
		a.streams.scheduleCtrl(s)
	}
	return s
}

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
	if len(a.streams.pending) >= a.cfg.MaxStreams {
		return 0, ErrStreamLimit
	}
	id := a.streams.nextLocalID
	a.streams.nextLocalID += 2
	s := a.newStream(id, true)
	s.meta = append([]byte(nil), meta...)
	s.openPending = true
	a.stats.StreamsOpened++
	if a.streams.onWire(s) {
		a.streams.scheduleNew(s)
	} else {
		a.streams.pending = append(a.streams.pending, s)
	}
	return id, nil
}

// lookup returns a stream the application may use.
func (a *Association) lookup(id uint64) (*streamState, error) {
	s, ok := a.streams.byID[id]
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
	if s, ok := a.streams.byID[id]; ok {
		return s.meta
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
	space, budget := a.sendSpace(s)
	n := min(len(p), space)
	if n < len(p) {
		a.awaitRoom(s, budget)
	}
	if n <= 0 {
		return 0, nil
	}
	s.sendBuf.Write(s.writeOff, p[:n])
	s.writeOff += uint64(n)
	a.mem.sendHeld += uint64(n)
	a.streams.scheduleNew(s)
	return n, nil
}

// StreamWriteRoom is how many bytes StreamWrite would take now, or the
// error it would return. With no room, the stream waits for it as after a
// short StreamWrite: an EventStream follows when room frees up.
func (a *Association) StreamWriteRoom(id uint64) (int, error) {
	s, err := a.writableStream(id)
	if err != nil {
		return 0, err
	}
	space, budget := a.sendSpace(s)
	if space <= 0 {
		a.awaitRoom(s, budget)
		return 0, nil
	}
	return space, nil
}

// writableStream returns a stream the application may write to.
func (a *Association) writableStream(id uint64) (*streamState, error) {
	s, err := a.lookup(id)
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

// awaitRoom marks a writer waiting for room in s's send buffer: room the
// memory budget withholds (budget) or the stream's own.
func (a *Association) awaitRoom(s *streamState, budget bool) {
	s.writeWait = true
	if budget {
		a.waitForBudget(s)
	} else {
		s.sendLimited = true
	}
}

// StreamWritable is how many bytes StreamWrite would accept now.
func (a *Association) StreamWritable(id uint64) int {
	s, ok := a.streams.byID[id]
	if !ok || s.aborted() || s.finQueued || s.localErr != nil {
		return 0
	}
	space, _ := a.sendSpace(s)
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
	case s.peerReset:
		return 0, &ResetError{Code: s.peerCode}
	case s.localErr != nil && s.resetSent:
		return 0, s.localErr
	case s.readClosed:
		return 0, ErrStreamClosed
	}
	avail := s.contiguous() - s.readOff
	if avail == 0 {
		if s.finKnown && s.readOff == s.finalSize {
			s.eofRead = true
			a.maybeFinish(s)
			return 0, io.EOF
		}
		s.readWait = true
		return 0, nil
	}
	n := int(min(uint64(len(p)), avail))
	if n == 0 {
		return 0, nil
	}
	s.recvBuf.Read(s.readOff, p[:n])
	s.readOff += uint64(n)
	s.recvBuf.Release(s.readOff)
	before := s.recvd.Len()
	s.recvd.RemoveBelow(s.readOff)
	a.recvdChanged(s, before)
	a.flow.consumed += uint64(n)
	a.stats.StreamBytesReceived += uint64(n)
	a.recvAccount(s)
	a.maybeStreamCredit(s)
	a.maybeConnCredit()
	a.budgetReleased()
	return n, nil
}

// StreamReadable is how many in-order bytes StreamRead would return now.
func (a *Association) StreamReadable(id uint64) int {
	s, ok := a.streams.byID[id]
	if !ok || s.aborted() {
		return 0
	}
	return int(s.contiguous() - s.readOff)
}

// StreamCloseWrite ends our direction of the stream: the peer reads EOF
// after all data written so far.
func (a *Association) StreamCloseWrite(id uint64) error {
	s, err := a.lookup(id)
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
	a.streams.scheduleNew(s)
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
	if s.aborted() {
		if s.localErr == nil {
			s.localErr = ErrStreamClosed
		}
		a.maybeFinish(s)
		return nil
	}
	if s.localErr != nil {
		return nil
	}
	if s.contiguous() > s.readOff || s.recvd.Len() > 0 && s.recvd.Last().End > s.readOff {
		a.resetStream(s, CodeStreamClosed)
		return nil
	}
	if !s.finQueued {
		s.finQueued = true
		s.finOffset = s.writeOff
		a.streams.scheduleNew(s)
	}
	s.localErr = ErrStreamClosed
	s.readClosed = true
	s.recvBuf.Free()
	a.recvAccount(s)
	a.maybeFinish(s)
	return nil
}

// StreamReset aborts the stream in both directions with code: queued data
// is dropped and the peer's Read and Write fail with a *ResetError.
func (a *Association) StreamReset(id uint64, code uint64) error {
	s, err := a.lookup(id)
	if err != nil {
		return err
	}
	if s.aborted() {
		if s.localErr == nil {
			s.localErr = ErrStreamClosed
		}
		a.maybeFinish(s)
		return nil
	}
	a.resetStream(s, code)
	return nil
}

// resetStream aborts s from our side (the application's reset or close).
func (a *Association) resetStream(s *streamState, code uint64) {
	s.localErr = ErrStreamClosed
	a.abortStream(s)
	s.resetSent, s.resetQueued, s.resetCode = true, true, code
	a.streams.scheduleCtrl(s)
	a.notify(s)
}

// abortStream drops both directions' data; bytes the peer sent that will
// never be read are returned to connection credit.
func (a *Association) abortStream(s *streamState) {
	if !s.sendFreed {
		s.sendFreed = true
		a.sendReleased(s.writeOff - s.ackedPrefix)
	}
	s.sendBuf.Free()
	s.acked.Clear()
	s.retx.Clear()
	s.finLost, s.openPending = false, false
	if s.highestRecv > s.readOff {
		a.flow.consumed += s.highestRecv - s.readOff
		s.readOff = s.highestRecv
	}
	a.settle(s, s.highestRecv) // bytes behind holes are discarded too
	s.recvBuf.Free()
	before := s.recvd.Len()
	s.recvd.Clear()
	a.recvdChanged(s, before)
	s.maxDataQueued = false
	a.recvAccount(s)
	a.maybeConnCredit()
}

// maybeStreamCredit grants more stream credit once a quarter of the window
// was consumed.
func (a *Association) maybeStreamCredit(s *streamState) {
	if s.finKnown || s.aborted() || s.readClosed {
		return
	}
	if s.recvMax-s.readOff > s.recvWin.size*3/4 {
		return
	}
	limit := a.recvWindowLimit(s)
	s.recvWin.update(s.readOff, limit, a.now, a.sent.RTT().Smoothed())
	s.recvWin.size = min(s.recvWin.size, limit) // more streams: a smaller share
	if want := s.recvWin.size * 3 / 2; want > a.flow.window.size {
		a.flow.window.size = min(want, a.cfg.connWindowLimit())
	}
	if m := s.readOff + s.recvWin.size; m > s.recvMax {
		s.recvMax = m
		s.maxDataQueued = true
		a.streams.scheduleCtrl(s)
		a.recvAccount(s)
	}
}

// maybeGrowSendBuffer ends a send-buffer epoch once a quarter of the
// buffer was acknowledged since it began: the buffer doubles if the
// application found it full meanwhile and the acknowledged drain filled
// half of it per smoothed RTT (window.update), so it keeps up with a link
// faster than the configured (or unknown) rate. The caller wakes a waiting
// writer.
func (a *Association) maybeGrowSendBuffer(s *streamState) {
	if s.ackedPrefix-s.sendWin.epochOff < s.sendWin.size/4 {
		return
	}
	limit := s.sendWin.size // measure only: no growth unless the writer waited
	if s.sendLimited {
		limit = a.cfg.sendBufferLimit()
	}
	s.sendWin.update(s.ackedPrefix, limit, a.now, a.sent.RTT().Smoothed())
	s.sendLimited = false
}

// maybeConnCredit grants more connection credit as data arrives in order
// and as the application reads (connFlow.maybeCredit).
func (a *Association) maybeConnCredit() {
	a.flow.maybeCredit(a.now, a.sent.RTT().Smoothed(), a.cfg.connWindowLimit(), a.connHold())
}

// settle returns the connection credit of s's bytes below off: they
// arrived in order (or were discarded) and need only the stream's credit
// from now on (connflow.go).
func (a *Association) settle(s *streamState, off uint64) {
	if off > s.settledOff {
		a.flow.settled += off - s.settledOff
		s.settledOff = off
	}
}

// maybeFinish removes s when both sides are done with it.
func (a *Association) maybeFinish(s *streamState) {
	if s.gone {
		return
	}
	var done bool
	if s.aborted() {
		// Our RESET_STREAM must be acknowledged, and we must know how
		// much the peer sent: from its own RESET_STREAM, or from its FIN
		// when it had finished (it may have forgotten the stream then, and
		// will not answer our reset).
		done = s.resetAcked && (s.peerReset || s.finKnown && s.highestRecv == s.finalSize)
	} else {
		done = s.sendDone() && s.recvDone() && (s.eofRead || s.readClosed)
	}
	if done {
		a.removeStream(s)
	}
}

func (a *Association) removeStream(s *streamState) {
	s.gone = true
	a.recvAccount(s)
	s.sendBuf.Free()
	s.recvBuf.Free()
	a.streams.remove(s)
	var err error
	switch {
	case s.localErr == nil && s.peerReset:
		err = &ResetError{Code: s.peerCode}
	case s.resetSent:
		err = s.localErr
	}
	a.emit(Event{Kind: EventStreamClosed, StreamID: s.id, Err: err})
}
