package bench

// Tests of the traffic over loopback (no root): the server's requests, a
// measured download with its probe, failures and interruption, and the
// per-socket congestion control.

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func loopbackServer(t *testing.T, accepted func(net.Conn) error) (*Server, Dialer) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := Serve(ln, accepted, nil)
	t.Cleanup(func() { srv.Close() })
	addr := ln.Addr().String()
	return srv, func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp4", addr)
	}
}

func TestServerEcho(t *testing.T) {
	_, dial := loopbackServer(t, nil)
	c, err := dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "echo 5\nhello")
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("echo %q, %v", buf, err)
	}
	io.WriteString(c, "world")
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "world" {
		t.Fatalf("second echo %q, %v", buf, err)
	}
}

func TestServerDropsBadRequest(t *testing.T) {
	srv, dial := loopbackServer(t, nil)
	c, err := dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET / HTTP/1.0\r\n\r\n")
	if n, err := c.Read(make([]byte, 10)); err == nil {
		t.Fatalf("the server answered a bad request with %d bytes", n)
	}
	if srv.Served() != 0 {
		t.Errorf("served %d", srv.Served())
	}
}

func TestServerCloseEndsEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	srv, dial := loopbackServer(t, nil)
	var conns []net.Conn
	for _, req := range []string{"bulk\n", "echo 10\n", ""} {
		c, err := dial(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, req)
		conns = append(conns, c)
	}
	time.Sleep(50 * time.Millisecond)
	done := make(chan struct{})
	go func() { srv.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hangs with connections open")
	}
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil && !strings.Contains(err.Error(), "reset") {
			t.Errorf("after Close: %v", err)
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines left behind", n-before)
	}
}

func TestMeasureLoopback(t *testing.T) {
	_, dial := loopbackServer(t, nil)
	var updates atomic.Int32
	tr := Measure(context.Background(), TransferConfig{
		Dial: dial, Duration: 1500 * time.Millisecond,
		RequestEvery: 100 * time.Millisecond, RequestSize: 100,
		Interval: 250 * time.Millisecond,
		Progress: func(p Progress) {
			updates.Add(1)
			if p.Duration != 1500*time.Millisecond || p.Elapsed <= 0 {
				t.Errorf("progress %+v", p)
			}
		},
	})
	if tr.Err != nil {
		t.Fatalf("download: %v", tr.Err)
	}
	// How much loopback carries, how soon the first byte comes and how
	// late a probe's answer is are the machine's (a loaded one's timers
	// fire late); what Measure does with them is checked here.
	if tr.Bytes <= 0 {
		t.Errorf("%d bytes over loopback", tr.Bytes)
	}
	if tr.TTFB <= 0 || tr.TTFB > tr.Window {
		t.Errorf("TTFB %v", tr.TTFB)
	}
	if tr.Window != 1500*time.Millisecond {
		t.Errorf("window %v", tr.Window)
	}
	if g := tr.Goodput(); g != float64(tr.Bytes)/1.5 {
		t.Errorf("goodput %v for %d bytes in 1.5s", g, tr.Bytes)
	}
	// The probe ran again and again after the first byte, never more
	// often than every 100 ms.
	if n := len(tr.Latencies); n < 2 || n > 16 {
		t.Errorf("%d probe samples in 1.5s at 100ms", n)
	}
	if tr.ProbeBytes != int64(200*len(tr.Latencies)) {
		t.Errorf("probe bytes %d for %d samples", tr.ProbeBytes, len(tr.Latencies))
	}
	for _, l := range tr.Latencies {
		if l <= 0 || l > tr.Window {
			t.Errorf("probe latency %v on loopback", l)
		}
	}
	if n := len(tr.Timeline); n < 2 || n > 7 {
		t.Errorf("%d timeline points at 250ms over 1.5s: %+v", n, tr.Timeline)
	}
	var sum float64
	prev := 0.0
	for _, p := range tr.Timeline {
		if p.T <= prev || p.T > 1.5+1e-9 {
			t.Errorf("timeline times not increasing within the window: %+v", tr.Timeline)
		}
		sum += p.Rate * (p.T - prev)
		prev = p.T
	}
	// The timeline integrates to the bytes received (within what arrived
	// between the last sample and the end).
	if sum < float64(tr.Bytes)*0.8 || sum > float64(tr.Bytes)*1.01 {
		t.Errorf("timeline integrates to %.0f bytes, received %d", sum, tr.Bytes)
	}
	if updates.Load() < 2 {
		t.Errorf("%d progress updates", updates.Load())
	}
}

func TestMeasureDialFails(t *testing.T) {
	boom := errors.New("no route")
	tr := Measure(context.Background(), TransferConfig{
		Dial:     func(context.Context) (net.Conn, error) { return nil, boom },
		Duration: 300 * time.Millisecond, RequestEvery: 50 * time.Millisecond,
	})
	if !errors.Is(tr.Err, boom) || tr.Bytes != 0 || tr.TTFB != 0 || len(tr.Latencies) != 0 {
		t.Errorf("%+v", tr)
	}
}

func TestMeasureServerHangsUp(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := readRequest(c); err != nil { // closing with it unread would reset
			return
		}
		c.Write(make([]byte, 1000))
	}()
	tr := Measure(context.Background(), TransferConfig{
		Dial: func(ctx context.Context) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp4", ln.Addr().String())
		},
		Duration: time.Second,
	})
	if tr.Bytes != 1000 || tr.Err == nil || !errors.Is(tr.Err, io.EOF) {
		t.Errorf("bytes %d err %v", tr.Bytes, tr.Err)
	}
	if tr.Window != time.Second {
		t.Errorf("a download that died early is judged on its whole window, got %v", tr.Window)
	}
}

func TestMeasureInterrupted(t *testing.T) {
	_, dial := loopbackServer(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	const dur = 10 * time.Second
	tr := Measure(ctx, TransferConfig{Dial: dial, Duration: dur, RequestEvery: 50 * time.Millisecond})
	// Stopped by the cancel, not at the end of its 10 s: half of them is
	// a hang guard a loaded machine's late timers stay far inside.
	if el := time.Since(start); el > dur/2 {
		t.Errorf("took %v to stop after the cancel", el)
	}
	if tr.Err == nil || !errors.Is(tr.Err, context.Canceled) {
		t.Errorf("err %v", tr.Err)
	}
	if tr.Window < 250*time.Millisecond || tr.Window > dur/2 {
		t.Errorf("window %v", tr.Window)
	}
}

func TestCongestionPerSocket(t *testing.T) {
	// reno is built into every kernel and allowed without privileges.
	lc := net.ListenConfig{Control: congestionControl("reno")}
	ln, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Value
	srv := Serve(ln, func(c net.Conn) error {
		got, err := getCongestion(c)
		seen.Store(got)
		return err
	}, nil)
	defer srv.Close()
	d := net.Dialer{Control: congestionControl("reno")}
	c, err := d.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := getCongestion(c); err != nil || got != "reno" {
		t.Errorf("client socket: %q, %v", got, err)
	}
	io.WriteString(c, "echo 1\nx")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	io.ReadFull(c, make([]byte, 1))
	if got, _ := seen.Load().(string); got != "reno" {
		t.Errorf("accepted socket inherits %q, want reno", got)
	}
	if err := setCongestion(c, "no-such-algorithm"); err == nil {
		t.Error("setting an unknown algorithm succeeded")
	}
	d = net.Dialer{Control: congestionControl("no-such-algorithm")}
	if _, err := d.Dial("tcp4", ln.Addr().String()); err == nil || !strings.Contains(err.Error(), "TCP_CONGESTION") {
		t.Errorf("dialing with an unknown algorithm: %v", err)
	}
}

// delayedEcho serves the download and answers probe requests after
// delay(i) for the i-th request; a negative delay never answers.
func delayedEcho(t *testing.T, delay func(i int) time.Duration) Dialer {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			go func() {
				req, err := readRequest(c)
				if err != nil {
					return
				}
				if req.mode == modeBulk {
					c.Write([]byte("x")) // one byte starts the probe
					io.Copy(io.Discard, c)
					return
				}
				buf := make([]byte, req.size)
				for i := 0; ; i++ {
					if _, err := io.ReadFull(c, buf); err != nil {
						return
					}
					d := delay(i)
					if d < 0 {
						io.Copy(io.Discard, c)
						return
					}
					time.Sleep(d)
					c.Write(buf)
				}
			}()
		}
	}()
	addr := ln.Addr().String()
	return func(ctx context.Context) (net.Conn, error) { return (&net.Dialer{}).DialContext(ctx, "tcp4", addr) }
}

func TestProbeUnanswered(t *testing.T) {
	// The third request is never answered: a tail the percentiles miss.
	dial := delayedEcho(t, func(i int) time.Duration {
		if i == 2 {
			return -1
		}
		return 10 * time.Millisecond
	})
	tr := Measure(context.Background(), TransferConfig{Dial: dial, Duration: 800 * time.Millisecond, RequestEvery: 50 * time.Millisecond, RequestSize: 10})
	if len(tr.Latencies) != 2 || tr.Unanswered != 1 {
		t.Errorf("latencies %v unanswered %d; want 2 and 1", tr.Latencies, tr.Unanswered)
	}

	// Every request is answered, the first slowly: the one cut off by the
	// end of the window waited less than that and is not counted.
	dial = delayedEcho(t, func(i int) time.Duration {
		if i == 0 {
			return 300 * time.Millisecond
		}
		return 100 * time.Millisecond
	})
	tr = Measure(context.Background(), TransferConfig{Dial: dial, Duration: 900 * time.Millisecond, RequestEvery: 10 * time.Millisecond, RequestSize: 10})
	if len(tr.Latencies) < 3 || tr.Unanswered != 0 {
		t.Errorf("latencies %v unanswered %d; want some and 0", tr.Latencies, tr.Unanswered)
	}
}
