package bench

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// loopbackFlows serves the benchmark protocol on loopback and dials it
// through a dialPool in the current namespace.
func loopbackFlows(t *testing.T, workers int) Dialer {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := Serve(ln, nil, nil)
	t.Cleanup(func() { srv.Close() })
	pool := newDialPool("", ln.Addr().String(), workers, net.Dialer{})
	t.Cleanup(pool.Close)
	return pool.Dial
}

// TestFlowPhasesLoopback runs the opens and downloads phases against a
// loopback server: every flow completes, every byte arrives, and the
// figures are what the completions say.
func TestFlowPhasesLoopback(t *testing.T) {
	dial := loopbackFlows(t, 8)
	ctx := context.Background()
	o := measureOpens(ctx, dial, 50)
	if o.Done != 50 || o.Err != "" || o.PerSecond <= 0 || o.FirstMs > o.LastMs {
		t.Errorf("opens: %+v", o)
	}
	// A condition of 10 Mbit/s: loopback delivers far faster, so the
	// downloads together read above the link's limit.
	c, _ := conditionByName("GEO-10/2")
	d := measureDownloads(ctx, dial, 30, 50_000, c)
	if d.Done != 30 || d.Bytes != 30*50_000 || d.Err != "" {
		t.Fatalf("downloads: %+v", d)
	}
	if d.Jain <= 0 || d.Jain > 1 || d.Together <= 0 || d.P50Ms > d.MaxMs || d.FirstByteMs > d.LastByteMs {
		t.Errorf("downloads: %+v", d)
	}
}

// TestFlowPhasesCountFailures: flows that cannot connect are counted
// and named, not hidden in the figures.
func TestFlowPhasesCountFailures(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: every dial is refused
	pool := newDialPool("", addr, 4, net.Dialer{})
	defer pool.Close()
	c, _ := conditionByName("GEO-10/2")
	d := measureDownloads(context.Background(), pool.Dial, 5, 1000, c)
	if d.Done != 0 || d.Bytes != 0 || !strings.HasPrefix(d.Err, "5 flows failed") {
		t.Errorf("downloads to nowhere: %+v", d)
	}
	o := measureOpens(context.Background(), pool.Dial, 5)
	if o.Done != 0 || o.PerSecond != 0 || !strings.HasPrefix(o.Err, "5 flows failed") {
		t.Errorf("opens to nowhere: %+v", o)
	}
}

// TestDialPoolHonoursContext: a dial waiting for a free worker gives up
// when its context ends.
func TestDialPoolHonoursContext(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pool := newDialPool("", ln.Addr().String(), 0, net.Dialer{}) // no worker ever takes a job
	defer pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := pool.Dial(ctx); err == nil {
		t.Fatal("a dial without workers succeeded")
	}
}

func TestFlowsSpecCheck(t *testing.T) {
	if err := DefaultFlows.check(); err != nil {
		t.Errorf("the default: %v", err)
	}
	for _, s := range []FlowsSpec{
		{Flows: 0, DownloadBytes: 30_000, Idle: 1, Opens: 2},
		{Flows: 1, DownloadBytes: 999, Idle: 1, Opens: 2},
		{Flows: 1, DownloadBytes: 30_000, Idle: 0, Opens: 2},
		{Flows: 1, DownloadBytes: 30_000, Idle: 1, Opens: 1},
	} {
		if err := s.check(); err == nil || !strings.HasPrefix(err.Error(), "--") {
			t.Errorf("%+v: %v, want an error naming the flag", s, err)
		}
	}
	// The idle connections' client ends, within the usual hard limit
	// of 20,000 that an unprivileged container may not raise.
	if f := DefaultFlows.Files(); f < 10_000 || f > 20_000 {
		t.Errorf("%d files for 10,000 idle connections", f)
	}
}
