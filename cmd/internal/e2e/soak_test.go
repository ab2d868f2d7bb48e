package e2e

// The soak. Two endpoints (the real binary) over an emulated
// lossy, reordering link that goes down for 20 s every 2 minutes; 200
// concurrent TCP flows of mixed sizes both ways, each checked by SHA-256
// in both directions; a UDP echo and ping all along; site B killed and
// restarted once; a SIGHUP to both endpoints every sixth of the run. It
// checks that every flow delivers every byte, that only flows caught by
// the restart fail and then with a reset (never a hang), that goroutines
// and resident memory stay flat over the last two thirds, and that the
// endpoints log no warning or error.
//
// It is too long for the default suite and runs on request:
// SCPSVPN_SOAK=3m runs the short variant (test.sh does, beside its fuzz
// runs), SCPSVPN_SOAK=30m the long one
// (go test -timeout 45m -run TestSoak ./cmd/internal/e2e/).

import (
	"bufio"
	"context"
	"crypto/sha256"
	be "encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"scpsvpn/cmd/internal/linkemu"
	"scpsvpn/cmd/internal/testbed"
)

const (
	soakWorkers  = 200
	soakOutage   = 20 * time.Second
	soakEvery    = 2 * time.Minute
	soakIdle     = 60 * time.Second // a flow making no progress this long hangs
	soakMetrics  = "127.0.0.1:9477"
	soakChunk    = 32 << 10
	soakDataSeed = 0x5ca1ab1e
)

// soakDuration is the run's length, SCPSVPN_SOAK; without it the test is
// skipped (it holds the machine for minutes).
func soakDuration(t *testing.T) time.Duration {
	v := os.Getenv("SCPSVPN_SOAK")
	if v == "" {
		t.Skip("the soak runs for minutes: set SCPSVPN_SOAK=3m (or 30m) to run it")
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 3*time.Minute {
		t.Fatalf("SCPSVPN_SOAK=%q: want a duration of at least 3m", v)
	}
	return d
}

// soakSizes draws a flow's sizes: mostly small requests and answers, some
// pages, a few bulk downloads; about 60% of the link with 200 flows.
func soakSizes(r *rand.Rand) (up, down int) {
	up = 1 + r.IntN(16<<10)
	if r.Float64() < 0.10 {
		up = 64<<10 + r.IntN(192<<10)
	}
	switch p := r.Float64(); {
	case p < 0.84:
		down = 1 + r.IntN(16<<10)
	case p < 0.99:
		down = 64<<10 + r.IntN(448<<10)
	default:
		down = 1<<20 + r.IntN(1<<20)
	}
	return up, down
}

// soakStream writes n bytes of the deterministic stream of seed to w and
// returns their SHA-256.
func soakStream(w io.Writer, seed uint64, n int, before func()) ([32]byte, error) {
	src := rand.NewChaCha8([32]byte{0: byte(seed), 1: byte(seed >> 8), 2: byte(seed >> 16), 3: byte(seed >> 24),
		4: byte(seed >> 32), 5: byte(seed >> 40), 6: byte(seed >> 48), 7: byte(seed >> 56)})
	h := sha256.New()
	buf := make([]byte, soakChunk)
	for n > 0 {
		b := buf[:min(n, len(buf))]
		src.Read(b)
		h.Write(b)
		if w != nil {
			if before != nil {
				before()
			}
			if _, err := w.Write(b); err != nil {
				return [32]byte{}, err
			}
		}
		n -= len(b)
	}
	return [32]byte(h.Sum(nil)), nil
}

// soakRead reads exactly n bytes from c, extending its read deadline on
// every chunk, and returns their SHA-256.
func soakRead(c net.Conn, n int) ([32]byte, error) {
	h := sha256.New()
	buf := make([]byte, soakChunk)
	for n > 0 {
		c.SetReadDeadline(time.Now().Add(soakIdle))
		k, err := c.Read(buf[:min(n, len(buf))])
		h.Write(buf[:k])
		n -= k
		if err != nil && n > 0 {
			return [32]byte{}, err
		}
	}
	return [32]byte(h.Sum(nil)), nil
}

// soakServe answers one soak flow: a header (bytes up, bytes down, seed),
// the client's bytes, then the SHA-256 of what arrived and the reply.
func soakServe(c net.Conn) {
	defer c.Close()
	var hdr [24]byte
	c.SetReadDeadline(time.Now().Add(soakIdle))
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return
	}
	up, down, seed := be.BigEndian.Uint64(hdr[:]), be.BigEndian.Uint64(hdr[8:]), be.BigEndian.Uint64(hdr[16:])
	sum, err := soakRead(c, int(up))
	if err != nil {
		return
	}
	c.SetWriteDeadline(time.Now().Add(soakIdle))
	if _, err := c.Write(sum[:]); err != nil {
		return
	}
	soakStream(c, ^seed, int(down), func() { c.SetWriteDeadline(time.Now().Add(soakIdle)) })
}

// soakFlow is one finished flow.
type soakFlow struct {
	start, end time.Time
	up, down   int
	err        error
	hang       bool // it failed by making no progress for soakIdle
	corrupt    bool // a SHA-256 did not match
}

// soakClient runs one flow from side to the server at addr.
func soakClient(ctx context.Context, tb *testbed.Testbed, side testbed.Side, addr string, up, down int, seed uint64) soakFlow {
	f := soakFlow{start: time.Now(), up: up, down: down}
	defer func() { f.end = time.Now() }()
	fail := func(err error) soakFlow {
		var ne net.Error
		f.err, f.hang, f.end = err, errors.As(err, &ne) && ne.Timeout(), time.Now()
		return f
	}
	dctx, cancel := context.WithTimeout(ctx, soakIdle)
	c, err := tb.DialContext(dctx, side, "tcp", addr)
	cancel()
	if err != nil {
		return fail(fmt.Errorf("dial: %w", err))
	}
	defer c.Close()
	var hdr [24]byte
	be.BigEndian.PutUint64(hdr[:], uint64(up))
	be.BigEndian.PutUint64(hdr[8:], uint64(down))
	be.BigEndian.PutUint64(hdr[16:], seed)
	c.SetWriteDeadline(time.Now().Add(soakIdle))
	if _, err := c.Write(hdr[:]); err != nil {
		return fail(fmt.Errorf("write: %w", err))
	}
	sent, err := soakStream(c, seed, up, func() { c.SetWriteDeadline(time.Now().Add(soakIdle)) })
	if err != nil {
		return fail(fmt.Errorf("write: %w", err))
	}
	if err := closeWrite(c); err != nil {
		return fail(fmt.Errorf("close write: %w", err))
	}
	var got [32]byte
	c.SetReadDeadline(time.Now().Add(soakIdle))
	if _, err := io.ReadFull(c, got[:]); err != nil {
		return fail(fmt.Errorf("read the server's digest: %w", err))
	}
	if got != sent {
		f.corrupt = true
		return fail(fmt.Errorf("the server read %d bytes with SHA-256 %x, sent %x", up, got[:6], sent[:6]))
	}
	want, _ := soakStream(nil, ^seed, down, nil)
	recv, err := soakRead(c, down)
	if err != nil {
		return fail(fmt.Errorf("read the reply: %w", err))
	}
	if recv != want {
		f.corrupt = true
		return fail(fmt.Errorf("the reply of %d bytes has SHA-256 %x, want %x", down, recv[:6], want[:6]))
	}
	c.SetReadDeadline(time.Now().Add(soakIdle))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		return fail(fmt.Errorf("after the reply: %d bytes, %v; want EOF", n, err))
	}
	return f
}

// soakSample is one reading of an endpoint's metrics.
type soakSample struct {
	at         time.Time
	goroutines float64
	rss        float64
}

var metricLine = regexp.MustCompile(`(?m)^(go_goroutines|process_resident_memory_bytes) (\S+)$`)

// scrapeEndpoint reads go_goroutines and process_resident_memory_bytes
// from side's metrics endpoint.
func scrapeEndpoint(ctx context.Context, tb *testbed.Testbed, side testbed.Side) (soakSample, error) {
	body, err := fetchMetrics(ctx, tb, side, soakMetrics)
	if err != nil {
		return soakSample{}, err
	}
	s := soakSample{at: time.Now()}
	for _, m := range metricLine.FindAllStringSubmatch(body, -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return soakSample{}, err
		}
		if m[1] == "go_goroutines" {
			s.goroutines = v
		} else {
			s.rss = v
		}
	}
	if s.goroutines == 0 || s.rss == 0 {
		return soakSample{}, fmt.Errorf("metrics without go_goroutines or process_resident_memory_bytes:\n%.500s", body)
	}
	return s, nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// flatness compares the medians of the first and the last quarter of the
// samples taken in [from, to].
func flatness(samples []soakSample, from, to time.Time, val func(soakSample) float64) (early, late, peak float64) {
	q := to.Sub(from) / 4
	var e, l []float64
	for _, s := range samples {
		if s.at.Before(from) || s.at.After(to) {
			continue
		}
		v := val(s)
		peak = max(peak, v)
		if s.at.Before(from.Add(q)) {
			e = append(e, v)
		}
		if s.at.After(to.Add(-q)) {
			l = append(l, v)
		}
	}
	return median(e), median(l), peak
}

// udpProber sends a numbered datagram every 100 ms to addr from side and
// counts the upper-cased echoes, until ctx ends.
func udpProber(ctx context.Context, t *testing.T, tb *testbed.Testbed, side testbed.Side, addr string) (sent, answered *atomic.Int64) {
	sent, answered = &atomic.Int64{}, &atomic.Int64{}
	c, err := tb.Dial(side, "udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		<-ctx.Done()
		c.Close()
	}()
	go func() {
		buf := make([]byte, 64)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			if strings.HasPrefix(string(buf[:n]), "SOAK ") {
				answered.Add(1)
			}
		}
	}()
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if _, err := fmt.Fprintf(c, "soak %d", i); err == nil {
				sent.Add(1)
			}
		}
	}()
	return sent, answered
}

var pingSummary = regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`)

func TestSoak(t *testing.T) {
	dur := soakDuration(t)
	dir := func(loss float64) linkemu.Dir {
		return linkemu.Dir{Rate: 20_000_000, Delay: 50 * time.Millisecond, Loss: loss,
			Reorder: linkemu.Reorder{P: 0.01, Delay: 10 * time.Millisecond}}
	}
	link := "rtt = \"100ms\"\nup = \"20Mbit\"\ndown = \"20Mbit\"\n"
	metrics := fmt.Sprintf("metrics = %q\n", soakMetrics)
	tb := twoSites(t, testbed.Config{
		Kind: testbed.Emulated,
		Link: linkemu.Options{Fwd: dir(0.01), Ret: dir(0.005),
			OutageEvery: linkemu.Periodic{Every: soakEvery, Duration: soakOutage}, Seed: 1},
		PeerLinkA: link, PeerLinkB: link,
		InterfaceA: metrics, InterfaceB: metrics,
		Endpoints: testbed.Endpoints{
			LogLevel: "info",
		},
	})
	emu := tb.Emulator()
	start := time.Now()
	end := start.Add(dur)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Servers at both sites (the test's own kernel sockets).
	addrs := map[testbed.Side]string{}
	for _, side := range []testbed.Side{testbed.A, testbed.B} {
		ln, err := tb.Listen(side, "tcp", hostPort(tb.Site(side).TUN4, 0))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go serveEach(ln, soakServe)
		addrs[side] = ln.Addr().String()
	}
	pc, err := tb.ListenPacket(testbed.B, "udp", hostPort(tb.B.TUN4, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go udpEcho(pc)
	udpCtx, udpStop := context.WithDeadline(ctx, end)
	defer udpStop()
	udpSent, udpAnswered := udpProber(udpCtx, t, tb, testbed.A, pc.LocalAddr().String())
	ping := tb.Command(testbed.A, "ping", "-q", "-i", "0.5", "-w", strconv.Itoa(int(dur/time.Second)), tb.B.TUN4.String())
	var pingOut strings.Builder
	ping.Stdout = &pingOut
	if err := ping.Start(); err != nil {
		t.Fatal(err)
	}
	pingDone := make(chan error, 1)
	go func() { pingDone <- ping.Wait() }()
	defer ping.Process.Kill()

	// The flows.
	var mu sync.Mutex
	var flows []soakFlow
	var wg sync.WaitGroup
	for i := range soakWorkers {
		side, to := testbed.A, testbed.B
		if i%2 == 1 {
			side, to = testbed.B, testbed.A
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(soakDataSeed, uint64(i)))
			for n := 0; time.Now().Before(end); n++ {
				time.Sleep(time.Duration(r.Int64N(int64(10 * time.Second))))
				up, down := soakSizes(r)
				f := soakClient(ctx, tb, side, addrs[to], up, down, uint64(i)<<32|uint64(n))
				mu.Lock()
				flows = append(flows, f)
				mu.Unlock()
			}
		}()
	}

	// The endpoints' metrics, every 5 s.
	samples := map[testbed.Side]*[]soakSample{testbed.A: {}, testbed.B: {}}
	var scrapeErrs atomic.Int64
	scrapeDone := make(chan struct{})
	go func() {
		defer close(scrapeDone)
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for time.Now().Before(end) {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for side, ss := range samples {
				if s, err := scrapeEndpoint(ctx, tb, side); err == nil {
					mu.Lock()
					*ss = append(*ss, s)
					mu.Unlock()
				} else if tb.PID(side) != 0 {
					scrapeErrs.Add(1)
				}
			}
		}
	}()

	// The events: B's restart at a sixth of the run, away from the
	// outages; a SIGHUP to both endpoints every sixth, a twelfth in.
	restartAt := start.Add(dur / 6)
	if restartAt.Sub(start)%soakEvery < soakOutage+10*time.Second {
		restartAt = restartAt.Add(soakOutage + 10*time.Second)
	}
	type event struct {
		at time.Time
		do func()
	}
	var killed, recovered time.Time
	var hups int
	events := []event{{restartAt, func() {
		killed = time.Now()
		if _, err := tb.StopEndpoint(testbed.B, syscall.SIGKILL); err != nil {
			t.Error(err)
		}
		if err := tb.StartEndpoint(testbed.B); err != nil {
			t.Errorf("restart B: %v", err)
			return
		}
		waitLog(t, tb, testbed.A, "peer restarted: resetting its streams", 30*time.Second)
		recovered = time.Now()
	}}}
	for at := start.Add(dur / 12); at.Before(end); at = at.Add(dur / 6) {
		events = append(events, event{at, func() {
			for _, side := range []testbed.Side{testbed.A, testbed.B} {
				if pid := tb.PID(side); pid != 0 && syscall.Kill(pid, syscall.SIGHUP) == nil {
					hups++
				}
			}
		}})
	}
	slices.SortFunc(events, func(a, b event) int { return a.at.Compare(b.at) })
	for _, ev := range events {
		time.Sleep(time.Until(ev.at))
		ev.do()
	}
	time.Sleep(time.Until(end))
	<-scrapeDone
	// Workers finish the flow they are in (it may wait out an outage).
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		mu.Lock()
		n := len(flows)
		mu.Unlock()
		cancel()
		t.Fatalf("flows still running 3 minutes after the end (%d finished)", n)
	}
	udpStop()
	select {
	case <-pingDone:
	case <-time.After(10 * time.Second):
		t.Error("ping did not end")
	}

	// Flows: every byte checked; failures only across the restart, and
	// only resets.
	var ok, expected, bytes int
	var failed []string
	grace := recovered.Add(10 * time.Second)
	for _, f := range flows {
		switch {
		case f.err == nil:
			ok++
			bytes += f.up + f.down
		case !f.corrupt && !f.hang && !killed.IsZero() && f.start.Before(grace) && f.end.After(killed):
			expected++
		default:
			failed = append(failed, fmt.Sprintf("%s..%s (%d up, %d down): %v",
				f.start.Sub(start).Round(time.Millisecond), f.end.Sub(start).Round(time.Millisecond), f.up, f.down, f.err))
		}
	}
	t.Logf("%v run: %d flows checked (SHA-256 both ways, %d MB), %d ended by the restart (reset), %d failed",
		dur, ok, bytes/1e6, expected, len(failed))
	for i, s := range failed {
		if i == 20 {
			t.Errorf("... and %d more", len(failed)-20)
			break
		}
		t.Errorf("flow %s", s)
	}
	if ok < soakWorkers {
		t.Errorf("only %d flows completed", ok)
	}
	if killed.IsZero() || recovered.IsZero() {
		t.Error("B was not restarted")
	} else {
		t.Logf("B killed at %v; A reset the old association's flows %v later", killed.Sub(start).Round(time.Second), recovered.Sub(killed).Round(time.Millisecond))
	}

	// UDP and ping carried on, outages and restart aside.
	us, ua := udpSent.Load(), udpAnswered.Load()
	t.Logf("UDP: %d of %d echoes answered (%.0f%%)", ua, us, 100*float64(ua)/float64(max(us, 1)))
	if us == 0 || float64(ua) < 0.6*float64(us) {
		t.Errorf("UDP: %d of %d answered", ua, us)
	}
	if m := pingSummary.FindStringSubmatch(pingOut.String()); m == nil {
		t.Errorf("no ping summary:\n%s", pingOut.String())
	} else {
		tx, _ := strconv.Atoi(m[1])
		rx, _ := strconv.Atoi(m[2])
		t.Logf("ping: %d of %d answered (%.0f%%)", rx, tx, 100*float64(rx)/float64(max(tx, 1)))
		if tx == 0 || float64(rx) < 0.6*float64(tx) {
			t.Errorf("ping: %d of %d answered", rx, tx)
		}
	}

	// Goroutines and RSS flat over the last two thirds of the run.
	from := start.Add(dur / 3)
	for _, side := range []testbed.Side{testbed.A, testbed.B} {
		ss := *samples[side]
		g0, g1, gmax := flatness(ss, from, end, func(s soakSample) float64 { return s.goroutines })
		r0, r1, rmax := flatness(ss, from, end, func(s soakSample) float64 { return s.rss })
		t.Logf("%s from %v to %v: goroutines %.0f -> %.0f (peak %.0f), RSS %.1f -> %.1f MiB (peak %.1f)", side,
			from.Sub(start).Round(time.Second), end.Sub(start).Round(time.Second), g0, g1, gmax, r0/(1<<20), r1/(1<<20), rmax/(1<<20))
		if g0 == 0 || r0 == 0 {
			t.Errorf("%s: no metrics samples (%d in all)", side, len(ss))
			continue
		}
		if g1 > g0*1.25+50 {
			t.Errorf("%s: goroutines grew from %.0f to %.0f", side, g0, g1)
		}
		if r1 > r0*1.25+32<<20 {
			t.Errorf("%s: RSS grew from %.1f to %.1f MiB", side, r0/(1<<20), r1/(1<<20))
		}
	}
	if n := scrapeErrs.Load(); n > 2 {
		t.Errorf("%d metrics scrapes of running endpoints failed", n)
	}
	t.Logf("%d SIGHUPs; link: %+v", hups, emu.Counters())

	// Nothing unexpected in the logs; both endpoints stop cleanly.
	for _, side := range []testbed.Side{testbed.A, testbed.B} {
		if code, err := tb.StopEndpoint(side, syscall.SIGTERM); err != nil || code != 0 {
			t.Errorf("stop %s: exit %d, %v", side, code, err)
		}
		log := logOf(tb, side)
		sc := bufio.NewScanner(strings.NewReader(log))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var bad []string
		for sc.Scan() {
			if l := sc.Text(); strings.Contains(l, " level=ERROR ") || strings.Contains(l, " level=WARN ") {
				bad = append(bad, l)
			}
		}
		if len(bad) > 0 {
			t.Errorf("%s logged %d warnings or errors, first:\n%s", side, len(bad), strings.Join(bad[:min(10, len(bad))], "\n"))
		}
		if reloads := strings.Count(log, "msg=\"reload done\""); reloads == 0 {
			t.Errorf("%s: no reload applied", side)
		}
		if !strings.Contains(log, "leftover_goroutines=0") {
			t.Errorf("%s: goroutines outlived the endpoint:\n%s", side, tb.LogTail(side, 3))
		}
	}
}
