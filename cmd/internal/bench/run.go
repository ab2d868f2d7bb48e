package bench

// This file owns one run: a fresh two-site testbed over the emulated link
// of a condition, the server in site B and the measuring client in site A,
// connected either end to end by kernel TCP with a chosen congestion
// control (over the underlay), or through both scpsvpn endpoints (to B's
// TUN address). Every run builds and tears down its own testbed, so runs
// cannot disturb each other, and a signal tears it down at once. A run that
// cannot measure is recorded as "failed: <reason>", never a panic or an
// abort of the whole benchmark.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"scpsvpn/cmd/internal/linkemu"
	"scpsvpn/cmd/internal/testbed"
)

// RunConfig describes one run.
type RunConfig struct {
	Condition Condition
	Contender Contender
	Duration  time.Duration
	Binary    string // the endpoint binary, for scpsvpn contenders
	Seed      uint64 // loss seed; the same for every contender of a condition
	Probe     bool   // run the request/response probe during the download
	// ProbeEvery and ProbeSize shape the probe; default 500ms and 100 bytes.
	ProbeEvery time.Duration
	ProbeSize  int
	Progress   func(Progress) // may be nil
	LogDir     string         // when set, the endpoint logs are kept here
	Logger     *slog.Logger   // testbed and emulator messages
	// Workload is WorkloadDownload ("" too) or WorkloadPage, which loads
	// Page instead of downloading (DefaultPage when zero).
	// WorkloadFlows runs the many-flows workload (Flows, DefaultFlows
	// when zero).
	// WorkloadStalled runs the stalled-readers workload (Stalled,
	// DefaultStalled when zero).
	Workload string
	Page     PageSpec
	Flows    FlowsSpec
	Stalled  StalledSpec
	Resume   ResumeSpec // the careful-resume workload's sizes (DefaultResume when zero)
	// AssociationTimeout bounds the wait for both endpoints to report the
	// association up; default 10s plus three round trips.
	AssociationTimeout time.Duration
}

// Run measures one contender under one condition. It always returns a
// Result; Status says whether it measured.
func Run(ctx context.Context, rc RunConfig) *Result {
	rc.Duration = rc.Condition.RunDuration(rc.Duration)
	r := &Result{Condition: rc.Condition.Name, Contender: rc.Contender.Name, Label: rc.Contender.Label(), DurationS: rc.Duration.Seconds()}
	if err := run(ctx, rc, r); err != nil {
		if ctx.Err() != nil {
			r.Status = "interrupted"
		} else {
			r.Status = "failed: " + oneLine(err.Error())
		}
	}
	return r
}

func run(ctx context.Context, rc RunConfig, r *Result) (err error) {
	if rc.Logger == nil {
		rc.Logger = slog.Default()
	}
	if rc.Contender.Share != "" {
		return runShare(ctx, rc, r)
	}
	if rc.Workload == WorkloadPage {
		return runPage(ctx, rc, r)
	}
	if rc.Workload == WorkloadFlows {
		return runFlows(ctx, rc, r)
	}
	if rc.Workload == WorkloadStalled {
		return runStalled(ctx, rc, r)
	}
	if rc.Workload == WorkloadResume {
		return runResume(ctx, rc, r)
	}
	if rc.Workload == WorkloadMultipath || rc.Condition.Second != nil {
		return runMultipath(ctx, rc, r)
	}
	if rc.ProbeEvery <= 0 {
		rc.ProbeEvery = 500 * time.Millisecond
	}
	if rc.ProbeSize <= 0 {
		rc.ProbeSize = 100
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := rc.Condition
	// A condition with timed events starts its transfer on the emulator's
	// clock, lead after the link came up, so every contender meets the
	// rate change or the outage at the same point of its transfer.
	var lead time.Duration
	if c.Timed() {
		lead = setupLead(rc)
	}
	cfg := testbed.Config{
		Kind: testbed.Emulated,
		Link: c.LinkOptionsAt(rc.Seed, lead),
		Endpoints: testbed.Endpoints{
			Binary:   rc.Binary,
			LogLevel: "info", // debug logging would cost the endpoints CPU the benchmark measures
			Logger:   rc.Logger,
		},
	}
	if rc.Contender.IsSCPS() {
		if rc.Binary == "" {
			return errors.New("no endpoint binary")
		}
		cfg.PeerLinkA, cfg.PeerLinkB = c.PeerLinks(rc.Contender.Congestion)
	}
	tb, err := testbed.New(cfg)
	if err != nil {
		return fmt.Errorf("building the testbed: %w", err)
	}
	defer func() {
		if rc.LogDir != "" && rc.Contender.IsSCPS() {
			keepLogs(tb, rc.LogDir, c.Name, rc.Contender.Name)
		}
		if cerr := tb.Close(); cerr != nil && err == nil && ctx.Err() == nil {
			err = fmt.Errorf("tearing the testbed down: %w", cerr)
		}
	}()
	// Ctrl-C tears the testbed down first, then ends the run.
	stopSignals := tb.CloseOnSignal(func(os.Signal) { cancel() })
	defer stopSignals()

	var cc ccCheck
	srv, dial, err := contenderPath(ctx, tb, rc, &cc)
	if err != nil {
		return err
	}
	defer srv.Close()
	if ctx.Err() != nil {
		return ctx.Err()
	}

	tc := TransferConfig{Dial: dial, Duration: rc.Duration, Progress: rc.Progress}
	if rc.Probe {
		tc.RequestEvery, tc.RequestSize = rc.ProbeEvery, rc.ProbeSize
	}
	emu := tb.Emulator()
	if c.Timed() {
		if err := waitClock(ctx, emu.Elapsed, lead); err != nil {
			return fmt.Errorf("setup took longer than the %v the schedule allows: %w", lead, err)
		}
	}
	var late time.Duration // how late the transfer starts against a timed condition's schedule
	if c.Timed() {
		late = emu.Elapsed() - lead
	}
	var during chan linkemu.Counters
	if w := c.Outage; w != (linkemu.Outage{}) {
		during = make(chan linkemu.Counters, 1)
		go countersBetween(ctx, emu, lead+w.Start, lead+w.Start+w.Duration, during)
	}
	before := emu.Counters()
	stopLog := func() {}
	if rc.LogDir != "" && rc.Contender.IsSCPS() && os.MkdirAll(rc.LogDir, 0o755) == nil {
		name := fmt.Sprintf("%s_%s_sender.tsv", fileSafe(c.Name), fileSafe(rc.Contender.Name))
		stopLog = logSender(ctx, tb, emu, filepath.Join(rc.LogDir, name), senderLogEvery, nil)
	}
	t := Measure(ctx, tc)
	stopLog()
	after := emu.Counters()
	srv.Close()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	delta := CountersDelta(before, after)
	summarize(r, c, t, delta, rc.Probe)
	var outageDelta *linkemu.Counters
	select {
	case d := <-during:
		outageDelta = &d
	default: // the window ended before the outage did
	}
	summarizeTransport(r, c, t, delta, late, outageDelta)
	r.TCPCongestion = cc.String()
	if err := srv.Err(); err != nil {
		return err // the server could not set or keep the congestion control
	}
	if t.Bytes == 0 {
		why := "no payload arrived within " + rc.Duration.String()
		if t.Err != nil {
			why += ": " + t.Err.Error()
		}
		if rc.Contender.IsSCPS() {
			if s := endpointComplaint(tb); s != "" {
				why += "; endpoint log: " + s
			}
		}
		return errors.New(why)
	}
	if t.Err != nil {
		r.Note = "download ended early: " + oneLine(t.Err.Error())
	}
	if late > time.Second {
		r.Note = strings.TrimPrefix(r.Note+"; ", "; ") + fmt.Sprintf("the transfer started %v after the schedule's origin", late.Round(time.Millisecond))
	}
	r.Status = StatusOK
	return nil
}

// runTestbed builds a run's testbed. A signal tears it down and cancels the
// returned context; done, deferred with the run's error, keeps the
// endpoint logs under logName (when rc.LogDir is set and logName is not
// empty) and tears the testbed down, reporting a failure to in *err.
func runTestbed(ctx context.Context, rc RunConfig, cfg testbed.Config, logName string) (*testbed.Testbed, context.Context, func(err *error), error) {
	tb, err := testbed.New(cfg)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("building the testbed: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	stopSignals := tb.CloseOnSignal(func(os.Signal) { cancel() })
	done := func(err *error) {
		stopSignals()
		interrupted := ctx.Err() != nil
		cancel()
		if rc.LogDir != "" && logName != "" {
			keepLogs(tb, rc.LogDir, rc.Condition.Name, logName)
		}
		if cerr := tb.Close(); cerr != nil && *err == nil && !interrupted {
			*err = fmt.Errorf("tearing the testbed down: %w", cerr)
		}
	}
	return tb, ctx, done, nil
}

// setupLead is how long after the emulator starts a timed condition's
// transfer begins: more than the contender's setup can take (the scpsvpn
// association's timeout), so the transfer never starts late.
func setupLead(rc RunConfig) time.Duration {
	if !rc.Contender.IsSCPS() {
		return 2 * time.Second
	}
	wait := rc.AssociationTimeout
	if wait <= 0 {
		wait = 10*time.Second + 3*rc.Condition.RTT
	}
	return wait + time.Second
}

// waitClock waits until clock reads at least at; an error if it already
// read more than a second past it (the schedule is missed) or ctx ended.
func waitClock(ctx context.Context, clock func() time.Duration, at time.Duration) error {
	now := clock()
	if now > at+time.Second {
		return fmt.Errorf("the clock is at %v already", now.Round(time.Millisecond))
	}
	if now >= at {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(at - now):
		return nil
	}
}

// countersBetween sends the emulator's counters between two points of its
// clock (the outage window) on out, unless ctx ends first.
func countersBetween(ctx context.Context, emu *linkemu.Emulator, from, to time.Duration, out chan<- linkemu.Counters) {
	if waitClock(ctx, emu.Elapsed, from) != nil {
		return
	}
	a := emu.Counters()
	if waitClock(ctx, emu.Elapsed, to) != nil {
		return
	}
	out <- CountersDelta(a, emu.Counters())
}

// contenderPath is the run's server and dialer: through both endpoints
// for an scpsvpn contender, kernel TCP end to end (noting its congestion
// control in cc) otherwise.
func contenderPath(ctx context.Context, tb *testbed.Testbed, rc RunConfig, cc *ccCheck) (*Server, Dialer, error) {
	if rc.Contender.IsSCPS() {
		return scpsPath(ctx, tb, rc)
	}
	return kernelPath(tb, rc.Contender.Kernel, cc, rc.Logger)
}

// kernelPath sets up kernel TCP end to end over the underlay: the server
// listens on B's underlay address and the client in A dials it, both
// sockets with TCP_CONGESTION set to algo (per socket: a namespace may not
// be allowed to change its default).
func kernelPath(tb *testbed.Testbed, algo string, cc *ccCheck, log *slog.Logger) (*Server, Dialer, error) {
	ln, dial, err := kernelSockets(tb, algo, cc)
	if err != nil {
		return nil, nil, err
	}
	return Serve(ln, kernelAccepted(algo, cc), log), dial, nil
}

// kernelSockets is kernelPath's listener and dialer, for any server.
func kernelSockets(tb *testbed.Testbed, algo string, cc *ccCheck) (net.Listener, Dialer, error) {
	var ln net.Listener
	err := tb.Do(testbed.B, func() (err error) {
		lc := net.ListenConfig{Control: congestionControl(algo)}
		ln, err = lc.Listen(context.Background(), "tcp4", netip.AddrPortFrom(tb.B.Underlay.Addr(), 0).String())
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("kernel TCP %s: server socket: %w", algo, err)
	}
	addr := ln.Addr().String()
	dial := func(ctx context.Context) (net.Conn, error) {
		var c net.Conn
		err := tb.Do(testbed.A, func() (err error) {
			d := net.Dialer{Control: congestionControl(algo)}
			c, err = d.DialContext(ctx, "tcp4", addr)
			return err
		})
		if err != nil {
			return nil, err
		}
		got, err := getCongestion(c)
		if err == nil && got != algo {
			err = fmt.Errorf("client socket runs %q, not %q", got, algo)
		}
		if err != nil {
			c.Close()
			return nil, err
		}
		cc.client(got)
		return c, nil
	}
	return ln, dial, nil
}

// kernelAccepted is the server's hook on each accepted kernel socket.
// Accepted sockets inherit the listener's choice; setting it again makes
// sure, and reading it back proves it.
func kernelAccepted(algo string, cc *ccCheck) func(net.Conn) error {
	return func(c net.Conn) error {
		if err := setCongestion(c, algo); err != nil {
			return err
		}
		got, err := getCongestion(c)
		if err != nil {
			return err
		}
		cc.server(got)
		if got != algo {
			return fmt.Errorf("server socket runs %q, not %q", got, algo)
		}
		return nil
	}
}

// scpsPath starts both endpoints, waits for their association, and serves
// on B's TUN address; the client in A dials it through both endpoints.
func scpsPath(ctx context.Context, tb *testbed.Testbed, rc RunConfig) (*Server, Dialer, error) {
	return scpsPathOf(ctx, tb, rc, testbed.A, testbed.B)
}

// scpsPathOf is scpsPath between the sites client and server (A and B, or
// the second pair A2 and B2).
func scpsPathOf(ctx context.Context, tb *testbed.Testbed, rc RunConfig, client, server testbed.Side) (*Server, Dialer, error) {
	ln, dial, err := scpsSockets(ctx, tb, rc, client, server)
	if err != nil {
		return nil, nil, err
	}
	return Serve(ln, nil, rc.Logger), dial, nil
}

// scpsSockets is scpsPathOf's listener and dialer, for any server.
func scpsSockets(ctx context.Context, tb *testbed.Testbed, rc RunConfig, client, server testbed.Side) (net.Listener, Dialer, error) {
	for _, side := range []testbed.Side{client, server} {
		if err := tb.StartEndpoint(side); err != nil {
			return nil, nil, fmt.Errorf("the endpoint did not start: %s", briefStartError(err))
		}
	}
	wait := rc.AssociationTimeout
	if wait <= 0 {
		wait = 10*time.Second + 3*rc.Condition.RTT
	}
	if err := waitAssociation(ctx, tb, wait, client, server); err != nil {
		return nil, nil, err
	}
	var ln net.Listener
	addr4 := tb.Site(server).TUN4
	err := tb.Do(server, func() (err error) {
		ln, err = net.Listen("tcp4", netip.AddrPortFrom(addr4, 0).String())
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("server socket on %s: %w", addr4, err)
	}
	addr := ln.Addr().String()
	dial := func(ctx context.Context) (net.Conn, error) {
		return tb.DialContext(ctx, client, "tcp4", addr)
	}
	return ln, dial, nil
}

// waitAssociation waits until the endpoint logs of sides all report the
// association up, or an endpoint exits, or the timeout.
func waitAssociation(ctx context.Context, tb *testbed.Testbed, timeout time.Duration, sides ...testbed.Side) error {
	deadline := time.Now().Add(timeout)
	up := func(side testbed.Side) bool {
		b, _ := os.ReadFile(tb.Site(side).LogFile)
		return strings.Contains(string(b), "association up")
	}
	for {
		all := true
		for _, side := range sides {
			all = all && up(side)
		}
		if all {
			return nil
		}
		for _, side := range sides {
			if tb.PID(side) == 0 {
				return fmt.Errorf("the endpoint of %s exited: %s", side, orUnknown(endpointComplaint(tb)))
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the association did not come up within %v: %s", timeout, orUnknown(endpointComplaint(tb)))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// endpointComplaint returns the last error an endpoint logged (a slog
// ERROR line, or the CLI's "scpsvpn: ..." exit message), if any.
func endpointComplaint(tb *testbed.Testbed) string {
	var last string
	for _, side := range []testbed.Side{testbed.A, testbed.B} {
		f, err := os.Open(tb.Site(side).LogFile)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if strings.Contains(line, "level=ERROR") || strings.HasPrefix(line, "scpsvpn: ") {
				last = side.String() + ": " + line
			}
		}
		f.Close()
	}
	return truncate(last, 300)
}

// briefStartError keeps the testbed's start error but drops the log tail
// it appends, except for the endpoint's own error line.
func briefStartError(err error) string {
	msg := err.Error()
	head, tail, found := strings.Cut(msg, "log tail:")
	if !found {
		return truncate(oneLine(msg), 300)
	}
	var complaint string
	for line := range strings.SplitSeq(tail, "\n") {
		line = strings.TrimSpace(line)
		if strings.Contains(line, "level=ERROR") || strings.HasPrefix(line, "scpsvpn: ") {
			complaint = line
		}
	}
	if complaint != "" {
		return truncate(complaint, 300)
	}
	return truncate(oneLine(strings.TrimSuffix(strings.TrimSpace(head), ";")), 300)
}

// keepLogs copies the endpoint logs before the testbed removes them.
func keepLogs(tb *testbed.Testbed, dir, cond, contender string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	for _, side := range []testbed.Side{testbed.A, testbed.B} {
		src, err := os.Open(tb.Site(side).LogFile)
		if err != nil {
			continue
		}
		name := fmt.Sprintf("%s_%s_%s.log", fileSafe(cond), fileSafe(contender), strings.TrimPrefix(tb.Site(side).Name, "site-"))
		if dst, err := os.Create(filepath.Join(dir, name)); err == nil {
			io.Copy(dst, src)
			dst.Close()
		}
		src.Close()
	}
}

// congestionControl returns a socket Control hook that sets TCP_CONGESTION.
func congestionControl(algo string) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptString(int(fd), syscall.IPPROTO_TCP, syscall.TCP_CONGESTION, algo)
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("setting TCP_CONGESTION to %q: %w", algo, serr)
		}
		return nil
	}
}

// setCongestion sets TCP_CONGESTION on a connected socket.
func setCongestion(c net.Conn, algo string) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return fmt.Errorf("%T has no socket", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	return congestionControl(algo)("", "", raw)
}

// getCongestion reads TCP_CONGESTION back from a connected socket.
func getCongestion(c net.Conn) (string, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return "", fmt.Errorf("%T has no socket", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return "", err
	}
	var got string
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		got, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	}); err != nil {
		return "", err
	}
	if gerr != nil {
		return "", fmt.Errorf("reading TCP_CONGESTION: %w", gerr)
	}
	return strings.TrimRight(got, "\x00"), nil
}

// ccCheck remembers what the sockets of a kernel run reported.
type ccCheck struct {
	mu             sync.Mutex
	cli, srv       string
	haveCli, haveS bool
}

func (c *ccCheck) client(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.haveCli {
		c.cli, c.haveCli = s, true
	}
}

func (c *ccCheck) server(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.haveS {
		c.srv, c.haveS = s, true
	}
}

// String is "client/server", empty when no socket reported.
func (c *ccCheck) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.haveCli && !c.haveS {
		return ""
	}
	return orUnknown(c.cli) + "/" + orUnknown(c.srv)
}

func orUnknown(s string) string {
	if s == "" {
		return "?"
	}
	return s
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// fileSafe turns a condition or contender name into a file name part.
func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return '_'
	}, s)
}
