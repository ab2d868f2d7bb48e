package bench

// This file owns the stalled-readers workload: what clients that stop
// reading, or read slowly, cost the other flows of the link. On one
// testbed, in turn:
//   - stalled: several downloads whose clients read their first byte and
//     then nothing more, holding their sockets open; after a wait, a fresh
//     download of a fixed size beside them, timed from its dial to its
//     last byte and after its start-up, and what the link carried for the
//     stalled ones meanwhile;
//   - slow: a download whose client reads at a fixed slow rate beside a
//     bulk download, for --duration; what the link carried beyond the
//     bulk download's bytes is what the slow one cost it.
// Kernel TCP runs both phases end to end, as in the other workloads.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"scpsvpn/cmd/internal/linkemu"
	"scpsvpn/cmd/internal/testbed"
)

// WorkloadStalled is the stalled-readers workload.
const WorkloadStalled = "stalled"

// StalledSpec sizes the stalled-readers workload.
type StalledSpec struct {
	Stalled    int           `json:"stalled_flows"` // downloads whose clients stop reading
	Wait       time.Duration `json:"wait_ns"`       // from opening them to the fresh download's dial
	FreshBytes int           `json:"fresh_bytes"`   // the fresh download's size
	SlowRate   int           `json:"slow_rate_Bps"` // the slow reader's rate, bytes per second
}

// DefaultStalled is the workload the targets are set for: ten downloads
// that stop reading, a fresh 20 MB download 8 s later, a reader of 100
// kB/s.
var DefaultStalled = StalledSpec{Stalled: 10, Wait: 8 * time.Second, FreshBytes: 20_000_000, SlowRate: 100_000}

// StalledResult is what a stalled-readers run measured.
type StalledResult struct {
	Fresh *FreshBeside `json:"fresh_beside_stalled,omitempty"`
	Slow  *SlowBeside  `json:"slow_beside_bulk,omitempty"`
}

// FreshBeside is the stalled phase: a fresh download beside downloads
// whose clients stopped reading.
type FreshBeside struct {
	Stalled int     `json:"stalled_flows"`
	Opened  int     `json:"stalled_opened"` // that delivered their first byte
	Bytes   int64   `json:"bytes"`
	Done    bool    `json:"done"` // every byte of the fresh download arrived
	TTFBMs  float64 `json:"ttfb_ms"`
	TookMs  float64 `json:"took_ms"` // from its dial to its last byte
	// WholeShare is the fresh download's bytes over the time from its dial
	// to its last byte, as a share of the payload limit; SteadyShare the
	// same from steadyAfterRTTs round trips after its first byte.
	WholeShare  float64 `json:"whole_share_of_limit"`
	SteadyShare float64 `json:"steady_share_of_limit"`
	KBps        float64 `json:"kBps"`
	SteadyKBps  float64 `json:"steady_kBps"`
	// StalledKB is what the link carried toward the clients (payload
	// equivalent, 1460 of 1500 bytes) from the stalled downloads' dials to
	// the fresh one's last byte, beyond the fresh download's own bytes:
	// what the stalled downloads took from the link.
	StalledKB float64 `json:"stalled_link_kB"`
	// WaitKB is the same carried during the wait alone (before the fresh
	// download).
	WaitKB float64 `json:"wait_link_kB"`
	Err    string  `json:"error,omitempty"`
}

// SlowBeside is the slow phase: a slow reader beside a bulk download.
type SlowBeside struct {
	TargetKBps float64 `json:"target_kBps"` // the rate the slow client reads at
	SlowKBps   float64 `json:"slow_kBps"`   // what it read
	BulkKBps   float64 `json:"bulk_kBps"`
	BulkShare  float64 `json:"bulk_share_of_limit"`
	// LinkKBps is what the link carried toward the clients (payload
	// equivalent) over the window; CostKBps that less the bulk
	// download's bytes: what the slow reader cost the link.
	LinkKBps float64 `json:"link_kBps"`
	CostKBps float64 `json:"cost_kBps"`
	// LateCostKBps is the cost over the second half of the window, once
	// what was in flight when the reader fell behind has landed.
	LateCostKBps float64 `json:"late_cost_kBps"`
	Err          string  `json:"error,omitempty"`
}

// check says which flag is out of range.
func (s StalledSpec) check() error {
	switch {
	case s.Stalled < 1 || s.Stalled > 1000:
		return fmt.Errorf("--stalled %d: use 1 to 1000", s.Stalled)
	case s.Wait < 0 || s.Wait > 10*time.Minute:
		return fmt.Errorf("--stalled-wait %v: use 0 to 10m", s.Wait)
	case s.FreshBytes < 1000 || s.FreshBytes > 10_000_000_000:
		return fmt.Errorf("--fresh-mb %d: use 1 to 10000", s.FreshBytes/1_000_000)
	case s.SlowRate < 1000 || s.SlowRate > 1_000_000_000:
		return fmt.Errorf("--slow-kbps %d: use 1 to 1000000", s.SlowRate/1000)
	}
	return nil
}

// Describe says in words what a stalled-readers run does.
func (s StalledSpec) Describe(durationS float64) string {
	return fmt.Sprintf("from site B (server) to site A (client) through the userspace link emulator, on one fresh testbed per contender, in turn: "+
		"%d downloads whose clients read their first byte and then nothing (sockets held open), and %v after their dials a fresh %d-byte download "+
		"(its rate from its dial to its last byte, and from %d RTTs after its first byte, as a share of the payload limit; what the link carried beyond it for the stalled ones); "+
		"then a client reading at %d kB/s beside a bulk download for %s (what the link carried beyond the bulk download's bytes is the slow reader's cost)",
		s.Stalled, s.Wait, s.FreshBytes, steadyAfterRTTs, s.SlowRate/1000, fmtSeconds(durationS))
}

// runStalled measures the stalled-readers workload on one fresh testbed
// and fills r.
func runStalled(ctx context.Context, rc RunConfig, r *Result) (err error) {
	c := rc.Condition
	if c.Timed() {
		return fmt.Errorf("the stalled-readers workload runs on conditions without a rate schedule or outage; %s has one", c.Name)
	}
	spec := rc.Stalled
	if spec.Stalled == 0 {
		spec = DefaultStalled
	}
	cfg := testbed.Config{Kind: testbed.Emulated, Link: c.LinkOptions(rc.Seed), Endpoints: testbed.Endpoints{Binary: rc.Binary, LogLevel: "info", Logger: rc.Logger}}
	scps := rc.Contender.IsSCPS()
	logName := ""
	if scps {
		if rc.Binary == "" {
			return errors.New("no endpoint binary")
		}
		cfg.PeerLinkA, cfg.PeerLinkB = c.PeerLinks(rc.Contender.Congestion)
		logName = rc.Contender.Name
	}
	tb, ctx, done, err := runTestbed(ctx, rc, cfg, logName)
	if err != nil {
		return err
	}
	defer done(&err)
	var cc ccCheck
	srv, dial, err := contenderPath(ctx, tb, rc, &cc)
	if err != nil {
		return err
	}
	defer srv.Close()

	sr := &StalledResult{}
	r.Stalled = sr
	emu := tb.Emulator()
	sr.Fresh = measureFreshBeside(ctx, dial, emu, spec, c)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(phasePause(c)):
	}
	sr.Slow = measureSlowBeside(ctx, dial, emu, spec, c, rc.Duration)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.TCPCongestion = cc.String()
	r.DurationS = rc.Duration.Seconds()
	if serr := srv.Err(); serr != nil {
		return serr
	}
	if !sr.Fresh.Done && sr.Slow.BulkKBps == 0 {
		return fmt.Errorf("nothing measured: %s; %s", sr.Fresh.Err, sr.Slow.Err)
	}
	for _, e := range []string{sr.Fresh.Err, sr.Slow.Err} {
		if e != "" && r.Note == "" {
			r.Note = e
		}
	}
	r.Status = StatusOK
	return nil
}

// payloadKB is the download direction's bytes on the link between two
// counter readings as payload-equivalent kB (a full packet's 1460 of
// 1500 bytes), the measure the payload limit is in.
func payloadKB(before, after linkemu.Counters) float64 {
	return float64(after.Ret.Bytes-before.Ret.Bytes) * fullPayload / underlayMTU / 1000
}

// measureFreshBeside opens the stalled downloads, waits, and times the
// fresh one beside them.
func measureFreshBeside(ctx context.Context, dial Dialer, emu *linkemu.Emulator, spec StalledSpec, c Condition) *FreshBeside {
	res := &FreshBeside{Stalled: spec.Stalled}
	var fe firstErr
	defer func() { res.Err = fe.String() }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := emu.Counters()
	var (
		mu     sync.Mutex
		conns  []net.Conn
		opened atomic.Int64
		wg     sync.WaitGroup
	)
	defer func() {
		mu.Lock()
		for _, conn := range conns {
			abort(conn)
		}
		mu.Unlock()
		wg.Wait()
	}()
	for range spec.Stalled {
		wg.Go(func() {
			conn, err := dial(ctx)
			if err != nil {
				fe.set(fmt.Errorf("stalled dial: %w", err))
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
			defer stop()
			if _, err := io.WriteString(conn, request{mode: modeBulk}.String()); err != nil {
				fe.set(fmt.Errorf("stalled request: %w", err))
				return
			}
			var one [1]byte
			if _, err := io.ReadFull(conn, one[:]); err != nil {
				if ctx.Err() == nil {
					fe.set(fmt.Errorf("stalled first byte: %w", err))
				}
				return
			}
			opened.Add(1) // and reads nothing more
		})
	}
	select {
	case <-ctx.Done():
		return res
	case <-time.After(spec.Wait):
	}
	atWait := emu.Counters()
	res.WaitKB = payloadKB(start, atWait)
	// At the payload limit the download takes size/capacity; ten times
	// that has failed to get its share.
	limit := time.Duration(float64(spec.FreshBytes)/c.PayloadCapacity()*float64(time.Second))*10 + 30*time.Second
	t := timedGet(ctx, dial, spec.FreshBytes, limit)
	end := emu.Counters()
	res.Opened = int(opened.Load())
	res.Bytes = t.bytes
	res.Done = t.bytes == int64(spec.FreshBytes)
	if t.err != nil {
		fe.set(fmt.Errorf("fresh download: %w", t.err))
	}
	res.StalledKB = payloadKB(start, end) - float64(t.bytes)/1000
	if t.first <= 0 || t.last <= t.first {
		return res
	}
	capacity := c.PayloadCapacity()
	res.TTFBMs, res.TookMs = ms(t.first), ms(t.last)
	res.KBps = float64(t.bytes) / t.last.Seconds() / 1000
	res.WholeShare = res.KBps * 1000 / capacity
	from := t.first + steadyAfterRTTs*c.RTT
	if at := t.bytesAt(from); from < t.last {
		res.SteadyKBps = float64(t.bytes-at) / (t.last - from).Seconds() / 1000
		res.SteadyShare = res.SteadyKBps * 1000 / capacity
	}
	return res
}

// timed is one download's reads: when each ended and the bytes so far.
type timed struct {
	bytes       int64
	first, last time.Duration // from the dial
	samples     []Sample
	err         error
}

// bytesAt is how many bytes had arrived at t from the dial.
func (t *timed) bytesAt(at time.Duration) int64 {
	var b int64
	for _, s := range t.samples {
		if s.T > at {
			break
		}
		b = s.Bytes
	}
	return b
}

// timedGet downloads size bytes, noting the time of every read, within
// limit.
func timedGet(ctx context.Context, dial Dialer, size int, limit time.Duration) *timed {
	res := &timed{}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	start := time.Now()
	conn, err := dial(ctx)
	if err != nil {
		res.err = fmt.Errorf("dial: %w", err)
		return res
	}
	defer abort(conn)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := io.WriteString(conn, request{mode: modeGet, size: size}.String()); err != nil {
		res.err = fmt.Errorf("request: %w", err)
		return res
	}
	buf := make([]byte, 64<<10)
	for res.bytes < int64(size) {
		n, err := conn.Read(buf)
		if n > 0 {
			now := time.Since(start)
			if res.bytes == 0 {
				res.first = now
			}
			res.bytes += int64(n)
			res.last = now
			res.samples = append(res.samples, Sample{T: now, Bytes: res.bytes})
		}
		if err != nil {
			res.err = fmt.Errorf("after %d bytes: %w", res.bytes, err)
			break
		}
	}
	return res
}

// measureSlowBeside runs a bulk download and a reader of spec.SlowRate
// side by side for d, and weighs the link's bytes against the bulk
// download's.
func measureSlowBeside(ctx context.Context, dial Dialer, emu *linkemu.Emulator, spec StalledSpec, c Condition, d time.Duration) *SlowBeside {
	res := &SlowBeside{TargetKBps: float64(spec.SlowRate) / 1000}
	var fe firstErr
	defer func() { res.Err = fe.String() }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var bulk, slow atomic.Int64
	var wg sync.WaitGroup
	get := func(count *atomic.Int64, rate int) {
		conn, err := dial(ctx)
		if err != nil {
			fe.set(fmt.Errorf("dial: %w", err))
			return
		}
		defer abort(conn)
		stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
		defer stop()
		if _, err := io.WriteString(conn, request{mode: modeBulk}.String()); err != nil {
			fe.set(fmt.Errorf("request: %w", err))
			return
		}
		size := 64 << 10
		if rate > 0 {
			size = max(rate/50, 1) // about 20 ms of reading at a time
		}
		buf := make([]byte, size)
		began := time.Now()
		for {
			if rate > 0 {
				due := began.Add(time.Duration(float64(count.Load()) / float64(rate) * float64(time.Second)))
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(due)):
				}
			}
			n, err := conn.Read(buf)
			count.Add(int64(n))
			if err != nil {
				if ctx.Err() == nil {
					fe.set(err)
				}
				return
			}
		}
	}
	before := emu.Counters()
	start := time.Now()
	wg.Go(func() { get(&bulk, 0) })
	wg.Go(func() { get(&slow, spec.SlowRate) })
	wait := func(until time.Time) {
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(until)):
		}
	}
	wait(start.Add(d / 2))
	half, halfAt, halfBulk := emu.Counters(), time.Now(), bulk.Load()
	wait(start.Add(d))
	after := emu.Counters()
	window := time.Since(start).Seconds()
	b, s := bulk.Load(), slow.Load()
	cancel()
	wg.Wait()
	if late := time.Since(halfAt).Seconds(); late > 0 {
		res.LateCostKBps = payloadKB(half, after)/late - float64(b-halfBulk)/late/1000
	}
	res.BulkKBps = float64(b) / window / 1000
	res.SlowKBps = float64(s) / window / 1000
	res.BulkShare = res.BulkKBps * 1000 / c.PayloadCapacity()
	res.LinkKBps = payloadKB(before, after) / window
	res.CostKBps = res.LinkKBps - res.BulkKBps
	return res
}

// stalledSummary is RunSummary's line for a stalled-readers run.
func stalledSummary(r *Result) string {
	s := ""
	if f := r.Stalled.Fresh; f != nil {
		s += fmt.Sprintf("fresh beside %d stalled: %.0f kB/s (%.0f%% of the limit), %.0f%% after start-up, stalled took %.0f kB; ",
			f.Opened, f.KBps, f.WholeShare*100, f.SteadyShare*100, f.StalledKB)
	}
	if w := r.Stalled.Slow; w != nil {
		s += fmt.Sprintf("slow reader %.0f kB/s costs %.0f kB/s (%.0f in the second half), bulk %.0f%% of the limit", w.SlowKBps, w.CostKBps, w.LateCostKBps, w.BulkShare*100)
	}
	if r.Note != "" {
		s += " (" + r.Note + ")"
	}
	return s
}

// renderStalled writes the stalled-readers table.
func (rep *Report) renderStalled(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("## Stalled and slow readers\n\n")
	p("Fresh: the fresh download beside the stalled ones, kB/s and share of the payload limit from its dial to its last byte, and after its start-up (from %d RTTs after its first byte). "+
		"Stalled took: what the link carried toward the clients beyond the fresh download from the stalled downloads' dials to its last byte (payload equivalent). "+
		"Slow: the slow reader's rate, what it cost the link (the link's bytes beyond the bulk download's) over the whole window and over its second half, and the bulk download's share of the limit.\n\n", steadyAfterRTTs)
	p("| condition | contender | fresh kB/s (share) | after start-up | first byte ms | stalled took kB | slow reader kB/s | its cost kB/s (second half) | bulk beside it |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	rep.workloadRows(w, 7, func(r *Result) bool {
		return r.Stalled != nil && r.Stalled.Fresh != nil && r.Stalled.Slow != nil
	}, func(r *Result) string {
		f, s := r.Stalled.Fresh, r.Stalled.Slow
		return fmt.Sprintf("%.0f (%.0f%%) | %.0f (%.0f%%) | %.0f | %.0f | %.0f | %.0f (%.0f) | %.0f%%",
			f.KBps, f.WholeShare*100, f.SteadyKBps, f.SteadyShare*100, f.TTFBMs, f.StalledKB, s.SlowKBps, s.CostKBps, s.LateCostKBps, s.BulkShare*100)
	})
	p("\n")
}
