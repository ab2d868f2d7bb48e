package scps

// This file owns the Association's stream API: the application-facing
// stream operations of the core (open, write, read, half-close, close,
// reset, metadata) and the stream bookkeeping they share with the receive
// and send paths: scheduling a stream for sending, granting credit as the
// application reads, and removing a stream once both sides are finished
// with it.

import (
	"io"
	"time"
)

func (a *Association) isLocal(id uint64) bool {
	return (id&1 == 0) == a.cfg.EvenStreams
}

// onWire reports whether s may appear in packets: a local stream needs the
// peer's stream credit.
func (a *Association) onWire(s *streamState) bool {
	return !s.local || s.id>>1 < a.peerMaxStreams
}

// newStream adds a stream to the table. With a known receive rate its
// receive window starts at twice the bandwidth-delay product and the
// credit goes out at once (with the stream's first frame for a local
// stream, with the first ACK for a peer's), so a known link fills from the
// second round trip on.
func (a *Association) newStream(id uint64, local bool) *streamState {
	w := a.cfg.initialStreamWindow()
	s := &streamState{
		id:         id,
		local:      local,
		peerMax:    InitialStreamCredit,
		recvMax:    w,
		recvWindow: w,
		epochStart: a.now,
	}
	a.streams[id] = s
	if w > InitialStreamCredit {
		s.maxDataQueued = true
		a.scheduleCtrl(s)
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
	if len(a.pendingOpen) >= a.cfg.MaxStreams {
		return 0, ErrStreamLimit
	}
	id := a.nextLocalID
	a.nextLocalID += 2
	s := a.newStream(id, true)
	s.meta = append([]byte(nil), meta...)
	s.openPending = true
	a.stats.StreamsOpened++
	if a.onWire(s) {
		a.scheduleNew(s)
	} else {
		a.pendingOpen = append(a.pendingOpen, s)
	}
	return id, nil
}

// lookup returns a stream the application may use.
func (a *Association) lookup(id uint64) (*streamState, error) {
	s, ok := a.streams[id]
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
	if s, ok := a.streams[id]; ok {
		return s.meta
	}
	return nil
}

// StreamWrite copies as much of p into the stream's send buffer as fits
// and returns how much; 0 with a nil error means the buffer is full (an
// EventStream follows when space frees up).
func (a *Association) StreamWrite(id uint64, p []byte) (int, error) {
	s, err := a.lookup(id)
	if err != nil {
		return 0, err
	}
	switch {
	case s.peerReset:
		return 0, &ResetError{Code: s.peerCode}
	case s.localErr != nil:
		return 0, s.localErr
	case s.finQueued:
		return 0, ErrWriteClosed
	}
	space := a.cfg.SendBuffer - int(s.writeOff-s.ackedPrefix)
	n := min(len(p), space)
	if n < len(p) {
		s.writeWait = true
	}
	if n <= 0 {
		return 0, nil
	}
	s.sendBuf.Write(s.writeOff, p[:n])
	s.writeOff += uint64(n)
	a.scheduleNew(s)
	return n, nil
}

// StreamWritable is how many bytes StreamWrite would accept now.
func (a *Association) StreamWritable(id uint64) int {
	s, ok := a.streams[id]
	if !ok || s.aborted() || s.finQueued || s.localErr != nil {
		return 0
	}
	return a.cfg.SendBuffer - int(s.writeOff-s.ackedPrefix)
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
	s.recvd.RemoveBelow(s.readOff)
	a.connConsumed += uint64(n)
	a.stats.StreamBytesReceived += uint64(n)
	a.maybeStreamCredit(s)
	a.maybeConnCredit()
	return n, nil
}

// StreamReadable is how many in-order bytes StreamRead would return now.
func (a *Association) StreamReadable(id uint64) int {
	s, ok := a.streams[id]
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
	a.scheduleNew(s)
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
		a.scheduleNew(s)
	}
	s.localErr = ErrStreamClosed
	s.readClosed = true
	s.recvBuf.Free()
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
	a.scheduleCtrl(s)
	a.notify(s)
}

// abortStream drops both directions' data; bytes the peer sent that will
// never be read are returned to connection credit.
func (a *Association) abortStream(s *streamState) {
	s.sendBuf.Free()
	s.acked.Clear()
	s.retx.Clear()
	s.finLost, s.openPending = false, false
	if s.highestRecv > s.readOff {
		a.connConsumed += s.highestRecv - s.readOff
		s.readOff = s.highestRecv
	}
	s.recvBuf.Free()
	s.recvd.Clear()
	s.maxDataQueued = false
	a.maybeConnCredit()
}

// scheduleNew puts s in a new-data queue if it can send new data now.
func (a *Association) scheduleNew(s *streamState) {
	if s.gone || s.aborted() || s.queued&inNewQ != 0 || !a.onWire(s) {
		return
	}
	if !a.canSendNew(s) {
		if s.sentOff < s.writeOff && s.sentOff >= s.peerMax {
			s.creditWait = true
		}
		return
	}
	s.queued |= inNewQ
	if s.unsent() <= lightThreshold {
		a.lightQ.push(s)
	} else {
		a.bulkQ.push(s)
	}
}

func (a *Association) canSendNew(s *streamState) bool {
	return (s.sentOff < s.writeOff && s.sentOff < s.peerMax) ||
		(s.openPending && s.sentOff == 0) ||
		(s.finQueued && !s.finSent && s.sentOff == s.writeOff)
}

func (a *Association) scheduleRetx(s *streamState) {
	if s.gone || s.aborted() || s.queued&inRetxQ != 0 || !s.hasRetx() {
		return
	}
	s.queued |= inRetxQ
	a.retxQ.push(s)
}

func (a *Association) scheduleCtrl(s *streamState) {
	if s.gone || s.queued&inCtrlQ != 0 || !a.onWire(s) {
		return
	}
	s.queued |= inCtrlQ
	a.ctrlQ.push(s)
}

// autotune grows a receive window when the application consumed data at a
// rate the window would limit: more than half of window per smoothed RTT
// since the last update.
func (a *Association) autotune(window *uint64, epochStart *time.Duration, epochOff *uint64, readOff, limit uint64) {
	elapsed := a.now - *epochStart
	read := readOff - *epochOff
	srtt := a.sent.rtt.Smoothed()
	if *window < limit && read > 0 && float64(read)*2*srtt.Seconds() >= float64(*window)*elapsed.Seconds() {
		*window = min(2**window, limit)
	}
	*epochStart, *epochOff = a.now, readOff
}

// maybeStreamCredit grants more stream credit once a quarter of the window
// was consumed.
func (a *Association) maybeStreamCredit(s *streamState) {
	if s.finKnown || s.aborted() || s.readClosed {
		return
	}
	if s.recvMax-s.readOff > s.recvWindow*3/4 {
		return
	}
	a.autotune(&s.recvWindow, &s.epochStart, &s.epochOff, s.readOff, a.cfg.StreamWindow)
	if want := s.recvWindow * 3 / 2; want > a.connWindow {
		a.connWindow = min(want, a.cfg.ConnWindow)
	}
	if m := s.readOff + s.recvWindow; m > s.recvMax {
		s.recvMax = m
		s.maxDataQueued = true
		a.scheduleCtrl(s)
	}
}

// maybeConnCredit grants more connection credit once a quarter of the
// window was consumed.
func (a *Association) maybeConnCredit() {
	if a.connRecvMax-a.connConsumed > a.connWindow*3/4 {
		return
	}
	a.autotune(&a.connWindow, &a.connEpochStart, &a.connEpochOff, a.connConsumed, a.cfg.ConnWindow)
	if m := a.connConsumed + a.connWindow; m > a.connRecvMax {
		a.connRecvMax = m
		a.maxDataQueued = true
	}
}

// maybeMaxStreams raises the peer's stream limit as its streams close.
func (a *Association) maybeMaxStreams() {
	target := a.peerClosedCount + uint64(a.cfg.MaxStreams)
	step := uint64(max(1, a.cfg.MaxStreams/8))
	if target >= a.localMaxStreams+step {
		a.localMaxStreams = target
		a.maxStreamsQueued = true
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
	s.sendBuf.Free()
	s.recvBuf.Free()
	delete(a.streams, s.id)
	if !s.local {
		idx := s.id >> 1
		a.peerClosed.Add(idx, idx+1)
		a.peerClosedCount++
		a.maybeMaxStreams()
	}
	var err error
	switch {
	case s.localErr == nil && s.peerReset:
		err = &ResetError{Code: s.peerCode}
	case s.resetSent:
		err = s.localErr
	}
	a.emit(Event{Kind: EventStreamClosed, StreamID: s.id, Err: err})
}

// releasePending moves local streams that now have stream credit onto the
// wire.
func (a *Association) releasePending() {
	n := 0
	for _, s := range a.pendingOpen {
		if s.gone {
			n++
			continue
		}
		if !a.onWire(s) {
			break
		}
		n++
		if s.resetQueued || s.maxDataQueued {
			a.scheduleCtrl(s)
		}
		if !s.resetQueued {
			a.scheduleNew(s)
		}
	}
	a.pendingOpen = a.pendingOpen[n:]
	if len(a.pendingOpen) == 0 {
		a.pendingOpen = nil
	}
}
