package bench

// This file owns the careful-resume workload: the first download of a
// given size after the path was learned, in the cases where the tunnel
// must start from what it learned rather than from nothing
// (docs/careful-resume.md):
//   - idle-then-burst: the download after the association carried a
//     warm-up download and then sat idle;
//   - new-association: the first download on a new association to a
//     known peer (the near endpoint, site A, restarted; the far one keeps
//     the path in memory);
//   - restart-then-burst: the far endpoint (site B, the sender) restarted
//     with its state_dir kept: the path comes from its file;
//   - capacity-fell: on a second testbed, the path learned at the
//     condition's rate, then the rate fell to a fifth (and with it the
//     modem's queue, one bandwidth-delay product at the rate in force)
//     before the far endpoint restarted and the download began.
// Each download is timed from its dial to its last byte against its
// floor (a round trip plus its bytes at the payload capacity), with the
// time from its first byte to the first round trip that carried 90% of
// the payload limit, and the download direction's queue drops. Kernel
// TCP runs the same sequence on new connections (nothing to restart).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"scpsvpn/cmd/internal/linkemu"
	"scpsvpn/cmd/internal/testbed"
)

// WorkloadResume is the careful-resume workload.
const WorkloadResume = "resume"

// The cases of the careful-resume workload, in the order they run.
const (
	CaseIdleBurst    = "idle-then-burst"
	CaseNewAssoc     = "new-association"
	CaseRestartBurst = "restart-then-burst"
	CaseCapacityFell = "capacity-fell"
)

// ResumeSpec sizes the careful-resume workload.
type ResumeSpec struct {
	Bytes int64 `json:"bytes"` // of each measured download
	// WarmS is the warm-up download that teaches the path, IdleS the
	// idle time before idle-then-burst, in seconds.
	WarmS float64 `json:"warm_s"`
	IdleS float64 `json:"idle_s"`
}

// DefaultResume is the workload the targets are set for: 5 MB after 60 s
// of idle, a 10 s warm-up (the endpoints record the path every 10 s and
// when an association ends).
var DefaultResume = ResumeSpec{Bytes: 5_000_000, WarmS: 10, IdleS: 60}

func (s ResumeSpec) check() error {
	switch {
	case s.Bytes < 10_000 || s.Bytes > maxGetSize:
		return fmt.Errorf("--burst-kb %d: use 10 to %d", s.Bytes/1000, maxGetSize/1000)
	case s.WarmS < 1 || s.WarmS > 600:
		return fmt.Errorf("--warm %vs: use 1s to 10m", s.WarmS)
	case s.IdleS < 0 || s.IdleS > 3600:
		return fmt.Errorf("--idle %vs: use 0 to 1h", s.IdleS)
	}
	return nil
}

// Describe says what each run did, for the report.
func (s ResumeSpec) Describe() string {
	return fmt.Sprintf("a %s warm-up download from site B (server) to site A (client), then %d-byte downloads on new connections: after %s idle (%s), "+
		"after site A's endpoint restarted (%s: the far endpoint keeps the path in memory), after site B's endpoint restarted with its state_dir (%s); "+
		"then on a second testbed whose drop-tail queue is one bandwidth-delay product at the rate in force, the warm-up, the download rate cut to a fifth, "+
		"site B's endpoint restarted, and the download (%s). Kernel TCP runs the same downloads on new connections",
		fmtSeconds(s.WarmS), s.Bytes, fmtSeconds(s.IdleS), CaseIdleBurst, CaseNewAssoc, CaseRestartBurst, CaseCapacityFell)
}

// ResumeResult is what a careful-resume run measured.
type ResumeResult struct {
	Bytes  int64         `json:"bytes"`
	Bursts []BurstResult `json:"bursts"`
}

// BurstResult is one measured download of the careful-resume workload.
type BurstResult struct {
	Case string `json:"case"`
	// Ms is from the dial to the last byte; FloorMs a round trip plus the
	// bytes at the payload capacity of the rate in force; FloorShare the
	// floor over Ms (1 = at the floor).
	Ms         float64 `json:"ms"`
	FloorMs    float64 `json:"floor_ms"`
	FloorShare float64 `json:"floor_share"`
	// To90RTTs is, in round trips from the first byte, the start of the
	// first round trip (at least rateWindowMin) that carried 90% of the
	// payload limit; absent if none did.
	To90RTTs *float64 `json:"to_90pct_rtts,omitempty"`
	// AfterShare is the goodput from three round trips after the first
	// byte to the last over the payload limit (capacity-fell: is the rate
	// right once the retreat is over).
	AfterShare float64 `json:"share_after_3_rtts"`
	// ThirdRTTShare is the goodput of the third round trip from the
	// first byte over the payload limit (capacity-fell: the rate is
	// right within 3 RTT); absent if the download ended before it.
	ThirdRTTShare *float64 `json:"share_third_rtt,omitempty"`
	QueueDropPct  float64  `json:"queue_drops_pct"`
	// ResumedKbps is the saved rate the far endpoint logged it resumed
	// at for this download's association (scpsvpn; 0: it did not resume).
	ResumedKbps float64 `json:"resumed_kbps,omitempty"`
	// Phase is the far endpoint's careful resume phase at the
	// download's end (its status: off, validated, retreated (rtt), ...).
	Phase string `json:"resume_phase,omitempty"`
	Err   string `json:"error,omitempty"`
}

// resumeFall is the rate cut of capacity-fell: to a fifth.
const resumeFall = 5

func runResume(ctx context.Context, rc RunConfig, r *Result) error {
	c := rc.Condition
	if c.Timed() || c.OutageEvery != (linkemu.Periodic{}) {
		return fmt.Errorf("the careful-resume workload runs on conditions without a rate schedule or outages; %s has one", c.Name)
	}
	spec := rc.Resume
	if spec.Bytes == 0 {
		spec = DefaultResume
	}
	res := &ResumeResult{Bytes: spec.Bytes}
	r.Resume = res
	var cc ccCheck
	err := resumeSequence(ctx, rc, spec, &cc, res)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err == nil {
		err = resumeFell(ctx, rc, spec, &cc, res)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.TCPCongestion = cc.String()
	for _, b := range res.Bursts {
		r.PayloadBytes += spec.Bytes
		if b.Err != "" {
			r.Note = strings.TrimPrefix(r.Note+"; ", "; ") + b.Case + ": " + b.Err
		}
	}
	if err != nil && len(res.Bursts) == 0 {
		return err
	}
	if err != nil {
		r.Note = strings.TrimPrefix(r.Note+"; ", "; ") + oneLine(err.Error())
	}
	r.Status = StatusOK
	return nil
}

// resumeBed is one testbed of the workload with its server and dialer.
type resumeBed struct {
	tb   *testbed.Testbed
	rc   RunConfig
	srv  *Server
	dial Dialer
}

// newResumeBed builds a testbed on link, starts the endpoints (scpsvpn)
// or the kernel sockets, and serves downloads in site B.
func newResumeBed(ctx context.Context, rc RunConfig, link linkemu.Options, cc *ccCheck, logName string) (*resumeBed, context.Context, func(*error), error) {
	cfg := testbed.Config{Kind: testbed.Emulated, Link: link, Endpoints: testbed.Endpoints{Binary: rc.Binary, LogLevel: "info", Logger: rc.Logger}}
	scps := rc.Contender.IsSCPS()
	if scps {
		if rc.Binary == "" {
			return nil, nil, nil, errors.New("no endpoint binary")
		}
		cfg.PeerLinkA, cfg.PeerLinkB = rc.Condition.PeerLinks(rc.Contender.Congestion)
	} else {
		logName = ""
	}
	tb, ctx, done, err := runTestbed(ctx, rc, cfg, logName)
	if err != nil {
		return nil, nil, nil, err
	}
	b := &resumeBed{tb: tb, rc: rc}
	if scps {
		b.srv, b.dial, err = scpsPath(ctx, tb, rc)
	} else {
		b.srv, b.dial, err = kernelPath(tb, rc.Contender.Kernel, cc, rc.Logger)
	}
	if err != nil {
		done(&err)
		return nil, nil, nil, err
	}
	stop := func(err *error) {
		b.srv.Close()
		if serr := b.srv.Err(); serr != nil && *err == nil {
			*err = serr
		}
		done(err)
	}
	return b, ctx, stop, nil
}

// warm runs the warm-up download that teaches the path.
func (b *resumeBed) warm(ctx context.Context, spec ResumeSpec) error {
	t := Measure(ctx, TransferConfig{Dial: b.dial, Duration: time.Duration(spec.WarmS * float64(time.Second))})
	if t.Bytes == 0 {
		return fmt.Errorf("the warm-up download carried nothing: %v", t.Err)
	}
	return nil
}

// restart stops the endpoint of side (SIGTERM: it saves its path state),
// starts it again with the same configuration and state_dir, and waits
// for a new association on both sides.
func (b *resumeBed) restart(ctx context.Context, side testbed.Side, between func() error) error {
	before := [2]int{associationsUp(b.tb, testbed.A), associationsUp(b.tb, testbed.B)}
	if code, err := b.tb.StopEndpoint(side, syscall.SIGTERM); err != nil || code != 0 {
		return fmt.Errorf("stopping the endpoint of %s: exit %d, %v", side, code, err)
	}
	if between != nil {
		if err := between(); err != nil {
			return err
		}
	}
	if err := b.tb.StartEndpoint(side); err != nil {
		return fmt.Errorf("the endpoint of %s did not start again: %s", side, briefStartError(err))
	}
	wait := 10*time.Second + 3*b.rc.Condition.RTT
	deadline := time.Now().Add(wait)
	for associationsUp(b.tb, testbed.A) <= before[0] || associationsUp(b.tb, testbed.B) <= before[1] {
		if time.Now().After(deadline) {
			return fmt.Errorf("no new association within %v of the restart of %s: %s", wait, side, orUnknown(endpointComplaint(b.tb)))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// associationsUp counts the "association up" lines of side's log (the
// testbed appends across restarts).
func associationsUp(tb *testbed.Testbed, side testbed.Side) int {
	b, _ := os.ReadFile(tb.Site(side).LogFile)
	return strings.Count(string(b), "association up")
}

// resumedKbps is the rate of the last "resuming at the path saved" line
// side's log gained since it held before bytes (0: none).
func resumedKbps(tb *testbed.Testbed, side testbed.Side, before int) float64 {
	b, _ := os.ReadFile(tb.Site(side).LogFile)
	if before > len(b) {
		return 0
	}
	var kbps float64
	for line := range strings.SplitSeq(string(b[before:]), "\n") {
		if !strings.Contains(line, "resuming at the path saved") {
			continue
		}
		for f := range strings.FieldsSeq(line) {
			if v, ok := strings.CutPrefix(f, "rate_bps="); ok {
				var bps float64
				if _, err := fmt.Sscan(v, &bps); err == nil {
					kbps = bps / 1000
				}
			}
		}
	}
	return kbps
}

// resumePhase is site B's careful resume phase toward A, from its
// status ("?" if it cannot be read).
func resumePhase(tb *testbed.Testbed, binary string) string {
	out, err := tb.Command(testbed.B, binary, "status", "--json", "--interface", tb.Site(testbed.B).TUNName).Output()
	var st struct {
		Peers []struct {
			Association struct{ Resume, ResumeRetreat string }
		} `json:"peers"`
	}
	if err != nil || json.Unmarshal(out, &st) != nil || len(st.Peers) != 1 || st.Peers[0].Association.Resume == "" {
		return "?"
	}
	a := st.Peers[0].Association
	if a.ResumeRetreat != "" {
		return a.Resume + " (" + a.ResumeRetreat + ")"
	}
	return a.Resume
}

func logSize(tb *testbed.Testbed, side testbed.Side) int {
	fi, err := os.Stat(tb.Site(side).LogFile)
	if err != nil {
		return 0
	}
	return int(fi.Size())
}

// burst runs one measured download under cond (the rate in force) and
// records it as case name; logFrom is site B's log size before the
// association it runs on began (-1: the association did not begin for it).
func (b *resumeBed) burst(ctx context.Context, name string, cond Condition, spec ResumeSpec, logFrom int) BurstResult {
	br := BurstResult{Case: name, FloorMs: ms(cond.RTT + time.Duration(float64(spec.Bytes)/cond.PayloadCapacity()*float64(time.Second)))}
	emu := b.tb.Emulator()
	before := emu.Counters()
	// A download slower than several times its floor has failed to
	// start from anything; the bound only keeps a stuck run from holding
	// the matrix.
	limit := 6*time.Duration(br.FloorMs*float64(time.Millisecond)) + 30*time.Second
	d, err := sizedDownload(ctx, b.dial, spec.Bytes, limit)
	br.QueueDropPct = QueueDropPct(CountersDelta(before, emu.Counters()))
	if b.rc.Contender.IsSCPS() {
		if logFrom >= 0 {
			br.ResumedKbps = resumedKbps(b.tb, testbed.B, logFrom)
		}
		br.Phase = resumePhase(b.tb, b.rc.Binary)
	}
	if err != nil {
		br.Err = oneLine(err.Error())
		return br
	}
	br.figures(d, cond, spec.Bytes)
	return br
}

// figures fills in what the download d of n bytes measured under cond
// (the rate in force).
func (br *BurstResult) figures(d *sized, cond Condition, n int64) {
	br.Ms = ms(d.took)
	br.FloorShare = br.FloorMs / br.Ms
	if at, ok := timeToRateFrom(d.samples, cond, cond.RTT, rateTarget, d.ttfb); ok {
		br.To90RTTs = ptr(float64(at-d.ttfb) / float64(cond.RTT))
	}
	from := d.ttfb + 3*cond.RTT
	if d.took >= from {
		third := d.ttfb + 2*cond.RTT
		br.ThirdRTTShare = ptr((BytesAt(d.samples, from) - BytesAt(d.samples, third)) / cond.PayloadLimit(third, from))
	}
	if d.took > from {
		got := float64(n) - BytesAt(d.samples, from)
		br.AfterShare = got / cond.PayloadLimit(from, d.took)
	}
}

// resumeGoal is the figure for the case: the rate (90% of the
// payload limit over a round trip) reached within 2 RTT of the first
// byte; on the fallen path, queue drops < 2% and the third round trip at
// the rate (90% of the new limit).
func (b BurstResult) resumeGoal() string {
	met := b.To90RTTs != nil && *b.To90RTTs <= 2
	if b.Case == CaseCapacityFell {
		met = b.QueueDropPct < 2 && b.ThirdRTTShare != nil && *b.ThirdRTTShare >= rateTarget
	}
	if met {
		return "met"
	}
	return "not met"
}

// resumeSequence runs idle-then-burst, new-association and
// restart-then-burst on one testbed.
func resumeSequence(ctx context.Context, rc RunConfig, spec ResumeSpec, cc *ccCheck, res *ResumeResult) (err error) {
	c := rc.Condition
	b, ctx, stop, err := newResumeBed(ctx, rc, c.LinkOptions(rc.Seed), cc, rc.Contender.Name)
	if err != nil {
		return err
	}
	defer stop(&err)
	if err := b.warm(ctx, spec); err != nil {
		return err
	}
	logFrom := -1 // the association the warm-up ran on
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Duration(spec.IdleS * float64(time.Second))):
	}
	res.Bursts = append(res.Bursts, b.burst(ctx, CaseIdleBurst, c, spec, logFrom))
	for _, step := range []struct {
		name string
		side testbed.Side
	}{{CaseNewAssoc, testbed.A}, {CaseRestartBurst, testbed.B}} {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		logFrom = logSize(b.tb, testbed.B)
		if rc.Contender.IsSCPS() {
			if err := b.restart(ctx, step.side, nil); err != nil {
				return fmt.Errorf("%s: %w", step.name, err)
			}
		}
		res.Bursts = append(res.Bursts, b.burst(ctx, step.name, c, spec, logFrom))
	}
	return nil
}

// resumeFell runs capacity-fell on a testbed of its own: the path learned
// at the condition's rate, then the download rate cut to a fifth, with a
// drop-tail queue of one bandwidth-delay product at the rate in force (the
// queue shrinks with the rate, so the jump cannot hide in it).
func resumeFell(ctx context.Context, rc RunConfig, spec ResumeSpec, cc *ccCheck, res *ResumeResult) (err error) {
	c := rc.Condition
	fell := c
	fell.Down = c.Down / resumeFall
	lead := setupLead(rc)
	warm := time.Duration(spec.WarmS * float64(time.Second))
	fallAt := lead + warm + 2*time.Second
	link := c.LinkOptions(rc.Seed)
	link.Ret.QueueTime = c.RTT
	link.Ret.RateSchedule = []linkemu.RateStep{{At: fallAt, Rate: fell.Down}}
	b, ctx, stop, err := newResumeBed(ctx, rc, link, cc, rc.Contender.Name+"-fell")
	if err != nil {
		return err
	}
	defer stop(&err)
	// The warm-up runs as soon as the association is up, as on the
	// first testbed (runs whose warm-up waited for the lead first, on a
	// loaded machine, left 2.0-7.1 Mbit/s saved, the first testbed's
	// 9.6-9.7), and the far endpoint waits out the rest of the lead
	// stopped.
	emu := b.tb.Emulator()
	if err := b.warm(ctx, spec); err != nil {
		return fmt.Errorf("%s: %w", CaseCapacityFell, err)
	}
	if at := emu.Elapsed(); at > fallAt {
		return fmt.Errorf("%s: the warm-up ended at %v of the link's clock, after the rate fell at %v: setup took longer than the %v allowed", CaseCapacityFell, at.Round(time.Millisecond), fallAt, lead)
	}
	afterFall := func() error {
		return waitClock(ctx, emu.Elapsed, fallAt+c.RTT)
	}
	logFrom := logSize(b.tb, testbed.B)
	if rc.Contender.IsSCPS() {
		err = b.restart(ctx, testbed.B, afterFall)
	} else {
		err = afterFall()
	}
	if err != nil {
		return fmt.Errorf("%s: %w", CaseCapacityFell, err)
	}
	res.Bursts = append(res.Bursts, b.burst(ctx, CaseCapacityFell, fell, spec, logFrom))
	return nil
}

// sized is a finished sized download.
type sized struct {
	took, ttfb time.Duration
	samples    []Sample // cumulative bytes every resumeSampleEvery from the dial
}

// resumeSampleEvery is the resolution of a sized download's samples: a
// 5 MB download at 10 Mbit/s lasts four seconds.
const resumeSampleEvery = 50 * time.Millisecond

// sizedDownload downloads n bytes on a new connection within limit.
func sizedDownload(ctx context.Context, dial Dialer, n int64, limit time.Duration) (*sized, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	start := time.Now()
	c, err := dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("dialing: %w", err)
	}
	defer c.Close()
	stopDeadline := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stopDeadline()
	if _, err := io.WriteString(c, request{mode: modeGet, size: int(n)}.String()); err != nil {
		return nil, fmt.Errorf("sending the request: %w", err)
	}
	var got atomic.Int64
	d := &sized{samples: []Sample{{}}}
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(resumeSampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				d.samples = append(d.samples, Sample{T: time.Since(start), Bytes: got.Load()})
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for got.Load() < n {
		k, err := c.Read(buf)
		if k > 0 && got.Load() == 0 {
			d.ttfb = time.Since(start)
		}
		got.Add(int64(k))
		if err != nil && got.Load() < n {
			close(done)
			<-sampled
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%d of %d bytes within %v: %w", got.Load(), n, limit.Round(time.Second), ctx.Err())
			}
			return nil, fmt.Errorf("%d of %d bytes: %w", got.Load(), n, err)
		}
	}
	d.took = time.Since(start)
	close(done)
	<-sampled
	d.samples = append(d.samples, Sample{T: d.took, Bytes: n})
	return d, nil
}

// resumeSummary is RunSummary's line for a careful-resume run.
func resumeSummary(r *Result) string {
	var parts []string
	for _, b := range r.Resume.Bursts {
		if b.Err != "" {
			parts = append(parts, b.Case+" failed")
			continue
		}
		s := fmt.Sprintf("%s %.2f s (%.0f%% of its floor", b.Case, b.Ms/1000, 100*b.FloorShare)
		if b.To90RTTs != nil {
			s += fmt.Sprintf(", 90%% after %.1f RTT", *b.To90RTTs)
		}
		if b.QueueDropPct > 0 {
			s += fmt.Sprintf(", drops %.2f%%", b.QueueDropPct)
		}
		parts = append(parts, s+")")
	}
	s := strings.Join(parts, "; ")
	if r.Note != "" {
		s += " (" + r.Note + ")"
	}
	return s
}

// renderResume is the report's careful-resume table.
func (rep *Report) renderResume(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("## Careful resume\n\n")
	p("Each %d-byte download from its dial to its last byte (s), and that time against its floor (a round trip plus its bytes at the payload capacity of the rate in force: 100%% = at the floor); "+
		"90%%: round trips from its first byte to the start of the first round trip that carried 90%% of the payload limit; 3rd RTT: the goodput of the third round trip from the first byte over the limit; "+
		"after 3 RTT: the goodput from three round trips after the first byte to the last byte over the limit; "+
		"drops: the download direction's drop-tail losses; resumed: the saved rate the far endpoint logged it resumed at, and its careful resume phase at the download's end (scpsvpn); "+
		"goal: 90%% within 2 RTT (idle-then-burst, new-association, restart-then-burst), and for capacity-fell drops < 2%% and the 3rd RTT at 90%% of the new limit (the rate right within 3 RTT).\n\n", rep.resumeBytes())
	p("| condition | contender | case | s | of floor | 90%% (RTT) | 3rd RTT | after 3 RTT | drops | resumed | goal |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, c := range rep.Conditions {
		for _, ct := range rep.Contenders {
			r := rep.result(c.Name, ct.Name)
			if r == nil {
				continue
			}
			if !r.OK() || r.Resume == nil {
				p("| %s | %s | %s | | | | | | | | |\n", c.Name, ct.Name, statusWord(r.Status))
				continue
			}
			for _, b := range r.Resume.Bursts {
				if b.Err != "" {
					p("| %s | %s | %s | failed | | | | | | | not met |\n", c.Name, ct.Name, b.Case)
					continue
				}
				resumed := "-"
				if b.ResumedKbps > 0 {
					resumed = fmt.Sprintf("%.0f kbit/s", b.ResumedKbps)
				}
				if b.Phase != "" {
					resumed += ", " + b.Phase
				}
				third := "-"
				if b.ThirdRTTShare != nil {
					third = fmt.Sprintf("%.0f%%", 100**b.ThirdRTTShare)
				}
				p("| %s | %s | %s | %.2f | %.0f%% | %s | %s | %.0f%% | %.2f%% | %s | %s |\n", c.Name, ct.Name, b.Case, b.Ms/1000, 100*b.FloorShare,
					rttsCell(b.To90RTTs), third, 100*b.AfterShare, b.QueueDropPct, resumed, b.resumeGoal())
			}
		}
	}
	p("\n")
}

func (rep *Report) resumeBytes() int64 {
	if rep.Resume != nil {
		return rep.Resume.Bytes
	}
	return DefaultResume.Bytes
}
