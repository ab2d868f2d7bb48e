package scps

// This file tests Session with real goroutines over in-memory packet pipes:
// streams, metadata, half-close, reset, Close unblocking every waiter,
// deadlines, datagrams, and goroutine leaks.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// pipe carries packets from one session to another on its own goroutine,
// dropping a fraction (seeded) and dropping when its queue is full, like a
// network would.
type pipe struct {
	ch   chan Packet
	loss float64
	rng  *rand.Rand
	mu   sync.Mutex
	to   *Session
	done chan struct{}
	wg   sync.WaitGroup
}

func newPipe(loss float64, seed uint64) *pipe {
	return &pipe{ch: make(chan Packet, 4096), loss: loss, rng: rand.New(rand.NewPCG(seed, 1)), done: make(chan struct{})}
}

func (p *pipe) transmit(pkts []Packet) {
	for _, pkt := range pkts {
		p.mu.Lock()
		drop := p.loss > 0 && p.rng.Float64() < p.loss
		p.mu.Unlock()
		if drop {
			continue
		}
		select {
		case p.ch <- Packet{Number: pkt.Number, Data: append([]byte(nil), pkt.Data...)}:
		default: // queue full: dropped
		}
	}
}

func (p *pipe) start(to *Session) {
	p.to = to
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			select {
			case pkt := <-p.ch:
				p.to.Input(pkt.Number, pkt.Data)
			case <-p.done:
				return
			}
		}
	}()
}

func (p *pipe) stop() { close(p.done); p.wg.Wait() }

// sessionPair connects two sessions through lossy pipes.
func sessionPair(t testing.TB, loss float64, mod func(*Config)) (a, b *Session, cleanup func()) {
	t.Helper()
	pab, pba := newPipe(loss, 1), newPipe(loss, 2)
	cfg := DefaultConfig()
	cfg.InitialRTT = 10 * time.Millisecond
	cfg.MinRTO = 20 * time.Millisecond
	if mod != nil {
		mod(&cfg)
	}
	ca, cb := cfg, cfg
	ca.EvenStreams = true
	var err error
	a, err = NewSession(SessionConfig{Config: ca, Transmit: pab.transmit})
	if err != nil {
		t.Fatal(err)
	}
	b, err = NewSession(SessionConfig{Config: cb, Transmit: pba.transmit})
	if err != nil {
		t.Fatal(err)
	}
	pab.start(b)
	pba.start(a)
	return a, b, func() {
		a.Close()
		b.Close()
		pab.stop()
		pba.stop()
	}
}

// checkGoroutines fails if goroutines started during the test are still
// running 10 s after it: a leaked one never ends, and a loaded machine
// (test.sh runs these under the race detector beside every other
// package's tests) may take seconds to schedule one that is ending.
func checkGoroutines(t *testing.T) func() {
	before := runtime.NumGoroutine()
	return func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= before {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Fatalf("%d goroutines before, %d after:\n%s", before, n, buf)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func payload(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 7))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestSessionEcho(t *testing.T) {
	for _, loss := range []float64{0, 0.02} {
		t.Run(fmt.Sprint(loss), func(t *testing.T) {
			defer checkGoroutines(t)()
			a, b, cleanup := sessionPair(t, loss, nil)
			defer cleanup()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// b echoes every stream back.
			var srv sync.WaitGroup
			srv.Add(1)
			go func() {
				defer srv.Done()
				for {
					st, err := b.AcceptStream(ctx)
					if err != nil {
						return
					}
					srv.Add(1)
					go func() {
						defer srv.Done()
						if _, err := io.Copy(st, st); err != nil {
							t.Errorf("echo %d: %v", st.ID(), err)
						}
						st.CloseWrite()
						st.Close()
					}()
				}
			}()
			var wg sync.WaitGroup
			for i := 0; i < 16; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					size := []int{0, 1, 1000, 100_000, 1 << 20}[i%5]
					data := payload(size, uint64(i))
					meta := []byte(fmt.Sprintf("client-%d", i))
					st, err := a.OpenStream(meta)
					if err != nil {
						t.Error(err)
						return
					}
					go func() {
						st.Write(data)
						st.CloseWrite()
					}()
					got, err := io.ReadAll(st)
					if err != nil || !bytes.Equal(got, data) {
						t.Errorf("stream %d: %d bytes back (want %d), err %v", st.ID(), len(got), len(data), err)
					}
					st.Close()
				}()
			}
			wg.Wait()
			cancel()
			srv.Wait()
			// Both tables drain.
			deadline := time.Now().Add(30 * time.Second) // hang guard: a loaded machine's seconds
			for a.Stats().StreamsOpen+b.Stats().StreamsOpen > 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if n, m := a.Stats().StreamsOpen, b.Stats().StreamsOpen; n+m > 0 {
				t.Errorf("streams left: %d / %d", n, m)
			}
		})
	}
}

func TestSessionMetaAndHalfClose(t *testing.T) {
	defer checkGoroutines(t)()
	a, b, cleanup := sessionPair(t, 0, nil)
	defer cleanup()
	st, err := a.OpenStream([]byte("tcp 10.1.0.7:5555 10.2.0.5:80"))
	if err != nil {
		t.Fatal(err)
	}
	// Opening needs no data: the peer sees the stream at once.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ps, err := b.AcceptStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(ps.Meta()) != "tcp 10.1.0.7:5555 10.2.0.5:80" || ps.ID() != st.ID() {
		t.Fatalf("meta %q id %d", ps.Meta(), ps.ID())
	}
	st.Write([]byte("GET /"))
	st.CloseWrite()
	req, err := io.ReadAll(ps)
	if err != nil || string(req) != "GET /" {
		t.Fatalf("request %q %v", req, err)
	}
	ps.Write([]byte("200 OK"))
	ps.Close()
	resp, err := io.ReadAll(st)
	if err != nil || string(resp) != "200 OK" {
		t.Fatalf("response %q %v", resp, err)
	}
	if _, err := st.Write([]byte("x")); !errors.Is(err, ErrWriteClosed) {
		t.Errorf("write after CloseWrite: %v", err)
	}
	st.Close()
	if _, err := st.Read(make([]byte, 1)); !errors.Is(err, ErrStreamClosed) {
		t.Errorf("read after Close: %v", err)
	}
}

func TestSessionReset(t *testing.T) {
	defer checkGoroutines(t)()
	a, b, cleanup := sessionPair(t, 0, nil)
	defer cleanup()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, _ := a.OpenStream(nil)
	st.Write([]byte("hello"))
	ps, err := b.AcceptStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(ps, buf); err != nil {
		t.Fatal(err)
	}
	readErr := make(chan error, 1)
	go func() {
		_, err := ps.Read(buf)
		readErr <- err
	}()
	time.Sleep(20 * time.Millisecond)
	st.Reset(99)
	var re *ResetError
	select {
	case err := <-readErr:
		if !errors.As(err, &re) || re.Code != 99 {
			t.Fatalf("blocked Read returned %v, want ResetError{99}", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("blocked Read not released by the peer's reset")
	}
	if _, err := ps.Write([]byte("x")); !errors.As(err, &re) || re.Code != 99 {
		t.Errorf("Write after peer reset: %v", err)
	}
	if _, err := st.Write([]byte("x")); !errors.Is(err, ErrStreamClosed) {
		t.Errorf("Write after own reset: %v", err)
	}
	ps.Close()
}

func TestSessionCloseUnblocksEverything(t *testing.T) {
	defer checkGoroutines(t)()
	a, b, cleanup := sessionPair(t, 0, func(c *Config) {
		c.SendBuffer = 64 << 10
	})
	defer cleanup()
	ctx := context.Background()
	wst, _ := a.OpenStream([]byte("writer"))
	rst, _ := a.OpenStream([]byte("reader"))
	for i := 0; i < 2; i++ {
		if _, err := b.AcceptStream(ctx); err != nil { // accepted, never read
			t.Fatal(err)
		}
	}
	// A stream of the peer's, accepted before the waiters start: opened
	// later, it could reach a before Close and answer the blocked
	// AcceptStream with a nil error (seen under -race on a loaded machine).
	peerStream, _ := b.OpenStream([]byte("peer"))
	if _, err := a.AcceptStream(ctx); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	go func() { // blocks: the peer never reads, buffers fill
		_, err := wst.Write(make([]byte, 8<<20))
		errs <- err
	}()
	go func() { // blocks: nothing arrives
		_, err := rst.Read(make([]byte, 10))
		errs <- err
	}()
	go func() { // blocks: nobody opens
		_, err := a.AcceptStream(ctx)
		errs <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		select {
		case err := <-errs:
			if err == nil {
				t.Errorf("blocked call returned nil error")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not unblock a waiter")
		}
	}
	select {
	case <-a.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	// The peer learns: its association closes and its streams are reset.
	select {
	case <-b.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("peer did not see the close")
	}
	var pc *PeerClosedError
	if !errors.As(b.Err(), &pc) {
		t.Errorf("peer error %v", b.Err())
	}
	if _, err := peerStream.Write([]byte("x")); err == nil {
		t.Errorf("peer stream still writable")
	}
	if _, err := a.OpenStream(nil); err == nil {
		t.Errorf("OpenStream after Close succeeded")
	}
}

func TestSessionDeadlines(t *testing.T) {
	defer checkGoroutines(t)()
	a, _, cleanup := sessionPair(t, 0, nil)
	defer cleanup()
	st, _ := a.OpenStream(nil)
	st.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	start := time.Now()
	_, err := st.Read(make([]byte, 1))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read: %v", err)
	}
	if d := time.Since(start); d < 25*time.Millisecond || d > 10*time.Second { // early, or a hang
		t.Errorf("timeout after %v", d)
	}
	// Clearing the deadline re-arms reads.
	st.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() { _, err := st.Read(make([]byte, 1)); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("Read returned %v with no deadline", err)
	case <-time.After(50 * time.Millisecond):
	}
	st.SetReadDeadline(time.Now()) // already passed: releases the waiter
	if err := <-done; !errors.Is(err, ErrTimeout) {
		t.Fatalf("Read: %v", err)
	}
	st.Close()
}

func TestSessionDatagrams(t *testing.T) {
	defer checkGoroutines(t)()
	var mu sync.Mutex
	var got []string
	pab, pba := newPipe(0, 1), newPipe(0, 2)
	cfg := DefaultConfig()
	cfg.EvenStreams = true
	a, err := NewSession(SessionConfig{Config: cfg, Transmit: pab.transmit})
	if err != nil {
		t.Fatal(err)
	}
	cfg.EvenStreams = false
	b, err := NewSession(SessionConfig{Config: cfg, Transmit: pba.transmit, OnDatagram: func(p []byte) {
		mu.Lock()
		got = append(got, string(p))
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	pab.start(b)
	pba.start(a)
	defer func() { a.Close(); b.Close(); pab.stop(); pba.stop() }()
	for i := 0; i < 10; i++ {
		if err := a.SendDatagram([]byte(fmt.Sprintf("dgram-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second) // hang guard: a loaded machine's seconds
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 10 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 10 || got[0] != "dgram-0" {
		t.Fatalf("got %q", got)
	}
	if err := a.SendDatagram(make([]byte, a.MaxDatagramSize()+1)); !errors.Is(err, ErrDatagramTooLarge) {
		t.Errorf("oversize: %v", err)
	}
}

// TestSessionOutageState: a dead link is reported once as an outage and
// once as a resume, and a write across it delivers every byte. It runs in
// real time: the silence that makes an outage is a second, well beyond the
// scheduling stalls of a loaded machine under the race detector (300 ms
// made a second, spurious outage now and then).
func TestSessionOutageState(t *testing.T) {
	defer checkGoroutines(t)()
	pab, pba := newPipe(0, 1), newPipe(0, 2)
	cfg := DefaultConfig()
	cfg.InitialRTT = 10 * time.Millisecond
	cfg.MinRTO = 20 * time.Millisecond
	cfg.OutageAfter = time.Second
	cfg.ProbeInterval = 50 * time.Millisecond
	states := make(chan bool, 16)
	ca, cb := cfg, cfg
	ca.EvenStreams = true
	a, err := NewSession(SessionConfig{Config: ca, Transmit: pab.transmit, OnState: func(outage bool) { states <- outage }})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewSession(SessionConfig{Config: cb, Transmit: pba.transmit})
	if err != nil {
		t.Fatal(err)
	}
	pab.start(b)
	pba.start(a)
	defer func() {
		a.Close()
		b.Close()
		pab.stop()
		pba.stop()
	}()
	setLoss := func(l float64) {
		for _, p := range []*pipe{pab, pba} {
			p.mu.Lock()
			p.loss = l
			p.mu.Unlock()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	data := payload(2<<20, 9)
	st, err := a.OpenStream([]byte("outage"))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() {
		ps, err := b.AcceptStream(ctx)
		if err != nil {
			got <- nil
			return
		}
		buf, _ := io.ReadAll(ps)
		got <- buf
	}()
	written := make(chan error, 1)
	go func() {
		_, err := st.Write(data)
		if err == nil {
			err = st.CloseWrite()
		}
		written <- err
	}()
	time.Sleep(50 * time.Millisecond)
	setLoss(1) // the link dies
	select {
	case s := <-states:
		if !s {
			t.Fatalf("first state change %v, want outage", s)
		}
	case <-ctx.Done():
		t.Fatal("no outage reported")
	}
	if !a.InOutage() || !a.Stats().Outage {
		t.Errorf("InOutage false during the outage")
	}
	time.Sleep(200 * time.Millisecond)
	setLoss(0) // and comes back
	select {
	case s := <-states:
		if s {
			t.Fatalf("second state change %v, want resume", s)
		}
	case <-ctx.Done():
		t.Fatal("no resume reported")
	}
	if err := <-written; err != nil {
		t.Fatalf("write across the outage: %v", err)
	}
	if buf := <-got; !bytes.Equal(buf, data) {
		t.Fatalf("received %d bytes, want the %d written", len(buf), len(data))
	}
	if s := a.Stats(); s.Outages != 1 || s.OutageProbes == 0 {
		t.Errorf("outages %d, probes %d", s.Outages, s.OutageProbes)
	}
	st.Close()
}

// TestSessionWriteWith: WriteWith's fill is offered only room the stream
// has (it waits for room while the peer does not read), what fill writes
// arrives intact and in order, and after the peer's reset WriteWith fails
// without calling fill.
func TestSessionWriteWith(t *testing.T) {
	defer checkGoroutines(t)()
	a, b, cleanup := sessionPair(t, 0, nil)
	defer cleanup()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	data := payload(8<<20, 5)
	st, err := a.OpenStream(nil)
	if err != nil {
		t.Fatal(err)
	}
	var written atomic.Int64
	done := make(chan error, 1)
	go func() {
		off := 0
		for off < len(data) {
			_, err := st.WriteWith(func(w io.Writer, max int) (int, error) {
				if max <= 0 {
					t.Errorf("fill offered %d bytes", max)
				}
				n, err := w.Write(data[off : off+min(max, len(data)-off)])
				off += n
				written.Add(int64(n))
				return n, err
			})
			if err != nil {
				done <- err
				return
			}
		}
		done <- st.CloseWrite()
	}()
	ps, err := b.AcceptStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Nobody reads: the writer stops at what the stream holds.
	time.Sleep(300 * time.Millisecond)
	if n := written.Load(); n == 0 || n >= int64(len(data)) {
		t.Fatalf("with the peer not reading, %d of %d bytes written", n, len(data))
	}
	got, err := io.ReadAll(ps)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes (want %d equal), %v", len(got), len(data), err)
	}
	if err := <-done; err != nil {
		t.Fatalf("writer: %v", err)
	}

	st2, _ := a.OpenStream(nil)
	st2.Write([]byte("x"))
	ps2, err := b.AcceptStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ps2.Reset(7)
	var re *ResetError
	for {
		called := false
		_, err := st2.WriteWith(func(w io.Writer, max int) (int, error) {
			called = true
			return w.Write([]byte("y"))
		})
		if err != nil {
			if !errors.As(err, &re) || re.Code != 7 || called {
				t.Fatalf("after the peer's reset: %v (fill called %v)", err, called)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the peer's reset never reached WriteWith")
		}
		time.Sleep(time.Millisecond)
	}
	st.Close()
	st2.Close()
	ps.Close()
	ps2.Close()
}

// TestSessionClock checks that a Session keeps the time of the clock it is
// handed, not the machine's: while that clock stands still no timer
// expires however much real time passes, and once it moves past the idle
// timeout the session ends for it.
func TestSessionClock(t *testing.T) {
	defer checkGoroutines(t)()
	var ahead atomic.Int64
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := DefaultConfig()
	cfg.MinRTO = 20 * time.Millisecond
	cfg.IdleTimeout = 100 * time.Millisecond
	s, err := NewSession(SessionConfig{
		Config:   cfg,
		Transmit: func([]Packet) {}, // the peer is never heard
		Now:      func() time.Time { return base.Add(time.Duration(ahead.Load())) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	select {
	case <-s.Done():
		t.Fatalf("the session ended while its clock stood still: %v", s.Err())
	case <-time.After(4 * cfg.IdleTimeout):
	}
	ahead.Store(int64(2 * cfg.IdleTimeout))
	select {
	case <-s.Done():
	case <-time.After(30 * time.Second): // hang guard only
		t.Fatal("the session did not see its clock move past the idle timeout")
	}
	if err := s.Err(); !errors.Is(err, ErrIdleTimeout) {
		t.Fatalf("session ended with %v, want %v", err, ErrIdleTimeout)
	}
}

// A timer wake-up later than planned beyond the pacer's burst (a host
// that did not run the endpoint: the send time is lost, the pacer holds
// only the burst) is counted in the session's Stats. The clock jumps a
// second ahead while the session sleeps for its probe timer, so the
// wake-up that follows is a second late by the session's clock.
func TestSessionCountsLateWakes(t *testing.T) {
	defer checkGoroutines(t)()
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	cfg := DefaultConfig()
	cfg.InitialRTT = 10 * time.Millisecond
	cfg.MinRTO = 20 * time.Millisecond
	s, err := NewSession(SessionConfig{Config: cfg, Transmit: func([]Packet) {}, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, err := s.OpenStream(nil)
	if err != nil {
		t.Fatal(err)
	}
	// Unacknowledged data keeps a probe timer set.
	if _, err := st.Write(payload(100_000, 1)); err != nil {
		t.Fatal(err)
	}
	// Jump once the session sleeps for a timer at least 20 ms away (the
	// probe's), so no wake-up planned with the new clock comes first.
	deadline := time.Now().Add(20 * time.Second) // hang guard
	for jumped := false; !jumped; {
		s.mu.Lock()
		if s.sleeping && s.sleepUntil.Sub(now()) > 20*time.Millisecond {
			skew.Store(int64(time.Second))
			jumped = true
		}
		s.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("the session never slept for its probe timer")
		}
		time.Sleep(time.Millisecond)
	}
	for {
		stats := s.Stats()
		if stats.LateWakes > 0 {
			if stats.LateWakeTime < 500*time.Millisecond {
				t.Fatalf("late by %v after the clock jumped a second", stats.LateWakeTime)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no late wake-up counted after the clock jumped a second")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
