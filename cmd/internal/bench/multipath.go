package bench

// This file owns the two-link conditions and the multipath workload
// (docs/multipath.md): sites joined by two emulated links at once, one
// link emulator per link, site A told of both as [[peer.path]] tables and
// site B learning them. One run, scpsvpn only, measures in turn
//   - the fast path's idle RTT: the request below on a new connection
//     with both links idle, the hosts' share of the RTT included;
//   - bulk and latency: a download of half the duration from B with a
//     request/response probe (--probe-size, default 1 KB here) on a new
//     connection every --probe-every and on a held one between them,
//     their p50 and p95 beside the fast link's RTT and the idle one, each path's share of the data B sent, and the goodput after
//     the start-up allowance (bondWarm) against the sum of both links'
//     payload limits;
//   - parallel (both links primaries): eight downloads at once for half
//     the duration, the same goodput after the allowance;
//   - failover: a download of a fixed size, SHA-256 checked, during which
//     the link the data runs on is cut at A: the longest wait for the
//     next byte after the cut (the time to move on), whether the
//     connection survived and the bytes are equal.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"scpsvpn/cmd/internal/linkemu"
	"scpsvpn/cmd/internal/testbed"
	"scpsvpn/tunnel"
)

// WorkloadMultipath is the two-link workload.
const WorkloadMultipath = "multipath"

// TwoLinkConditions are the conditions of two links side by side; only
// the multipath workload runs them, and "all" does not select them.
var TwoLinkConditions = []Condition{
	{Name: "GEO+CELL", Desc: "a GEO terminal beside a cellular modem", Down: 10_000_000, Up: 2_000_000, RTT: 600 * time.Millisecond,
		LossDown: 0.01, LossUp: 0.01, BDPQueue: true, PeerLossAuto: true,
		Second: &Condition{Name: "CELL", Down: 20_000_000, Up: 5_000_000, RTT: 60 * time.Millisecond, LossDown: 0.01, LossUp: 0.01, BDPQueue: true, PeerLossAuto: true}},
	{Name: "LEO+GEO", Desc: "a LEO dish with handover cuts beside a GEO terminal", Down: 100_000_000, Up: 20_000_000, RTT: 40 * time.Millisecond,
		OutageEvery: linkemu.Periodic{Every: 15 * time.Second, Duration: 50 * time.Millisecond}, BDPQueue: true, PeerLossAuto: true,
		Second: &Condition{Name: "GEO", Down: 10_000_000, Up: 2_000_000, RTT: 600 * time.Millisecond, LossDown: 0.01, LossUp: 0.01, BDPQueue: true, PeerLossAuto: true}},
	{Name: "GEO+CELL-BACKUP", Desc: "a GEO terminal with a metered cellular modem as its backup", Down: 10_000_000, Up: 2_000_000, RTT: 600 * time.Millisecond,
		LossDown: 0.01, LossUp: 0.01, BDPQueue: true, PeerLossAuto: true, SecondBackup: true,
		Second: &Condition{Name: "CELL", Down: 20_000_000, Up: 5_000_000, RTT: 60 * time.Millisecond, LossDown: 0.01, LossUp: 0.01, BDPQueue: true, PeerLossAuto: true}},
}

// MultipathResult is what a multipath run measured.
type MultipathResult struct {
	// Paths are B's paths after the bulk phase: the data each carried.
	Paths []PathShare `json:"paths"`
	// Bonding: the sum of both links' payload limits (SummedLimit), and
	// the goodput of the bulk download and of the parallel ones (none
	// with a backup link) from WarmS seconds after each phase began to
	// its end.
	SumLimitKBps float64 `json:"summed_limit_kBps"`
	WarmS        float64 `json:"warm_s"`
	SteadyKBps   float64 `json:"steady_kBps"`
	Parallel     int     `json:"parallel,omitempty"`
	ParallelKBps float64 `json:"parallel_steady_kBps,omitempty"`
	ParallelErr  string  `json:"parallel_error,omitempty"`
	// The probe beside the bulk download: a request on a new connection
	// every --probe-every, timed from connect() to the answer's last
	// byte (the figure), and between them one on a connection
	// held open (Held*), which does not wait for the stream's opening
	// and the far side's dial.
	Requests  int     `json:"requests"`
	P50Ms     float64 `json:"request_p50_ms"`
	P95Ms     float64 `json:"request_p95_ms"`
	FastRTTMs float64 `json:"fast_link_rtt_ms"` // the lower of the two links' RTTs
	// The fast path's RTT as a user meets it: the same request on a new
	// connection with both links idle, before the bulk (idleRequests,
	// one every idleEvery), timed the same way. Its median holds what
	// the hosts add to the link's RTT (the TUN devices, the netstacks,
	// the far side's dial, the emulator's own turn), which the request
	// beside the bulk pays too; RequestRatios gives the p95 against it
	// and against FastRTTMs.
	IdleRequests int       `json:"idle_requests"`
	IdleP50Ms    float64   `json:"idle_request_p50_ms"`
	IdleP95Ms    float64   `json:"idle_request_p95_ms"`
	IdleMs       []float64 `json:"idle_request_ms,omitempty"`
	IdleErr      string    `json:"idle_error,omitempty"`
	// Each request's time in the order sent, so a tail can be traced to
	// the moment it happened in the sender's timeline.
	RequestMs []float64 `json:"request_ms,omitempty"`
	HeldP50Ms float64   `json:"held_request_p50_ms"`
	HeldP95Ms float64   `json:"held_request_p95_ms"`
	HeldMs    []float64 `json:"held_request_ms,omitempty"`
	ProbeErr  string    `json:"probe_error,omitempty"`
	// Failover: the link cut (0 the first, 1 the second), the wait for
	// the data to move on (the stall that begins at the cut), the longest
	// stall anywhere after the cut (a loss repaired over the link left
	// stalls the in-order reader for that link's round trip or more), and
	// the download's fate.
	CutLink     int     `json:"cut_link"`
	MoveMs      float64 `json:"move_ms"`
	LongestMs   float64 `json:"longest_stall_ms"`
	FailBytes   int64   `json:"failover_bytes"`
	SHA256OK    bool    `json:"sha256_equal"`
	FailoverErr string  `json:"failover_error,omitempty"` // what broke the download, if anything
	// Ping and UDP across the cut: the longest time without an echo
	// reply from the cut on (a ping and a UDP echo every 100 ms from A
	// to B's tunnel address), and the replies after the cut.
	PingStallMs  float64 `json:"ping_stall_ms"`
	PingReplies  int     `json:"ping_replies_after_cut"`
	UDPStallMs   float64 `json:"udp_stall_ms"`
	UDPReplies   int     `json:"udp_replies_after_cut"`
	FollowErrors string  `json:"follow_error,omitempty"`
	// Backup (the second link a backup): the data bytes its path carried
	// while the primary worked (A and B, after the bulk phase; the probes
	// beside them), the time from the primary's return until both ends
	// send on it again, and the data bytes B sent on the backup from a
	// second after that to the end of the download.
	Backup *BackupResult `json:"backup,omitempty"`
}

// BackupResult is what a run with a backup link measured of it.
type BackupResult struct {
	DataBytesA      uint64  `json:"data_bytes_a_while_primary"`
	DataBytesB      uint64  `json:"data_bytes_b_while_primary"`
	ProbesA         uint64  `json:"probes_a"`
	ProbesB         uint64  `json:"probes_b"`
	HandBackMs      float64 `json:"hand_back_ms"`
	DataAfterReturn uint64  `json:"data_bytes_b_after_hand_back"`
	HandBackErr     string  `json:"hand_back_error,omitempty"`
}

// PathShare is one path's part of the data a side sent.
type PathShare struct {
	Link      string  `json:"link"` // the condition's name of the link it runs over
	Name      string  `json:"name"`
	Endpoint  string  `json:"endpoint"`
	Up        bool    `json:"up"`
	DataBytes uint64  `json:"data_bytes"`
	Share     float64 `json:"share"`
	// Its smoothed and least RTT at the end of the bulk phase: their
	// difference is the queue the bulk kept there and the hosts' noise,
	// what a request on the path waits beyond the link's RTT.
	SRTTMs   float64 `json:"srtt_ms"`
	MinRTTMs float64 `json:"min_rtt_ms"`
}

// pathsOf is side's paths to its peer (`scpsvpn status --json`).
func pathsOf(ctx context.Context, tb *testbed.Testbed, binary string, side testbed.Side) ([]tunnel.PathStatus, error) {
	cmd := tb.Command(side, binary, "status", "--json", "--interface", tb.Site(side).TUNName)
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("status at %s: %w", side, err)
	}
	var st tunnel.Status
	if err := json.Unmarshal(out, &st); err != nil || len(st.Peers) != 1 {
		return nil, fmt.Errorf("status at %s: %v: %.200s", side, err, out)
	}
	return st.Peers[0].Paths, ctx.Err()
}

// shares turns B's paths into their shares of the data sent, each named
// by the link its endpoint (an address of A) lies on.
func shares(tb *testbed.Testbed, c Condition, paths []tunnel.PathStatus) []PathShare {
	links := []string{strings.SplitN(c.Name, "+", 2)[0], c.Second.Name}
	var total uint64
	for _, p := range paths {
		total += p.DataBytesSent
	}
	out := make([]PathShare, 0, len(paths))
	for _, p := range paths {
		s := PathShare{Name: p.Name, Endpoint: p.Endpoint, Up: p.Up, DataBytes: p.DataBytesSent, SRTTMs: ms(p.SRTT), MinRTTMs: ms(p.MinRTT)}
		for i, addr := range []string{tb.A.Underlay.Addr().String(), tb.A.Underlay2.Addr().String()} {
			if strings.HasPrefix(p.Endpoint, addr+":") && i < len(links) {
				s.Link = links[i]
			}
		}
		if total > 0 {
			s.Share = float64(p.DataBytesSent) / float64(total)
		}
		out = append(out, s)
	}
	return out
}

// multipathConfig is the testbed of a two-link condition: one emulator per
// link, A told both links as paths with what a user knows of each.
func multipathConfig(rc RunConfig) testbed.Config {
	c := rc.Condition
	linkA, linkB := c.PeerLinks(rc.Contender.Congestion)
	secondA, _ := c.Second.PeerLinks(rc.Contender.Congestion)
	return testbed.Config{
		Kind:       testbed.Emulated,
		Link:       c.LinkOptions(rc.Seed),
		Link2:      c.Second.LinkOptions(rc.Seed + 1),
		TwoPaths:   true,
		BackupPath: c.SecondBackup,
		PathLinks:  [2]string{linkA, secondA},
		PeerLinkA:  linkA,
		PeerLinkB:  linkB,
		Endpoints:  testbed.Endpoints{Binary: rc.Binary, LogLevel: "info", Logger: rc.Logger},
	}
}

func runMultipath(ctx context.Context, rc RunConfig, r *Result) (err error) {
	c := rc.Condition
	if c.Second == nil {
		return fmt.Errorf("condition %s has one link: the multipath workload runs %s", c.Name, strings.Join(twoLinkNames(), ", "))
	}
	if !rc.Contender.IsSCPS() || rc.Binary == "" {
		return errors.New("the multipath workload runs scpsvpn contenders only")
	}
	tb, ctx, done, err := runTestbed(ctx, rc, multipathConfig(rc), rc.Contender.Name)
	if err != nil {
		return err
	}
	defer done(&err)
	srv, dial, err := scpsPath(ctx, tb, rc)
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := waitBothPaths(ctx, tb, rc.Binary, 10*time.Second+3*max(c.RTT, c.Second.RTT)); err != nil {
		return err
	}
	mp := &MultipathResult{FastRTTMs: ms(min(c.RTT, c.Second.RTT))}
	r.Multipath = mp
	size := rc.ProbeSize
	if size <= 0 {
		size = 1000
	}

	// The fast path's RTT with both links idle, the request's way.
	idle, err := idleRequests(ctx, dial, size, idleCount, idleEvery)
	if err != nil {
		mp.IdleErr = oneLine(err.Error())
	}
	mp.IdleRequests = len(idle)
	mp.IdleMs, mp.IdleP50Ms, mp.IdleP95Ms = latencyMs(idle)

	// Bulk beside the probe.
	half := rc.Duration / 2
	t := Measure(ctx, TransferConfig{Dial: dial, Duration: half, RequestEvery: max(rc.ProbeEvery, 100*time.Millisecond), RequestSize: size, RequestNewConn: true})
	r.PayloadBytes, r.DurationS = t.Bytes, t.Window.Seconds()
	r.GoodputKBps = t.Goodput() / 1000
	mp.Requests = len(t.Latencies)
	mp.RequestMs, mp.P50Ms, mp.P95Ms = latencyMs(t.Latencies)
	mp.HeldMs, mp.HeldP50Ms, mp.HeldP95Ms = latencyMs(t.HeldLatencies)
	if t.ProbeErr != nil {
		mp.ProbeErr = oneLine(t.ProbeErr.Error())
	}
	mp.SumLimitKBps = (SummedLimit(c) + SummedLimit(*c.Second)) / 1000
	warm := bondWarm(half)
	mp.WarmS = warm.Seconds()
	mp.SteadyKBps = steadyRate(t.Samples, warm) / 1000
	paths, err := pathsOf(ctx, tb, rc.Binary, testbed.B)
	if err != nil {
		return err
	}
	mp.Paths = shares(tb, c, paths)
	if !c.SecondBackup {
		// Parallel downloads across both primaries.
		mp.Parallel = bondParallel
		samples, err := measureParallel(ctx, dial, bondParallel, half)
		if err != nil {
			mp.ParallelErr = oneLine(err.Error())
		}
		mp.ParallelKBps = steadyRate(samples, warm) / 1000
	}
	srv.Close()
	if c.SecondBackup {
		a, err := pathsOf(ctx, tb, rc.Binary, testbed.A)
		if err != nil {
			return err
		}
		if len(a) < 2 || len(paths) < 2 {
			return fmt.Errorf("backup: paths at A %+v, at B %+v: want two each", a, paths)
		}
		bb := backupOf(tb, paths)
		mp.Backup = &BackupResult{DataBytesA: a[1].DataBytesSent, ProbesA: a[1].ProbesSent, DataBytesB: bb.DataBytesSent, ProbesB: bb.ProbesSent}
	}

	// Failover: cut the link the data runs on.
	if err := failover(ctx, tb, rc, half, mp); err != nil {
		return err
	}
	r.Status = StatusOK
	return nil
}

// idleCount requests on a new connection, one every idleEvery, measure
// the fast path's RTT with both links idle (about 2 s): a median of
// twenty, and one LEO cut of 50 ms in 15 s catches one at most.
const (
	idleCount = 20
	idleEvery = 100 * time.Millisecond
)

// idleRequests times n requests of size bytes, each on a new connection
// (connect() to the answer's last byte, as the probe beside the bulk
// times them), one every every, with nothing else running; it returns
// those answered and the first error.
func idleRequests(ctx context.Context, dial Dialer, size, n int, every time.Duration) ([]time.Duration, error) {
	var ls []time.Duration
	for range n {
		sent := time.Now()
		conn, err := echoOnce(ctx, dial, size)
		if err != nil {
			return ls, fmt.Errorf("idle request: %w", err)
		}
		ls = append(ls, time.Since(sent))
		abort(conn)
		select {
		case <-ctx.Done():
			return ls, ctx.Err()
		case <-time.After(time.Until(sent.Add(every))):
		}
	}
	return ls, nil
}

// RequestRatios is the p95 of the requests beside the bulk against the
// fast link's configured RTT and against the fast path's idle RTT as the
// same request measured it (its median; 0 where none was measured).
func (m *MultipathResult) RequestRatios() (ofLink, ofIdle float64) {
	if m.FastRTTMs > 0 {
		ofLink = m.P95Ms / m.FastRTTMs
	}
	if m.IdleP50Ms > 0 {
		ofIdle = m.P95Ms / m.IdleP50Ms
	}
	return ofLink, ofIdle
}

// ratioText is a ratio as "1.23x", "-" when there is none.
func ratioText(r float64) string {
	if r <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", r)
}

// bondParallel is how many downloads the parallel phase runs at once.
const bondParallel = 8

// bondWarm is the start-up allowance of a bonding phase of span: the
// goodput counts from then on. Ten seconds (slow start and the receive
// windows' growth over a 600 ms link take most of it), or half of a
// shorter phase.
func bondWarm(span time.Duration) time.Duration { return min(10*time.Second, span/2) }

// SummedLimit is one link's payload limit in bytes per second: its
// PayloadCapacity less its loss, and while it is up.
func SummedLimit(c Condition) float64 {
	up := 1.0
	if e := c.OutageEvery; e.Every > 0 {
		up -= float64(e.Duration) / float64(e.Every)
	}
	return c.PayloadCapacity() * (1 - c.LossDown) * up
}

// steadyRate is the rate in bytes per second of cumulative samples from
// warm to the last sample (0 without two samples there).
func steadyRate(samples []Sample, warm time.Duration) float64 {
	i := slices.IndexFunc(samples, func(s Sample) bool { return s.T >= warm })
	if i < 0 || i == len(samples)-1 {
		return 0
	}
	first, last := samples[i], samples[len(samples)-1]
	return float64(last.Bytes-first.Bytes) / (last.T - first.T).Seconds()
}

// measureParallel runs n downloads at once for span and returns their
// summed bytes every sampleEvery, from {0, 0}; the error joins those of
// the downloads that ended early.
func measureParallel(ctx context.Context, dial Dialer, n int, span time.Duration) ([]Sample, error) {
	start := time.Now()
	end := start.Add(span)
	wctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	counts := make([]atomic.Int64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ttfb time.Duration
			errs[i] = download(wctx, dial, start, end, &counts[i], make(chan struct{}), &ttfb)
		}()
	}
	sum := func() (b int64) {
		for i := range counts {
			b += counts[i].Load()
		}
		return b
	}
	samples := []Sample{{}}
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-wctx.Done():
			done = true
		case <-tick.C:
		}
		samples = append(samples, Sample{T: min(time.Since(start), span), Bytes: sum()})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return samples, ctx.Err()
	}
	return samples, errors.Join(errs...)
}

// waitBothPaths waits until both of A's paths are up.
func waitBothPaths(ctx context.Context, tb *testbed.Testbed, binary string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		ps, err := pathsOf(ctx, tb, binary, testbed.A)
		if err != nil {
			return err
		}
		if len(ps) == 2 && ps[0].Up && ps[1].Up {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("A's paths not both up within %v: %+v", within, ps)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// failover downloads what the slower link carries in span, and at least
// two seconds of both links together, cutting the link in use at A once
// a quarter has arrived; it fills mp's failover fields. A broken or
// unequal download is a measurement, not an error.
func failover(ctx context.Context, tb *testbed.Testbed, rc RunConfig, span time.Duration, mp *MultipathResult) error {
	c := rc.Condition
	// What the slower link carries in span: after the cut, one link is
	// left, perhaps the slower. Bonded, the links carry a short span's
	// download faster than that: at least two seconds of their sum keep
	// three quarters of it in flight past the cut (a 2 s smoke run's
	// 2.4 MB on GEO+CELL ended before a loaded host made the cut).
	capacity := min(c.PayloadCapacity(), c.Second.PayloadCapacity())
	both := c.PayloadCapacity() + c.Second.PayloadCapacity()
	size := int(min(max(capacity*span.Seconds(), both*2, 1e6), 200e6))
	data := make([]byte, size)
	rand.Read(data)
	want := sha256.Sum256(data)
	ln, err := tb.Listen(testbed.B, "tcp4", netipHostPort(tb.B.TUN4.String()))
	if err != nil {
		return fmt.Errorf("failover server: %w", err)
	}
	defer ln.Close()
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		conn.Write(data)
	}()
	// Ping and UDP echoes from before the cut to followAfter past it.
	follow, err := startFollow(ctx, tb)
	if err != nil {
		return err
	}
	defer follow.stop()
	conn, err := tb.DialContext(ctx, testbed.A, "tcp4", ln.Addr().String())
	if err != nil {
		return fmt.Errorf("failover client: %w", err)
	}
	defer conn.Close()
	var (
		mu    sync.Mutex
		reads []time.Time
		got   int64
	)
	type outcome struct {
		n   int64
		sum [32]byte
		err error
	}
	end := make(chan outcome, 1)
	go func() {
		h := sha256.New()
		n, err := io.Copy(h, &timedReader{r: conn, mu: &mu, reads: &reads, n: &got})
		var o outcome
		o.n, o.err = n, err
		copy(o.sum[:], h.Sum(nil))
		end <- o
	}()
	// Which link to cut is asked before the quarter arrives: the status
	// command is a process of its own, slow on a loaded host, and the
	// cut must follow the quarter at once.
	ps, err := pathsOf(ctx, tb, rc.Binary, testbed.A)
	if err != nil {
		return err
	}
	for start := time.Now(); time.Since(start) < span; {
		mu.Lock()
		n := got
		mu.Unlock()
		if n >= int64(size/4) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	for i, p := range ps {
		if p.Active && i < 2 {
			mp.CutLink = i
		}
	}
	cut := time.Now()
	if err := tb.SetPathUp(mp.CutLink, false); err != nil {
		return err
	}
	defer tb.SetPathUp(mp.CutLink, true)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(followAfter):
	}
	follow.stop()
	mp.PingStallMs, mp.PingReplies = follow.ping.stallFrom(cut)
	mp.UDPStallMs, mp.UDPReplies = follow.udp.stallFrom(cut)
	mp.FollowErrors = follow.err()
	var backupBase uint64
	if mp.Backup != nil {
		if backupBase, err = handBack(ctx, tb, rc.Binary, mp.CutLink, mp.Backup); err != nil {
			return err
		}
	}
	guard := 4*span + 30*time.Second
	var o outcome
	select {
	case o = <-end:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(guard):
		conn.Close()
		o = <-end
		o.err = fmt.Errorf("unfinished after %v: %w", guard, o.err)
	}
	if mp.Backup != nil && mp.Backup.HandBackErr == "" {
		if ps, err := pathsOf(ctx, tb, rc.Binary, testbed.B); err == nil {
			mp.Backup.DataAfterReturn = backupOf(tb, ps).DataBytesSent - backupBase
		}
	}
	mu.Lock()
	mp.MoveMs = ms(stallAt(reads, cut, cutDrain))
	mp.LongestMs = ms(longestGap(reads, cut))
	cutLate := len(reads) == 0 || !reads[len(reads)-1].After(cut)
	mu.Unlock()
	mp.FailBytes = o.n
	mp.SHA256OK = o.n == int64(size) && o.sum == want
	switch {
	case cutLate:
		mp.FailoverErr = "the download ended before the cut"
	case o.err != nil:
		mp.FailoverErr = oneLine(o.err.Error())
	case o.n != int64(size):
		mp.FailoverErr = fmt.Sprintf("%d of %d bytes", o.n, size)
	}
	return nil
}

// backupOf is B's path over the second link (A's backup).
func backupOf(tb *testbed.Testbed, paths []tunnel.PathStatus) tunnel.PathStatus {
	for _, p := range paths {
		if strings.HasPrefix(p.Endpoint, tb.A.Underlay2.Addr().String()+":") {
			return p
		}
	}
	return tunnel.PathStatus{}
}

// handBack restores the cut primary (link 0) and waits until both ends
// send on it again, filling b's hand-back time; base is B's data bytes on
// the backup handBackSettle later.
func handBack(ctx context.Context, tb *testbed.Testbed, binary string, cut int, b *BackupResult) (base uint64, err error) {
	if cut != 0 {
		b.HandBackErr = fmt.Sprintf("link %d was cut, not the primary", cut)
		return 0, nil
	}
	back := time.Now()
	if err := tb.SetPathUp(0, true); err != nil {
		return 0, err
	}
	for deadline := back.Add(handBackGuard); ; {
		a, errA := pathsOf(ctx, tb, binary, testbed.A)
		bp, errB := pathsOf(ctx, tb, binary, testbed.B)
		if err := errors.Join(errA, errB); err != nil {
			return 0, err
		}
		if len(a) > 0 && a[0].Active && backupOf(tb, bp).Endpoint != "" && !backupOf(tb, bp).Active && primaryActive(tb, bp) {
			b.HandBackMs = ms(time.Since(back))
			// What was queued for the backup drains and B stops
			// following A's traffic on it within a GEO round trip
			// (scps bondRecent): count from a second on.
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(handBackSettle):
			}
			if bp, err = pathsOf(ctx, tb, binary, testbed.B); err != nil {
				return 0, err
			}
			return backupOf(tb, bp).DataBytesSent, nil
		}
		if time.Now().After(deadline) {
			b.HandBackErr = fmt.Sprintf("not back on the primary within %v", handBackGuard)
			return 0, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

const (
	// handBackGuard bounds the wait for the primary to carry the data
	// again.
	handBackGuard = 15 * time.Second
	// handBackSettle is the time after the hand-back from which the
	// backup must carry nothing.
	handBackSettle = time.Second
)

// primaryActive reports whether B sends on its path over the first link.
func primaryActive(tb *testbed.Testbed, paths []tunnel.PathStatus) bool {
	for _, p := range paths {
		if strings.HasPrefix(p.Endpoint, tb.A.Underlay.Addr().String()+":") {
			return p.Active
		}
	}
	return false
}

// netipHostPort is host with a port the kernel picks.
func netipHostPort(host string) string { return net.JoinHostPort(host, "0") }

// timedReader notes when each read returned bytes, and how many came.
type timedReader struct {
	r     io.Reader
	mu    *sync.Mutex
	reads *[]time.Time
	n     *int64
}

func (t *timedReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		t.mu.Lock()
		*t.reads = append(*t.reads, time.Now())
		*t.n += int64(n)
		t.mu.Unlock()
	}
	return n, err
}

// cutDrain bounds how long after the cut the reader may still get bytes
// that were past the cut link already (buffered at A): a stall that begins
// within it is the cut's.
const cutDrain = 250 * time.Millisecond

// stallAt is the longest time without a read that began between t0 and
// t0+drain: the wait for the data to move on after a cut at t0 (0 if the
// reads never paused that long after it).
func stallAt(reads []time.Time, t0 time.Time, drain time.Duration) time.Duration {
	var gap time.Duration
	last := t0
	for _, at := range reads {
		if at.Before(t0) {
			continue
		}
		if last.Sub(t0) > drain {
			break
		}
		gap = max(gap, at.Sub(last))
		last = at
	}
	return gap
}

// longestGap is the longest time without a read from t0 to the last read.
func longestGap(reads []time.Time, t0 time.Time) time.Duration {
	var gap time.Duration
	last := t0
	for _, at := range reads {
		if at.Before(t0) {
			continue
		}
		gap = max(gap, at.Sub(last))
		last = at
	}
	return gap
}

func twoLinkNames() []string {
	var out []string
	for _, c := range TwoLinkConditions {
		out = append(out, c.Name)
	}
	return out
}

// multipathSummary is RunSummary's line for a multipath run.
func multipathSummary(r *Result) string {
	m := r.Multipath
	s := fmt.Sprintf("bulk %.1f kB/s, from %gs %.1f kB/s (%s of the summed limits %.0f kB/s), paths %s; ",
		r.GoodputKBps, m.WarmS, m.SteadyKBps, limitShare(m.SteadyKBps, m.SumLimitKBps), m.SumLimitKBps, shareText(m.Paths))
	if m.Parallel > 0 {
		s += fmt.Sprintf("%d downloads from %gs %.1f kB/s (%s", m.Parallel, m.WarmS, m.ParallelKBps, limitShare(m.ParallelKBps, m.SumLimitKBps))
		if m.ParallelErr != "" {
			s += ", " + m.ParallelErr
		}
		s += "); "
	}
	ofLink, ofIdle := m.RequestRatios()
	s += fmt.Sprintf("requests on new connections p50 %.0f / p95 %.0f ms (%d), on a held one %.0f / %.0f ms; p95 %s the fast link's RTT %.0f ms, %s the fast path's idle RTT %.1f ms (the same request with the links idle, p50 of %d; p95 %.1f ms)",
		m.P50Ms, m.P95Ms, m.Requests, m.HeldP50Ms, m.HeldP95Ms, ratioText(ofLink), m.FastRTTMs, ratioText(ofIdle), m.IdleP50Ms, m.IdleRequests, m.IdleP95Ms)
	if m.ProbeErr != "" {
		s += " (" + m.ProbeErr + ")"
	}
	if m.IdleErr != "" {
		s += " (" + m.IdleErr + ")"
	}
	s += fmt.Sprintf("; failover: link %d cut, moved on in %.0f ms (longest stall after %.0f ms), SHA-256 equal %v",
		m.CutLink, m.MoveMs, m.LongestMs, m.SHA256OK)
	if m.FailoverErr != "" {
		s += " (" + m.FailoverErr + ")"
	}
	s += fmt.Sprintf("; ping and UDP after the cut: %d and %d replies, longest wait %.0f and %.0f ms", m.PingReplies, m.UDPReplies, m.PingStallMs, m.UDPStallMs)
	if m.FollowErrors != "" {
		s += " (" + m.FollowErrors + ")"
	}
	if b := m.Backup; b != nil {
		s += fmt.Sprintf("; backup while the primary worked: %d data bytes at A, %d at B (%d and %d probes), handed back in %.0f ms, %d data bytes on it after", b.DataBytesA, b.DataBytesB, b.ProbesA, b.ProbesB, b.HandBackMs, b.DataAfterReturn)
		if b.HandBackErr != "" {
			s += " (" + b.HandBackErr + ")"
		}
	}
	return s
}

// limitShare is rate as a percentage of limit.
func limitShare(rate, limit float64) string {
	if limit <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*rate/limit)
}

func shareText(ps []PathShare) string {
	parts := make([]string, 0, len(ps))
	for _, p := range ps {
		name := p.Link
		if name == "" {
			name = p.Endpoint
		}
		parts = append(parts, fmt.Sprintf("%s %.0f%%", name, p.Share*100))
	}
	return strings.Join(parts, ", ")
}

// renderMultipath writes the multipath table.
func (rep *Report) renderMultipath(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("## Two links\n\n")
	p("Bulk: a download of half the duration from B with a request/response probe beside it (a request on a new connection every --probe-every, timed from connect() to the answer's last byte, and one on a held connection between them); its goodput over the whole phase and from the start-up allowance on (10 s, or half a shorter phase), against the sum of both links' payload limits (rate x 1460/1500 x (1 - loss), the LEO's while up); each path's share of the data B sent. "+
		"The request's p95 is given against the fast link's configured RTT and against the fast path's idle RTT: the median of %d of the same requests on new connections, one every %v, with both links idle before the bulk (what the hosts add to the link: the TUN devices, the netstacks, the far side's dial, the emulators). "+
		"Parallel (both links primaries): %d downloads at once for half the duration, from the same allowance on. "+
		"Failover: a download during which the link the data runs on is cut at A; the wait for the data to move on (the stall that begins at the cut), the longest stall after the cut (a loss repaired over the link left stalls the reader too), and whether all bytes arrived with an equal SHA-256 on the same connection; a ping and a UDP echo every 100 ms from A to B across the cut: the longest wait for a reply from the cut on.\n\n", idleCount, idleEvery, bondParallel)
	p("| condition | contender | bulk kB/s | bulk after start-up kB/s | of the summed limits | %d downloads after start-up kB/s | of the summed limits | path shares (B) | request on a new connection p50 / p95 ms | on a held one p50 / p95 ms | fast link RTT ms | fast path idle RTT ms (p50 / p95) | p95 of the link's RTT | p95 of the idle RTT | link cut | moved on in ms | longest stall ms | SHA-256 equal | ping / UDP longest wait ms |\n|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n", bondParallel)
	rep.workloadRows(w, 17, func(r *Result) bool { return r.Multipath != nil }, func(r *Result) string {
		m := r.Multipath
		ok := fmt.Sprint(m.SHA256OK)
		if m.FailoverErr != "" {
			ok += " (" + m.FailoverErr + ")"
		}
		par, parShare := "-", "-"
		if m.Parallel > 0 {
			par, parShare = fmt.Sprintf("%.1f", m.ParallelKBps), limitShare(m.ParallelKBps, m.SumLimitKBps)
		}
		ofLink, ofIdle := m.RequestRatios()
		return fmt.Sprintf("%.1f | %.1f | %s | %s | %s | %s | %.0f / %.0f | %.0f / %.0f | %.0f | %.1f / %.1f | %s | %s | %d | %.0f | %.0f | %s | %.0f / %.0f", r.GoodputKBps,
			m.SteadyKBps, limitShare(m.SteadyKBps, m.SumLimitKBps), par, parShare, shareText(m.Paths), m.P50Ms, m.P95Ms, m.HeldP50Ms, m.HeldP95Ms, m.FastRTTMs,
			m.IdleP50Ms, m.IdleP95Ms, ratioText(ofLink), ratioText(ofIdle), m.CutLink, m.MoveMs, m.LongestMs, ok, m.PingStallMs, m.UDPStallMs)
	})
	p("\n")
	var backups []*Result
	for _, r := range rep.Results {
		if r.Multipath != nil && r.Multipath.Backup != nil {
			backups = append(backups, r)
		}
	}
	if len(backups) == 0 {
		return
	}
	p("Backup: the second link a backup. Its data bytes while the primary worked (each side's counters, probes beside them), the time from the primary's return until both sides send on it again, and the data bytes B sent on the backup from a second after that to the end of the download.\n\n")
	p("| condition | contender | backup data bytes A / B | probes A / B | moved to the backup in ms | handed back in ms | backup data bytes after |\n|---|---|---:|---:|---:|---:|---:|\n")
	for _, r := range backups {
		b := r.Multipath.Backup
		back := fmt.Sprintf("%.0f", b.HandBackMs)
		if b.HandBackErr != "" {
			back = b.HandBackErr
		}
		p("| %s | %s | %d / %d | %d / %d | %.0f | %s | %d |\n", r.Condition, r.Contender, b.DataBytesA, b.DataBytesB, b.ProbesA, b.ProbesB, r.Multipath.MoveMs, back, b.DataAfterReturn)
	}
	p("\n")
}

// latencyMs gives requests' times in milliseconds and their p50 and p95
// (zero when there were none).
func latencyMs(ls []time.Duration) (each []float64, p50, p95 float64) {
	for _, l := range ls {
		each = append(each, ms(l))
	}
	if p, ok := Percentile(ls, 0.5); ok {
		p50 = ms(p)
	}
	if p, ok := Percentile(ls, 0.95); ok {
		p95 = ms(p)
	}
	return each, p50, p95
}
