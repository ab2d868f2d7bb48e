package bench

// This file owns the traffic of one measurement, independent of how the
// sites are connected: the server (bulk downloads and echoes, on any
// listener) and the client's measurement of a download of fixed duration
// (time to first byte, bytes over time) with, optionally, a small
// request/response probe on a second connection while the download runs.
// Dialing is the caller's, so the same code measures kernel TCP end to end,
// scpsvpn, or loopback in the unit tests.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Server answers benchmark requests on a listener until closed.
type Server struct {
	ln  net.Listener
	log *slog.Logger
	// accepted, when set, runs on each new connection before the request
	// is read (e.g. to set and check its congestion control); an error
	// closes the connection and is kept for Err.
	accepted func(net.Conn) error

	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	err    error // first error of accepted
	served atomic.Int64
	// answering, when set (OnAnswer), is told of each download's answer
	// before its first byte is written.
	answering atomic.Pointer[func(remote net.Addr)]
}

// bulkChunk is the size of the server's writes of a download.
const bulkChunk = 64 << 10

// tickJitter is the slack that keeps timeline points on the ticks nearest
// to each interval boundary instead of slipping a whole tick late: half a tick.
const tickJitter = sampleEvery / 2

// requestTimeout bounds the wait for a request line; far above any RTT.
const requestTimeout = 30 * time.Second

// Serve starts answering requests on ln. accepted may be nil.
func Serve(ln net.Listener, accepted func(net.Conn) error, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{ln: ln, log: log.With("component", "bench-server"), accepted: accepted, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.acceptLoop()
	return s
}

// Addr is the listener's address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// OnAnswer has f told of each download ("get") the server answers, with
// the connection's remote address, just before the answer's first byte
// is written: when the answer became the network's to carry. Through
// scpsvpn the far endpoint re-originates a connection from the client's
// own address and port, so the address names the client's connection
// there as over kernel TCP.
func (s *Server) OnAnswer(f func(remote net.Addr)) { s.answering.Store(&f) }

// Served counts the connections that made a valid request.
func (s *Server) Served() int64 { return s.served.Load() }

// Err returns the first error of the accepted hook.
func (s *Server) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close stops accepting, closes every connection and waits for the
// handlers, so no socket outlives the server (a socket would keep its
// network namespace alive).
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	err := s.ln.Close()
	s.wg.Wait()
	return err
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			s.handle(c)
		}()
	}
}

func (s *Server) handle(c net.Conn) {
	if s.accepted != nil {
		if err := s.accepted(c); err != nil {
			s.mu.Lock()
			if s.err == nil {
				s.err = err
			}
			s.mu.Unlock()
			s.log.Warn("connection refused by the accept hook", "remote", c.RemoteAddr(), "err", err)
			return
		}
	}
	c.SetReadDeadline(time.Now().Add(requestTimeout))
	req, err := readRequest(c)
	if err != nil {
		s.log.Debug("dropping connection", "remote", c.RemoteAddr(), "err", err)
		return
	}
	c.SetReadDeadline(time.Time{})
	s.served.Add(1)
	switch req.mode {
	case modeBulk:
		buf := bulkPattern(bulkChunk)
		for {
			if _, err := c.Write(buf); err != nil {
				return // the client hung up: the normal end of a download
			}
		}
	case modeGet:
		buf := bulkPattern(min(req.size, bulkChunk))
		if f := s.answering.Load(); f != nil {
			(*f)(c.RemoteAddr())
		}
		for left := req.size; left > 0; left -= min(left, len(buf)) {
			if _, err := c.Write(buf[:min(left, len(buf))]); err != nil {
				return
			}
		}
		// The client closes once it has every byte; closing first would
		// leave the server's side in TIME_WAIT for each of many flows.
		c.SetReadDeadline(time.Now().Add(requestTimeout))
		io.Copy(io.Discard, c)
	case modeEcho:
		buf := make([]byte, req.size)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}
}

// bulkPattern is n bytes of download payload: not all zeros, in case
// anything on the path compresses.
func bulkPattern(n int) []byte {
	buf := make([]byte, n)
	for i := range buf {
		buf[i] = byte(i*7 + i>>8)
	}
	return buf
}

// Dialer opens a client connection to the server.
type Dialer func(ctx context.Context) (net.Conn, error)

// TransferConfig describes one measured download.
type TransferConfig struct {
	Dial     Dialer
	Duration time.Duration // the measurement window, from the start of the dial
	// RequestEvery, when positive, runs the request/response probe: a
	// second connection, opened once the download's first byte arrived,
	// sends RequestSize bytes every RequestEvery and times the echo.
	RequestEvery time.Duration
	RequestSize  int
	// RequestNewConn makes each request a new connection's, timed from
	// connect() to the answer's last byte (Latencies), and sends one on
	// the held connection half an interval after each (HeldLatencies):
	// through the PEP a new connection's SYN is answered at once, its
	// stream opens with the request's bytes, and the far side dials the
	// server, which a request on a held connection does not wait for.
	RequestNewConn bool
	Interval       time.Duration  // timeline resolution; default 1s
	Progress       func(Progress) // called about every 250ms from another goroutine; may be nil
}

// Progress is a snapshot of a running download.
type Progress struct {
	Elapsed, Duration time.Duration
	Bytes             int64
	Rate              float64 // bytes per second over about the last second
}

// Point is one timeline sample: the download's rate over the interval
// ending at T seconds after the start.
type Point struct {
	T    float64 `json:"t_s"`
	Rate float64 `json:"bytes_per_s"`
}

// Sample is the download's byte count at T after the start; Transfer
// keeps one every sampleEvery for the metrics that need finer time than
// the timeline (time to rate, recovery after an outage).
type Sample struct {
	T     time.Duration
	Bytes int64
}

// sampleEvery is the resolution of Transfer.Samples.
const sampleEvery = 100 * time.Millisecond

// Transfer is the outcome of a measured download.
type Transfer struct {
	Bytes    int64         // payload bytes received within the window
	Window   time.Duration // the window actually measured (shorter if cancelled)
	TTFB     time.Duration // from the start of the dial to the first byte; 0 = none arrived
	Timeline []Point
	Samples  []Sample // cumulative bytes every sampleEvery, from {0, 0} to the end of the window
	Err      error    // what ended the download early, if anything

	Latencies []time.Duration // request/response times
	// HeldLatencies: with RequestNewConn, the times of the requests on
	// the held connection between the new connections' ones.
	HeldLatencies []time.Duration
	Unanswered    int   // a probe request unanswered at the end, after waiting longer than any answered one
	ProbeBytes    int64 // probe payload delivered, both ways
	ProbeErr      error
}

// Goodput is the download's payload rate in bytes per second.
func (t *Transfer) Goodput() float64 {
	if t.Window <= 0 {
		return 0
	}
	return float64(t.Bytes) / t.Window.Seconds()
}

// Measure runs one download of cfg.Duration and returns what it saw.
// Cancelling ctx ends it early (Err says so).
func Measure(ctx context.Context, cfg TransferConfig) *Transfer {
	if cfg.Interval <= 0 {
		// A second smooths the bursts in-order delivery makes after a
		// repaired loss, and still shows slow start on a 600 ms link.
		cfg.Interval = time.Second
	}
	res := &Transfer{}
	start := time.Now()
	end := start.Add(cfg.Duration)
	wctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()

	var received atomic.Int64
	firstByte := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // timeline and progress
		defer close(sampled)
		tick := time.NewTicker(sampleEvery)
		defer tick.Stop()
		lastT, lastB := time.Duration(0), int64(0)
		lastProgress := time.Duration(0)
		res.Samples = []Sample{{}}
		// The progress rate is over the last second: a quarter second
		// shows the bursts of in-order delivery after a repaired loss.
		type sample struct {
			t time.Duration
			b int64
		}
		recent := []sample{{}}
		point := func(now time.Duration, b int64) {
			res.Timeline = append(res.Timeline, Point{T: now.Seconds(), Rate: float64(b-lastB) / (now - lastT).Seconds()})
			lastT, lastB = now, b
		}
		for {
			select {
			case <-wctx.Done():
				now := min(time.Since(start), cfg.Duration)
				b := received.Load()
				if now-lastT >= cfg.Interval/5 {
					point(now, b)
				}
				res.Samples = append(res.Samples, Sample{T: now, Bytes: b})
				return
			case <-tick.C:
			}
			now, b := time.Since(start), received.Load()
			if now >= cfg.Duration {
				continue // the window is over: the final point is the Done branch's
			}
			res.Samples = append(res.Samples, Sample{T: now, Bytes: b})
			if now >= lastT+cfg.Interval-tickJitter {
				point(now, b)
			}
			if now-lastProgress < 250*time.Millisecond-tickJitter {
				continue
			}
			lastProgress = now
			if cfg.Progress != nil {
				rate := float64(b-recent[0].b) / (now - recent[0].t).Seconds()
				cfg.Progress(Progress{Elapsed: now, Duration: cfg.Duration, Bytes: b, Rate: rate})
			}
			recent = append(recent, sample{now, b})
			for len(recent) > 1 && now-recent[0].t > time.Second {
				recent = recent[1:]
			}
		}
	}()

	var probe sync.WaitGroup
	if cfg.RequestEvery > 0 {
		probe.Add(1)
		go func() {
			defer probe.Done()
			select {
			case <-firstByte:
			case <-wctx.Done():
				return
			}
			if cfg.RequestNewConn {
				runNewConnProbe(wctx, cfg, end, res)
				return
			}
			runProbe(wctx, cfg, end, res)
		}()
	}

	res.Err = download(wctx, cfg.Dial, start, end, &received, firstByte, &res.TTFB)
	cancel()
	probe.Wait()
	<-sampled
	res.Bytes = received.Load()
	// A download that died early still had the whole window to deliver
	// in; only an interrupted one is judged on the time it had.
	res.Window = cfg.Duration
	if ctx.Err() != nil {
		res.Window = min(time.Since(start), cfg.Duration)
		res.Err = fmt.Errorf("interrupted after %v: %w", res.Window.Round(time.Millisecond), ctx.Err())
	}
	return res
}

// download reads the bulk connection until the window ends.
func download(ctx context.Context, dial Dialer, start, end time.Time, received *atomic.Int64, firstByte chan struct{}, ttfb *time.Duration) error {
	c, err := dial(ctx)
	if err != nil {
		return fmt.Errorf("dialing the download: %w", err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) }) // unblock at once
	defer stop()
	c.SetDeadline(end)
	if _, err := io.WriteString(c, request{mode: modeBulk}.String()); err != nil {
		return windowEnd(fmt.Errorf("sending the download request: %w", err), end)
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if received.Load() == 0 {
				*ttfb = time.Since(start)
				close(firstByte)
			}
			received.Add(int64(n))
		}
		if err != nil {
			return windowEnd(fmt.Errorf("download: %w", err), end)
		}
	}
}

// windowEnd turns the deadline at the end of the window into success.
func windowEnd(err error, end time.Time) error {
	if errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(end.Add(-10*time.Millisecond)) {
		return nil
	}
	return err
}

// dialEcho opens a connection asking the server to echo size-byte
// messages until end (or until ctx ends); stop closes it. An error of the
// request's write is the window's end's (windowEnd) when it came then.
func dialEcho(ctx context.Context, cfg TransferConfig, end time.Time, size int) (net.Conn, func(), error) {
	c, err := cfg.Dial(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("dialing: %w", err)
	}
	unhook := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	stop := func() { unhook(); c.Close() }
	c.SetDeadline(end)
	if _, err := io.WriteString(c, request{mode: modeEcho, size: size}.String()); err != nil {
		stop()
		return nil, nil, windowEnd(fmt.Errorf("request: %w", err), end)
	}
	return c, stop, nil
}

// runProbe times small echoes on a second connection until end.
func runProbe(ctx context.Context, cfg TransferConfig, end time.Time, res *Transfer) {
	size := cfg.RequestSize
	if size <= 0 {
		size = 100
	}
	c, stop, err := dialEcho(ctx, cfg, end, size)
	if err != nil {
		res.ProbeErr = fmt.Errorf("probe: %w", err)
		return
	}
	defer stop()
	msg := make([]byte, size)
	reply := make([]byte, size)
	tick := time.NewTicker(cfg.RequestEvery)
	defer tick.Stop()
	for {
		sent := time.Now()
		if _, err := c.Write(msg); err != nil {
			res.ProbeErr = windowEnd(fmt.Errorf("probe write: %w", err), end)
			return
		}
		if _, err := io.ReadFull(c, reply); err != nil {
			err = windowEnd(fmt.Errorf("probe read: %w", err), end)
			// The window closed while it waited. A request sent just
			// before the end says nothing; one that waited longer than
			// every answered one is a tail the percentiles miss.
			if waited := time.Since(sent); err == nil && (len(res.Latencies) == 0 || waited > slices.Max(res.Latencies)) {
				res.Unanswered++
			}
			res.ProbeErr = err
			return
		}
		res.Latencies = append(res.Latencies, time.Since(sent))
		res.ProbeBytes += int64(2 * size)
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// runNewConnProbe times a request on a new connection every
// cfg.RequestEvery until end (res.Latencies), and one on a held
// connection half an interval after each (res.HeldLatencies), so the two
// compare in one run: what a new connection adds is the far side's dial
// and the stream's opening.
func runNewConnProbe(ctx context.Context, cfg TransferConfig, end time.Time, res *Transfer) {
	size := cfg.RequestSize
	if size <= 0 {
		size = 100
	}
	held, stop, err := dialEcho(ctx, cfg, end, size)
	if err != nil {
		res.ProbeErr = fmt.Errorf("held probe: %w", err)
		return
	}
	defer stop()
	msg := make([]byte, size)
	reply := make([]byte, size)
	wait := func(until time.Time) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Until(until)):
			return true
		}
	}
	for {
		sent := time.Now()
		conn, err := echoOnce(ctx, cfg.Dial, size)
		if err != nil {
			// The window closed while it waited: a tail the
			// percentiles miss if it waited longer than every
			// answered one.
			if waited := time.Since(sent); ctx.Err() != nil && (len(res.Latencies) == 0 || waited > slices.Max(res.Latencies)) {
				res.Unanswered++
			}
			if ctx.Err() == nil {
				res.ProbeErr = fmt.Errorf("new-connection probe: %w", err)
			}
			return
		}
		res.Latencies = append(res.Latencies, time.Since(sent))
		res.ProbeBytes += int64(2 * size)
		abort(conn)
		if !wait(sent.Add(cfg.RequestEvery / 2)) {
			return
		}
		heldSent := time.Now()
		if _, err := held.Write(msg); err != nil {
			res.ProbeErr = windowEnd(fmt.Errorf("held probe write: %w", err), end)
			return
		}
		if _, err := io.ReadFull(held, reply); err != nil {
			res.ProbeErr = windowEnd(fmt.Errorf("held probe read: %w", err), end)
			return
		}
		res.HeldLatencies = append(res.HeldLatencies, time.Since(heldSent))
		res.ProbeBytes += int64(2 * size)
		if !wait(sent.Add(cfg.RequestEvery)) {
			return
		}
	}
}
