package bench

// This file owns the many-flows workload: what an endpoint
// in front of a site of many users meets. On one testbed (one
// association), in turn:
//   - idle: many connections opened, each proven end to end by a one-byte
//     echo, then held idle; the endpoints' resident memory per connection;
//   - opens: many new connections, each carrying a one-byte echo, all
//     requested at once; how many open per second;
//   - downloads: many concurrent small downloads; how fairly they share
//     the link (Jain's index of their rates) and how much of it together;
//   - request under load: many bulk downloads and a UDP stream at the
//     link's rate, and every probe interval a 1 KB request on a new
//     connection, timed from its connect() to the answer's last byte in
//     round trips.
// Kernel TCP runs every phase but the idle one (no endpoint to weigh).
// The client is in site A and the server in site B, as in the other
// workloads; the dials come from a pool of threads that stay inside A's
// namespace, so the benchmark itself can open thousands of connections a
// second.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"scpsvpn/cmd/internal/namespace"
	"scpsvpn/cmd/internal/testbed"
)

// WorkloadFlows is the many-flows workload.
const WorkloadFlows = "flows"

// FlowsSpec sizes the many-flows workload.
type FlowsSpec struct {
	Flows         int `json:"flows"`          // concurrent downloads, and bulk flows under the request probe
	DownloadBytes int `json:"download_bytes"` // of each concurrent download
	Idle          int `json:"idle_flows"`
	Opens         int `json:"opens"`
}

// DefaultFlows is the workload the targets are set for: 1,000 downloads of 30 kB, 10,000
// idle connections, 2,000 opens (enough to time a rate of thousands per
// second over more than a round trip).
var DefaultFlows = FlowsSpec{Flows: 1000, DownloadBytes: 30_000, Idle: 10_000, Opens: 2000}

// flowsRequestSize is the probe's request and answer: "a 1 KB request".
const flowsRequestSize = 1000

// flowsUDPSize is the UDP stream's datagram payload: one datagram fits a
// tunnel packet.
const flowsUDPSize = 1200

// flowsDialers caps the threads the client dials from: a kernel TCP dial
// holds its thread for a round trip.
const flowsDialers = 1000

// flowsSettle is the pause before weighing the idle connections: the
// endpoints finish their work for the opens.
const flowsSettle = 2 * time.Second

// phasePause is the pause between phases under c: the closes of the last
// one reach the far side before the next begins.
func phasePause(c Condition) time.Duration { return max(3*c.RTT, 300*time.Millisecond) }

// FlowsResult is what a many-flows run measured.
type FlowsResult struct {
	Idle      *IdleFlows      `json:"idle,omitempty"`
	Opens     *FlowOpens      `json:"opens,omitempty"`
	Downloads *FlowDownloads  `json:"downloads,omitempty"`
	Request   *RequestUnderLd `json:"request_under_load,omitempty"`
}

// IdleFlows is the idle phase: connections held open and what they cost.
type IdleFlows struct {
	Flows  int     `json:"flows"`
	Open   int     `json:"open"` // proven by their echo and held
	OpenMs float64 `json:"open_ms"`
	// RSS of each endpoint before the first connection and with all of
	// them open, and the difference per open connection.
	RSSBeforeA int64   `json:"rss_before_a"`
	RSSAfterA  int64   `json:"rss_after_a"`
	RSSBeforeB int64   `json:"rss_before_b"`
	RSSAfterB  int64   `json:"rss_after_b"`
	PerFlowA   float64 `json:"bytes_per_flow_a"`
	PerFlowB   float64 `json:"bytes_per_flow_b"`
	// ActiveA and ActiveB are the endpoints' flows_active when last
	// read: below Open, some connections never reached or left the far
	// side.
	ActiveA int64  `json:"flows_active_a"`
	ActiveB int64  `json:"flows_active_b"`
	Err     string `json:"error,omitempty"` // the first failure
}

// FlowOpens is the opens phase.
type FlowOpens struct {
	Flows int `json:"flows"`
	Done  int `json:"done"`
	// PerSecond is the opens' rate: the answered ones after the first over
	// the time from the first answer to the last, so the round trip every
	// open waits does not count.
	PerSecond float64 `json:"per_second"`
	FirstMs   float64 `json:"first_answer_ms"`
	LastMs    float64 `json:"last_answer_ms"`
	Err       string  `json:"error,omitempty"`
}

// FlowDownloads is the concurrent downloads phase.
type FlowDownloads struct {
	Flows int   `json:"flows"`
	Done  int   `json:"done"` // every byte arrived
	Bytes int64 `json:"bytes"`
	// FirstByteMs and LastByteMs count from the start of the first dial.
	FirstByteMs float64 `json:"first_byte_ms"`
	LastByteMs  float64 `json:"last_byte_ms"`
	// Together is the bytes over the time from the first byte to the last
	// as a share of the link's payload limit.
	Together float64 `json:"together_share_of_limit"`
	// Jain is Jain's index of the flows' rates, each its bytes over the
	// time from its dial to its last byte; a failed flow counts its bytes.
	Jain float64 `json:"jain_index"`
	// The timeline, from the first dial: when the last connect()
	// returned, when the last flow saw its first byte, when the link
	// first carried 90% of the limit over one round trip (-1: never),
	// and when it last did (the tail after it carried less).
	ConnectedMs     float64 `json:"last_connected_ms"`
	LastFirstByteMs float64 `json:"last_first_byte_ms"`
	FullMs          float64 `json:"full_from_ms"`
	FullUntilMs     float64 `json:"full_until_ms"`
	// Steady is the bytes from FullMs to FullUntilMs over that time, as a
	// share of the limit: what the link carried once every flow was under
	// way and before the last few finished alone.
	Steady float64 `json:"steady_share_of_limit"`
	// Timeline is the bytes the readers received in each 50 ms from the
	// first dial.
	Timeline []int64 `json:"timeline_bytes_per_50ms,omitempty"`
	// Completion times of the finished flows, from their dial: the low
	// end shows the flows that finished early, which pull Jain's index
	// down while the median and the maximum stay together.
	durations
	// DoneEarly is how many flows had their last byte before the last
	// flow saw its first: they ran before the others had started, not
	// beside them.
	DoneEarly int `json:"done_before_last_first_byte"`
	// LastAnswerMs is when the server began the last answer (from the
	// first dial; 0: the server's times are not known), JainRunning
	// Jain's index of the rates (as Jain's) of the flows still running
	// then, failed ones included, and DoneBeforeLastAnswer how many had
	// finished by then. A flow done before the last answer existed
	// shared the link with no flow that waited for it: with the far
	// side's answers spread over seconds (a loaded host's dials), the
	// first has an idle link to itself and finishes in a round trip or
	// two, which takes the index of all from 1.0 to 0.5 although no
	// flow waited behind it. JainRunning is the sharing the transport
	// decides; Jain is reported beside it.
	LastAnswerMs         float64 `json:"last_answer_ms"`
	JainRunning          float64 `json:"jain_running_at_last_answer"`
	DoneBeforeLastAnswer int     `json:"done_before_last_answer"`
	// JainShare is Jain's index of each flow's share of what the link
	// carried while it ran (fairShares): 1.0 when every flow got as much
	// as the others running beside it, whenever it started and ended. A
	// flow that finished alone had the whole link to itself and counts
	// as fair, where it takes Jain of the rates from dial to last byte
	// toward 0.5 (one such flow among 1,000 gave 0.538); a flow that
	// got less than the others beside it, or stalled, counts low.
	JainShare float64       `json:"jain_of_fair_shares"`
	Endpoints *EndpointCost `json:"endpoints,omitempty"`
	Err       string        `json:"error,omitempty"`
}

// EndpointCost is what a phase cost the tunnel's endpoints (scpsvpn
// only): their CPU time, which on a machine shared with other work says
// more than the phase's rates do, and the packets the kernel dropped on
// their way into each endpoint because its TUN queue was full.
type EndpointCost struct {
	CPUSecondsA float64 `json:"cpu_s_a"`
	CPUSecondsB float64 `json:"cpu_s_b"`
	// CPUPerFlowMs is both endpoints' CPU time over the phase's flows.
	CPUPerFlowMs float64 `json:"cpu_ms_per_flow"`
	TUNDropsA    uint64  `json:"tun_drops_a"`
	TUNDropsB    uint64  `json:"tun_drops_b"`
	Err          string  `json:"error,omitempty"`
}

// costMeter reads the endpoints' CPU time and TUN drops at a phase's start
// and end.
type costMeter struct {
	tb    *testbed.Testbed
	cpu   [2]float64
	drops [2]uint64
	err   error
}

// meterEndpoints starts a costMeter; nil (kernel TCP: no endpoints) when
// tb runs none.
func meterEndpoints(tb *testbed.Testbed, scps bool) *costMeter {
	if !scps {
		return nil
	}
	m := &costMeter{tb: tb}
	m.cpu, m.drops = m.read()
	return m
}

func (m *costMeter) read() (cpu [2]float64, drops [2]uint64) {
	for i, side := range []testbed.Side{testbed.A, testbed.B} {
		c, err := m.tb.CPUSeconds(side)
		if err == nil {
			var q testbed.TUNQueue
			q, err = m.tb.TUNQueue(side)
			cpu[i], drops[i] = c, q.Dropped
		}
		if err != nil && m.err == nil {
			m.err = err
		}
	}
	return cpu, drops
}

// done is the cost since the start, with flows flows in the phase.
func (m *costMeter) done(flows int) *EndpointCost {
	if m == nil {
		return nil
	}
	cpu, drops := m.read()
	c := &EndpointCost{
		CPUSecondsA: cpu[0] - m.cpu[0], CPUSecondsB: cpu[1] - m.cpu[1],
		TUNDropsA: drops[0] - m.drops[0], TUNDropsB: drops[1] - m.drops[1],
	}
	c.CPUPerFlowMs = (c.CPUSecondsA + c.CPUSecondsB) * 1000 / float64(max(flows, 1))
	if m.err != nil {
		c.Err = m.err.Error()
	}
	return c
}

// RequestUnderLd is the request-under-load phase.
type RequestUnderLd struct {
	Bulk     int `json:"bulk_flows"`
	BulkOpen int `json:"bulk_open"` // that delivered bytes during the probes
	Count    int `json:"count"`
	// Latencies from the request's connect() to its answer's last byte,
	// in ms and in round trips of the condition.
	P50Ms      float64 `json:"p50_ms"`
	P95Ms      float64 `json:"p95_ms"`
	MaxMs      float64 `json:"max_ms"`
	P50RTTs    float64 `json:"p50_rtts"`
	P95RTTs    float64 `json:"p95_rtts"`
	MaxRTTs    float64 `json:"max_rtts"`
	Unanswered int     `json:"unanswered"`
	// What the bulk flows and the UDP stream carried during the probes,
	// and what the UDP sender offered.
	BulkKBps       float64       `json:"bulk_kBps"`
	UDPKBps        float64       `json:"udp_kBps"`
	UDPOfferedKBps float64       `json:"udp_offered_kBps"`
	Endpoints      *EndpointCost `json:"endpoints,omitempty"`
	Err            string        `json:"error,omitempty"`
}

// runFlows measures the many-flows workload on one fresh testbed and fills r.
func runFlows(ctx context.Context, rc RunConfig, r *Result) (err error) {
	c := rc.Condition
	if c.Timed() {
		return fmt.Errorf("the many-flows workload runs on conditions without a rate schedule or outage; %s has one", c.Name)
	}
	spec := rc.Flows
	if spec.Flows == 0 {
		spec = DefaultFlows
	}
	cfg := testbed.Config{Kind: testbed.Emulated, Link: c.LinkOptions(rc.Seed), Endpoints: testbed.Endpoints{Binary: rc.Binary, LogLevel: "info", Logger: rc.Logger}}
	if os.Getenv("SCPSVPN_FLOWS_TRACE") != "" {
		// Tracing: each refused or reset flow's reason is in the
		// endpoints' debug log (--keep-logs keeps it).
		cfg.Endpoints.LogLevel = "debug"
	}
	scps := rc.Contender.IsSCPS()
	if scps {
		if rc.Binary == "" {
			return errors.New("no endpoint binary")
		}
		cfg.PeerLinkA, cfg.PeerLinkB = c.PeerLinks(rc.Contender.Congestion)
	}
	logName := ""
	if scps {
		logName = rc.Contender.Name
	}
	tb, ctx, done, err := runTestbed(ctx, rc, cfg, logName)
	if err != nil {
		return err
	}
	defer done(&err)

	var (
		ln       net.Listener
		accepted func(net.Conn) error
		cc       ccCheck
		d        net.Dialer
		clientIP netip.Addr // where the UDP stream goes
	)
	if scps {
		ln, _, err = scpsSockets(ctx, tb, rc, testbed.A, testbed.B)
		clientIP = tb.A.TUN4
	} else {
		algo := rc.Contender.Kernel
		ln, _, err = kernelSockets(tb, algo, &cc)
		accepted = kernelAccepted(algo, &cc)
		d.Control = congestionControl(algo)
		clientIP = tb.A.Underlay.Addr()
	}
	if err != nil {
		return err
	}
	srv := Serve(ln, accepted, rc.Logger)
	defer srv.Close()
	answers := recordAnswers(srv)
	pool := newDialPool(tb.A.NS, ln.Addr().String(), min(flowsDialers, max(spec.Flows, spec.Opens, 64)), d)
	defer pool.Close()
	dial := func(ctx context.Context) (net.Conn, error) {
		conn, err := pool.Dial(ctx)
		if err != nil || scps {
			return conn, err
		}
		got, err := getCongestion(conn)
		if err == nil && got != rc.Contender.Kernel {
			err = fmt.Errorf("client socket runs %q, not %q", got, rc.Contender.Kernel)
		}
		if err != nil {
			conn.Close()
			return nil, err
		}
		cc.client(got)
		return conn, nil
	}

	fr := &FlowsResult{}
	r.Flows = fr
	pause := func() error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(phasePause(c)):
			return nil
		}
	}
	if scps {
		fr.Idle = measureIdle(ctx, tb, rc, spec.Idle)
		if err := pause(); err != nil {
			return err
		}
	}
	fr.Opens = measureOpens(ctx, dial, spec.Opens)
	if err := pause(); err != nil {
		return err
	}
	meter := meterEndpoints(tb, scps)
	stopTrace := func() {}
	if path := os.Getenv("SCPSVPN_FLOWS_TRACE"); path != "" && scps {
		stopTrace = traceEndpoints(ctx, tb, rc.Binary, path)
	}
	fr.Downloads = measureDownloads(ctx, dial, spec.Flows, spec.DownloadBytes, c, answers)
	stopTrace()
	fr.Downloads.Endpoints = meter.done(spec.Flows)
	if err := pause(); err != nil {
		return err
	}
	meter = meterEndpoints(tb, scps)
	fr.Request = measureRequests(ctx, tb, dial, spec.Flows, c, rc, netip.AddrPortFrom(clientIP, 0))
	fr.Request.Endpoints = meter.done(spec.Flows + fr.Request.Count)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.TCPCongestion = cc.String()
	r.DurationS = rc.Duration.Seconds()
	if serr := srv.Err(); serr != nil {
		return serr
	}
	var failed []string
	for _, e := range []string{fr.idleErr(), fr.Opens.Err, fr.Downloads.Err, fr.Request.Err} {
		if e != "" {
			failed = append(failed, e)
		}
	}
	if fr.Opens.Done == 0 && fr.Downloads.Done == 0 && fr.Request.Count == 0 {
		return fmt.Errorf("no flow worked: %s", strings.Join(failed, "; "))
	}
	if len(failed) > 0 {
		r.Note = failed[0]
	}
	r.Status = StatusOK
	return nil
}

func (fr *FlowsResult) idleErr() string {
	if fr.Idle == nil {
		return ""
	}
	return fr.Idle.Err
}

// firstErr keeps the first of many flows' errors.
type firstErr struct {
	mu  sync.Mutex
	err error
	n   int
}

func (f *firstErr) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	if f.err == nil {
		f.err = err
	}
}

// String is the first error and how many flows failed, or "".
func (f *firstErr) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		return ""
	}
	return fmt.Sprintf("%d flows failed, the first: %s", f.n, oneLine(f.err.Error()))
}

// echoOnce opens a connection and proves it end to end with one echo of
// size bytes; the connection stays open.
func echoOnce(ctx context.Context, dial Dialer, size int) (net.Conn, error) {
	conn, err := dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	msg := make([]byte, size)
	req := append([]byte(request{mode: modeEcho, size: size}.String()), msg...)
	if _, err := conn.Write(req); err != nil {
		conn.Close()
		return nil, fmt.Errorf("request: %w", err)
	}
	if _, err := io.ReadFull(conn, msg); err != nil {
		conn.Close()
		return nil, fmt.Errorf("answer: %w", err)
	}
	return conn, nil
}

// abort closes a client connection with a reset: thousands of closes
// must not leave their ports in TIME_WAIT.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// measureIdle opens n connections to a listener of their own in site B
// that never accepts them: they wait, established, in its queue, so the
// benchmark holds only the client's descriptors (two per connection would
// pass the open-files limit). Both endpoints' flows_active proves every
// one spliced end to end; then both are weighed, and the connections
// closed.
func measureIdle(ctx context.Context, tb *testbed.Testbed, rc RunConfig, n int) *IdleFlows {
	res := &IdleFlows{Flows: n}
	var fe firstErr
	defer func() { res.Err = fe.String() }()
	rss := func(side testbed.Side) int64 {
		v, err := tb.RSS(side)
		if err != nil {
			fe.set(err)
		}
		return v
	}
	ln, err := queueListener(tb, netip.AddrPortFrom(tb.B.TUN4, 0), n)
	if err != nil {
		fe.set(err)
		return res
	}
	defer ln.Close()
	d := newDialPool(tb.A.NS, ln.Addr().String(), flowsDialers, net.Dialer{})
	defer d.Close()
	res.RSSBeforeA, res.RSSBeforeB = rss(testbed.A), rss(testbed.B)
	ctx, cancel := context.WithTimeout(ctx, time.Duration(n)*5*time.Millisecond+60*time.Second)
	defer cancel()
	conns := make([]net.Conn, n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				abort(c)
			}
		}
	}()
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, flowsDialers)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := d.Dial(ctx)
			if err != nil {
				fe.set(fmt.Errorf("dial: %w", err))
				return
			}
			conns[i] = c
		})
	}
	wg.Wait()
	for _, c := range conns {
		if c != nil {
			res.Open++
		}
	}
	// Each endpoint carries the flows once the far one has connected. If
	// some never do, the endpoints are still weighed (per open client
	// connection) and the error says how many each carried.
wait:
	for {
		a, aerr := flowsActive(ctx, tb, rc.Binary, testbed.A)
		b, berr := flowsActive(ctx, tb, rc.Binary, testbed.B)
		res.ActiveA, res.ActiveB = a, b
		if aerr != nil || berr != nil {
			fe.set(errors.Join(aerr, berr))
			return res
		}
		if a >= int64(res.Open) && b >= int64(res.Open) {
			break
		}
		select {
		case <-ctx.Done():
			fe.set(fmt.Errorf("flows active at A %d, at B %d of %d open: %w", a, b, res.Open, ctx.Err()))
			break wait
		case <-time.After(200 * time.Millisecond):
		}
	}
	res.OpenMs = ms(time.Since(start))
	time.Sleep(flowsSettle)
	res.RSSAfterA, res.RSSAfterB = rss(testbed.A), rss(testbed.B)
	if res.Open > 0 {
		res.PerFlowA = float64(res.RSSAfterA-res.RSSBeforeA) / float64(res.Open)
		res.PerFlowB = float64(res.RSSAfterB-res.RSSBeforeB) / float64(res.Open)
	}
	return res
}

// flowsActive is the flows an endpoint carries, from its status.
func flowsActive(ctx context.Context, tb *testbed.Testbed, binary string, side testbed.Side) (int64, error) {
	cmd := tb.Command(side, binary, "status", "--json", "--interface", tb.Site(side).TUNName)
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("status at %s: %w", side, err)
	}
	var st struct {
		Counters struct {
			FlowsActive int64 `json:"flows_active"`
		} `json:"counters"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return 0, fmt.Errorf("status at %s: %w", side, err)
	}
	return st.Counters.FlowsActive, nil
}

// traceEndpoints writes both endpoints' status every 250 ms to path
// until the returned stop is called (a debugging aid).
func traceEndpoints(ctx context.Context, tb *testbed.Testbed, binary, path string) (stop func()) {
	f, err := os.Create(path)
	if err != nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() {
		defer f.Close()
		for ctx.Err() == nil {
			for _, side := range []testbed.Side{testbed.A, testbed.B} {
				out, err := tb.Command(side, binary, "status", "--json", "--interface", tb.Site(side).TUNName).Output()
				if err == nil {
					fmt.Fprintf(f, "%.3f %s %s\n", time.Since(start).Seconds(), side, strings.ReplaceAll(string(out), "\n", ""))
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}

// queueListener listens at addr in site B with room for backlog
// connections in its accept queue (the namespace's somaxconn raised to
// match), and never accepts.
func queueListener(tb *testbed.Testbed, addr netip.AddrPort, backlog int) (net.Listener, error) {
	var f *os.File
	err := tb.Do(testbed.B, func() error {
		// /proc/sys/net is the opening thread's namespace's, as sysctl(8)
		// in `ip netns exec` sees it; written here, the test bed needs no
		// procps.
		if err := os.WriteFile("/proc/sys/net/core/somaxconn", []byte(strconv.Itoa(backlog)), 0); err != nil {
			return fmt.Errorf("net.core.somaxconn: %w", err)
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		f = os.NewFile(uintptr(fd), "queue-listener")
		if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: addr.Addr().As4(), Port: int(addr.Port())}); err != nil {
			return err
		}
		return unix.Listen(fd, backlog)
	})
	if err != nil {
		if f != nil {
			f.Close()
		}
		return nil, fmt.Errorf("the idle connections' listener: %w", err)
	}
	defer f.Close()
	return net.FileListener(f)
}

// measureOpens opens n connections at once, each answering a one-byte
// echo, and times the answers.
func measureOpens(ctx context.Context, dial Dialer, n int) *FlowOpens {
	res := &FlowOpens{Flows: n}
	var fe firstErr
	ctx, cancel := context.WithTimeout(ctx, time.Duration(n)*5*time.Millisecond+60*time.Second)
	defer cancel()
	start := time.Now()
	answered := make([]time.Duration, n) // 0: never
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c, err := echoOnce(ctx, dial, 1)
			if err != nil {
				fe.set(err)
				return
			}
			answered[i] = time.Since(start)
			abort(c)
		})
	}
	wg.Wait()
	var times []time.Duration
	for _, t := range answered {
		if t > 0 {
			times = append(times, t)
		}
	}
	res.Done = len(times)
	if len(times) > 0 {
		first, last := slices.Min(times), slices.Max(times)
		res.FirstMs, res.LastMs = ms(first), ms(last)
		if len(times) > 1 && last > first {
			res.PerSecond = float64(len(times)-1) / (last - first).Seconds()
		}
	}
	res.Err = fe.String()
	return res
}

// answerTimes keeps when the server began each download's answer, by
// the client's address (Server.OnAnswer).
type answerTimes struct {
	mu sync.Mutex
	at map[string]time.Time
}

// recordAnswers has srv's answers recorded.
func recordAnswers(srv *Server) *answerTimes {
	a := &answerTimes{at: map[string]time.Time{}}
	srv.OnAnswer(func(remote net.Addr) {
		now := time.Now()
		a.mu.Lock()
		a.at[remote.String()] = now
		a.mu.Unlock()
	})
	return a
}

// of is when the answer to the client at local began.
func (a *answerTimes) of(local string) (time.Time, bool) {
	if a == nil {
		return time.Time{}, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.at[local]
	return t, ok
}

// flowDownload is one flow of the downloads phase, its times from the
// phase's start; answered is -1 when the server's time is not known.
type flowDownload struct {
	bytes                          int64
	dialed, connected, first, last time.Duration
	answered                       time.Duration
	local                          string
}

// rate is the flow's bytes over the time from its dial to its last byte.
func (f flowDownload) rate() float64 {
	if f.bytes == 0 {
		return 0
	}
	return float64(f.bytes) / (f.last - f.dialed).Seconds()
}

// runningJain is Jain's index of the rates of the flows still running
// when the last answer began (a flow that never finished counts, at its
// rate), that moment, and how many flows of size bytes had finished
// before it; ok is false when no answer's time is known.
func runningJain(flows []flowDownload, size int) (jain float64, lastAnswer time.Duration, early int, ok bool) {
	lastAnswer = -1
	for _, f := range flows {
		lastAnswer = max(lastAnswer, f.answered)
	}
	if lastAnswer < 0 {
		return 0, 0, 0, false
	}
	var rates []float64
	for _, f := range flows {
		if f.bytes >= int64(size) && f.last < lastAnswer {
			early++
			continue
		}
		rates = append(rates, f.rate())
	}
	return Jain(rates), lastAnswer, early, true
}

// fairShares is each flow's share of what the link carried while it
// ran: its bytes over its fair part of the bins (timelineBin each, the
// bytes all readers received in it) from its first byte's to its last
// byte's, each bin split evenly among the flows running in it. A flow
// that did not finish runs until the phase's last bin (end); one that
// got nothing has share 0. Every flow served alike in each bin it ran
// gets 1, whatever its start and end; the time before a flow's first
// byte (its dial, the far side's answer) is left out, as the rates
// from dial to last byte (Jain) and the first bytes' times show it.
func fairShares(flows []flowDownload, size int, bins []int64) []float64 {
	end := len(bins) - 1
	span := func(f flowDownload) (int, int) {
		i0, i1 := int(f.first/timelineBin), int(f.last/timelineBin)
		if f.bytes < int64(size) {
			i1 = end
		}
		return max(0, min(i0, end)), max(0, min(i1, end))
	}
	// running[k] is how many flows ran in bin k (a difference array
	// summed), per[k] the sum of bins[j]/running[j] for j < k.
	running := make([]int, len(bins)+1)
	for _, f := range flows {
		if f.bytes > 0 {
			i0, i1 := span(f)
			running[i0]++
			running[i1+1]--
		}
	}
	per := make([]float64, len(bins)+1)
	n := 0
	for k, b := range bins {
		n += running[k]
		per[k+1] = per[k]
		if n > 0 {
			per[k+1] += float64(b) / float64(n)
		}
	}
	shares := make([]float64, len(flows))
	for i, f := range flows {
		if f.bytes == 0 || len(bins) == 0 {
			continue
		}
		i0, i1 := span(f)
		if fair := per[i1+1] - per[i0]; fair > 0 {
			shares[i] = float64(f.bytes) / fair
		}
	}
	return shares
}

// measureDownloads runs n downloads of size bytes at once; answers, if
// not nil, has the server's times of their answers.
func measureDownloads(ctx context.Context, dial Dialer, n, size int, c Condition, answers *answerTimes) *FlowDownloads {
	res := &FlowDownloads{Flows: n}
	var fe firstErr
	// At the link's payload rate all of them take bytes/capacity; a
	// run several times that has failed to share the link.
	ctx, cancel := context.WithTimeout(ctx, 4*time.Duration(float64(n*size)/c.PayloadCapacity()*float64(time.Second))+30*time.Second)
	defer cancel()
	flows := make([]flowDownload, n)
	var tl timeline
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			f := &flows[i]
			f.dialed = time.Since(start)
			err := func() error {
				conn, err := dial(ctx)
				if err != nil {
					return fmt.Errorf("dial: %w", err)
				}
				f.connected = time.Since(start)
				f.local = conn.LocalAddr().String()
				defer abort(conn)
				stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
				defer stop()
				if _, err := io.WriteString(conn, request{mode: modeGet, size: size}.String()); err != nil {
					return fmt.Errorf("request: %w", err)
				}
				buf := make([]byte, 16<<10)
				for f.bytes < int64(size) {
					k, err := conn.Read(buf)
					if k > 0 {
						now := time.Since(start)
						if f.bytes == 0 {
							f.first = now
						}
						f.bytes += int64(k)
						f.last = now
						tl.add(now, k)
					}
					if err != nil {
						return fmt.Errorf("after %d bytes: %w", f.bytes, err)
					}
				}
				return nil
			}()
			if err != nil {
				fe.set(err)
			}
		})
	}
	wg.Wait()
	var rates []float64
	var took []time.Duration
	first, last := time.Duration(-1), time.Duration(0)
	for _, f := range flows {
		res.Bytes += f.bytes
		res.ConnectedMs = max(res.ConnectedMs, ms(f.connected))
		if f.bytes == 0 {
			rates = append(rates, 0)
			continue
		}
		res.LastFirstByteMs = max(res.LastFirstByteMs, ms(f.first))
		if first < 0 || f.first < first {
			first = f.first
		}
		last = max(last, f.last)
		rates = append(rates, f.rate())
		if f.bytes >= int64(size) {
			res.Done++
			took = append(took, f.last-f.dialed)
		}
	}
	res.Jain = Jain(rates)
	for i := range flows {
		flows[i].answered = -1
		if at, ok := answers.of(flows[i].local); ok && flows[i].local != "" {
			flows[i].answered = at.Sub(start)
		}
	}
	if j, at, early, ok := runningJain(flows, size); ok {
		res.JainRunning, res.LastAnswerMs, res.DoneBeforeLastAnswer = j, ms(at), early
	}
	if first >= 0 {
		res.FirstByteMs, res.LastByteMs = ms(first), ms(last)
		if last > first {
			res.Together = float64(res.Bytes) / (last - first).Seconds() / c.PayloadCapacity()
		}
	}
	res.FullMs, res.FullUntilMs, res.Steady = tl.full(c.RTT, 0.9*c.PayloadCapacity())
	res.Timeline = tl.bins
	res.JainShare = Jain(fairShares(flows, size, tl.bins))
	res.durations = spread(took)
	for _, f := range flows {
		if f.bytes >= int64(size) && ms(f.last) < res.LastFirstByteMs {
			res.DoneEarly++
		}
	}
	res.Err = fe.String()
	return res
}

// durations is the distribution of the flows' completion times.
type durations struct {
	MinMs float64 `json:"min_ms"`
	P5Ms  float64 `json:"p5_ms"`
	P10Ms float64 `json:"p10_ms"`
	P50Ms float64 `json:"p50_ms"`
	P95Ms float64 `json:"p95_ms"`
	MaxMs float64 `json:"max_ms"`
}

// spread is the distribution of took (all zero when it is empty).
func spread(took []time.Duration) durations {
	var d durations
	if len(took) == 0 {
		return d
	}
	at := func(p float64) float64 { v, _ := Percentile(took, p); return ms(v) }
	d.MinMs, d.MaxMs = ms(slices.Min(took)), ms(slices.Max(took))
	d.P5Ms, d.P10Ms, d.P50Ms, d.P95Ms = at(0.05), at(0.10), at(0.5), at(0.95)
	return d
}

// timelineBin is the timeline's resolution.
const timelineBin = 50 * time.Millisecond

// timeline counts the bytes the readers received in each timelineBin
// from the start of a phase.
type timeline struct {
	mu   sync.Mutex
	bins []int64
}

func (t *timeline) add(at time.Duration, n int) {
	i := int(at / timelineBin)
	t.mu.Lock()
	defer t.mu.Unlock()
	if i >= len(t.bins) {
		t.bins = append(t.bins, make([]int64, i+1-len(t.bins))...)
	}
	t.bins[i] += int64(n)
}

// full finds the first and last window of one rtt that carried at least
// rate bytes per second, and the rate from the start of the first to the
// end of the last as a share of that rate's 1/0.9 (the limit). from is -1
// when no window did.
func (t *timeline) full(rtt time.Duration, rate float64) (fromMs, untilMs, share float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := max(1, int(rtt/timelineBin))
	var sum int64
	first, last := -1, -1
	for i, b := range t.bins {
		sum += b
		if i >= w {
			sum -= t.bins[i-w]
		}
		if i+1 >= w && float64(sum)/(time.Duration(w)*timelineBin).Seconds() >= rate {
			if first < 0 {
				first = i + 1 - w
			}
			last = i
		}
	}
	if first < 0 {
		return -1, -1, 0
	}
	var bytes int64
	for _, b := range t.bins[first : last+1] {
		bytes += b
	}
	d := time.Duration(last+1-first) * timelineBin
	return ms(time.Duration(first) * timelineBin), ms(time.Duration(last+1) * timelineBin), float64(bytes) / d.Seconds() / (rate / 0.9)
}

// measureRequests runs n bulk downloads and a UDP stream at the link's
// rate toward the client at udpTo, and every rc.ProbeEvery for
// rc.Duration a 1 KB request on a new connection.
func measureRequests(ctx context.Context, tb *testbed.Testbed, dial Dialer, n int, c Condition, rc RunConfig, udpTo netip.AddrPort) *RequestUnderLd {
	res := &RequestUnderLd{Bulk: n}
	var fe firstErr
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The bulk flows: each counts what it received.
	var bulkBytes atomic.Int64
	counts := make([]atomic.Int64, n)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i := range n {
		wg.Go(func() {
			conn, err := dial(ctx)
			if err != nil {
				if ctx.Err() == nil {
					fe.set(fmt.Errorf("bulk dial: %w", err))
				}
				return
			}
			defer abort(conn)
			stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
			defer stop()
			if _, err := io.WriteString(conn, request{mode: modeBulk}.String()); err != nil {
				return
			}
			buf := make([]byte, 16<<10)
			for {
				k, err := conn.Read(buf)
				bulkBytes.Add(int64(k))
				counts[i].Add(int64(k))
				if err != nil {
					if ctx.Err() == nil {
						fe.set(fmt.Errorf("bulk: %w", err))
					}
					return
				}
			}
		})
	}

	// The UDP stream, from site B to site A at the link's rate.
	udp, err := startUDPStream(ctx, tb, udpTo, c.Down)
	if err != nil {
		fe.set(err)
		res.Err = fe.String()
		return res
	}
	defer udp.stop()

	// The probes start once the bulk flows and the stream have had a few
	// round trips to fill the link.
	select {
	case <-ctx.Done():
		return res
	case <-time.After(3*c.RTT + time.Second):
	}
	every := rc.ProbeEvery
	if every <= 0 {
		every = 500 * time.Millisecond
	}
	start := time.Now()
	bulk0, udp0, sent0 := bulkBytes.Load(), udp.received.Load(), udp.sent.Load()
	before := make([]int64, n)
	for i := range counts {
		before[i] = counts[i].Load()
	}
	end := start.Add(rc.Duration)
	var lat []time.Duration
	for time.Now().Before(end) && ctx.Err() == nil {
		sent := time.Now()
		pctx, pcancel := context.WithDeadline(ctx, end.Add(10*c.RTT))
		conn, err := echoOnce(pctx, dial, flowsRequestSize)
		pcancel()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
				res.Unanswered++
			} else {
				fe.set(fmt.Errorf("request: %w", err))
			}
			break
		}
		lat = append(lat, time.Since(sent))
		abort(conn)
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(sent.Add(every))):
		}
	}
	window := time.Since(start).Seconds()
	res.BulkKBps = float64(bulkBytes.Load()-bulk0) / window / 1000
	res.UDPKBps = float64(udp.received.Load()-udp0) / window / 1000
	res.UDPOfferedKBps = float64(udp.sent.Load()-sent0) / window / 1000
	for i := range counts {
		if counts[i].Load() > before[i] {
			res.BulkOpen++
		}
	}
	res.Count = len(lat)
	if p, ok := Percentile(lat, 0.5); ok {
		p95, _ := Percentile(lat, 0.95)
		mx := slices.Max(lat)
		res.P50Ms, res.P95Ms, res.MaxMs = ms(p), ms(p95), ms(mx)
		rtts := func(d time.Duration) float64 { return float64(d) / float64(c.RTT) }
		res.P50RTTs, res.P95RTTs, res.MaxRTTs = rtts(p), rtts(p95), rtts(mx)
	}
	res.Err = fe.String()
	return res
}

// udpStream is a paced UDP sender in site B and its receiver in site A.
type udpStream struct {
	sent, received atomic.Int64 // payload bytes
	stop           func()
}

// startUDPStream sends datagrams from site B to a receiver bound to to's
// address in site A at bps (IP bytes) until ctx ends or stop.
func startUDPStream(ctx context.Context, tb *testbed.Testbed, to netip.AddrPort, bps int64) (*udpStream, error) {
	rx, err := tb.ListenPacket(testbed.A, "udp4", to.String())
	if err != nil {
		return nil, fmt.Errorf("UDP receiver: %w", err)
	}
	var tx net.Conn
	err = tb.Do(testbed.B, func() (err error) {
		tx, err = net.Dial("udp4", rx.LocalAddr().String())
		return err
	})
	if err != nil {
		rx.Close()
		return nil, fmt.Errorf("UDP sender: %w", err)
	}
	u := &udpStream{}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 64<<10)
		for {
			k, _, err := rx.ReadFrom(buf)
			if err != nil {
				return
			}
			u.received.Add(int64(k))
		}
	})
	wg.Go(func() {
		msg := bulkPattern(flowsUDPSize)
		wire := float64(flowsUDPSize + 28) // IPv4 and UDP headers
		const tick = 5 * time.Millisecond
		t := time.NewTicker(tick)
		defer t.Stop()
		start := time.Now()
		var n int64 // datagrams sent
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			due := int64(time.Since(start).Seconds() * float64(bps) / 8 / wire)
			for ; n < due; n++ {
				if _, err := tx.Write(msg); err != nil {
					if errors.Is(err, syscall.ECONNREFUSED) {
						continue // an ICMP error from an earlier datagram; keep sending
					}
					return
				}
				u.sent.Add(flowsUDPSize)
			}
		}
	})
	u.stop = func() {
		cancel()
		tx.Close()
		rx.Close()
		wg.Wait()
	}
	return u, nil
}

// dialPool dials TCP to one address from threads that stay inside a
// namespace: switching a thread in and out for every dial would cost more
// than the opens it measures.
type dialPool struct {
	jobs chan dialJob
	wg   sync.WaitGroup
}

type dialJob struct {
	ctx  context.Context
	done chan<- dialResult
}

type dialResult struct {
	conn net.Conn
	err  error
}

// newDialPool starts workers dialing addr with d from inside namespace ns.
func newDialPool(ns, addr string, workers int, d net.Dialer) *dialPool {
	p := &dialPool{jobs: make(chan dialJob)}
	for range workers {
		p.wg.Go(func() {
			err := namespace.Do(ns, func() error {
				for j := range p.jobs {
					c, err := d.DialContext(j.ctx, "tcp4", addr)
					j.done <- dialResult{c, err}
				}
				return nil
			})
			if err != nil { // never entered: answer the jobs with why
				for j := range p.jobs {
					j.done <- dialResult{nil, err}
				}
			}
		})
	}
	return p
}

// Dial opens a connection from the pool's namespace.
func (p *dialPool) Dial(ctx context.Context) (net.Conn, error) {
	done := make(chan dialResult, 1)
	select {
	case p.jobs <- dialJob{ctx, done}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	r := <-done
	return r.conn, r.err
}

// Close ends the workers once their dials are done.
func (p *dialPool) Close() {
	close(p.jobs)
	p.wg.Wait()
}

// check says which flag is out of range.
func (s FlowsSpec) check() error {
	switch {
	case s.Flows < 1 || s.Flows > 10_000:
		return fmt.Errorf("--flows %d: use 1 to 10000", s.Flows)
	case s.DownloadBytes < 1000 || s.DownloadBytes > 100_000_000:
		return fmt.Errorf("--flow-kb %d: use 1 to 100000", s.DownloadBytes/1000)
	case s.Idle < 1 || s.Idle > 100_000:
		return fmt.Errorf("--idle-flows %d: use 1 to 100000", s.Idle)
	case s.Opens < 2 || s.Opens > 100_000:
		return fmt.Errorf("--opens %d: use 2 to 100000", s.Opens)
	}
	return nil
}

// Files is how many file descriptors the benchmark process needs: both
// ends of every connection of the largest phase that runs client and
// server in it, the client's end of the idle ones, and room for the rest.
func (s FlowsSpec) Files() uint64 {
	return uint64(max(2*s.Opens, 2*s.Flows, s.Idle) + 4096)
}

// raiseFileLimit lifts RLIMIT_NOFILE to at least n: the soft limit up to
// the hard one, and the hard one too where allowed (CAP_SYS_RESOURCE).
// The endpoints the testbed starts inherit it.
func raiseFileLimit(n uint64) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("reading the open-files limit: %w", err)
	}
	if lim.Cur >= n {
		return nil
	}
	want := syscall.Rlimit{Cur: n, Max: max(lim.Max, n)}
	if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want) == nil {
		return nil
	}
	if lim.Max < n {
		return fmt.Errorf("needs %d open files, the hard limit is %d and may not be raised here: use fewer --idle-flows, --opens or --flows", n, lim.Max)
	}
	lim.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("raising the open-files limit to %d: %w", n, err)
	}
	return nil
}

// Describe says in words what a many-flows run does.
func (s FlowsSpec) Describe(probeS float64) string {
	return fmt.Sprintf("many flows from site B (server) to site A (client) through the userspace link emulator, on one fresh testbed per contender, in turn: "+
		"%d idle connections (held in a listener's queue in site B, never accepted; open once both endpoints report them active; the endpoints' RSS before and with all open; scpsvpn only), "+
		"%d connections opened at once (a 1-byte echo each; the rate of answers from the first to the last), "+
		"%d concurrent downloads of %d bytes (together: bytes from the first byte to the last over the payload limit; Jain's index of each flow's share of what the link carried while it ran, and of each flow's rate from its dial to its last byte, of all and of those running when the server began its last answer), "+
		"and %d bulk downloads beside a UDP stream at the link's rate toward the client, with a %d-byte request on a new connection every probe interval for %s (from connect() to the answer's last byte)",
		s.Idle, s.Opens, s.Flows, s.DownloadBytes, s.Flows, flowsRequestSize, fmtSeconds(probeS))
}

// flowsSummary is RunSummary's line for a many-flows run.
func flowsSummary(r *Result) string {
	f := r.Flows
	s := ""
	if i := f.Idle; i != nil {
		s += fmt.Sprintf("idle %d/%d: %.1f / %.1f KiB each (A/B); ", i.Open, i.Flows, i.PerFlowA/1024, i.PerFlowB/1024)
	}
	if o := f.Opens; o != nil {
		s += fmt.Sprintf("opens %.0f/s (%d/%d); ", o.PerSecond, o.Done, o.Flows)
	}
	if d := f.Downloads; d != nil {
		s += fmt.Sprintf("downloads %d/%d: %.0f%% of the limit, Jain %.3f of the fair shares, %.3f of the rates from dial to last byte, %.3f of the flows running at the last answer (%.2f s; %d done before it) (took min %.2f, p5 %.2f, p10 %.2f, p50 %.2f, max %.2f s; %d done before the last first byte; connected by %.2f s, every first byte by %.2f s, first byte %.2f s, full %.2f-%.2f s at %.0f%%, last byte %.2f s)",
			d.Done, d.Flows, d.Together*100, d.JainShare, d.Jain, d.JainRunning, d.LastAnswerMs/1000, d.DoneBeforeLastAnswer, d.MinMs/1000, d.P5Ms/1000, d.P10Ms/1000, d.P50Ms/1000, d.MaxMs/1000, d.DoneEarly, d.ConnectedMs/1000, d.LastFirstByteMs/1000, d.FirstByteMs/1000, d.FullMs/1000, d.FullUntilMs/1000, d.Steady*100, d.LastByteMs/1000)
		if e := d.Endpoints; e != nil {
			s += fmt.Sprintf(", endpoints %.1f ms CPU/flow, %d TUN drops", e.CPUPerFlowMs, e.TUNDropsA+e.TUNDropsB)
		}
		s += "; "
	}
	if q := f.Request; q != nil {
		s += fmt.Sprintf("request p50 %.2f, p95 %.2f RTT (%d)", q.P50RTTs, q.P95RTTs, q.Count)
	}
	if r.Note != "" {
		s += " (" + r.Note + ")"
	}
	return s
}

// renderFlows writes the many-flows table.
func (rep *Report) renderFlows(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("## Many flows\n\n")
	p("Goals on GEO-10/2: the concurrent downloads together >= 95%% of the payload limit with Jain's index >= 0.9 of the flows' fair shares; idle connections <= 64 KiB of endpoint RSS each; opens >= 1,000 per second; " +
		"the request on a new connection within 1.2 RTT beside the bulk flows and the UDP stream. " +
		"Idle: KiB of RSS per open connection at endpoint A / B (scpsvpn only). Request: p50 / p95 / max in round trips of the condition, and how many. Bulk and UDP: kB/s each carried during the requests (UDP offered). " +
		"Downloads' timeline (s from the first dial): the first byte, the last connect() returned, the last flow's first byte, the link full (90%% of the limit over a round trip) from and until, the last byte; steady: the share of the limit while full. " +
		"Jain: the index of every flow's share of what the link carried while it ran (from its first byte to its last, each 50 ms split evenly among the flows running in it; docs/manyflows.md), then of every flow's rate (its bytes over the time from its dial to its last byte), then the index of the flows still running when the server began its last answer and how many had finished before it (a flow done before the last answer existed had the link while no other waited for it). " +
		"Download times are each finished flow's from its dial to its last byte; done early: the flows finished before the last flow saw its first byte. " +
		"Endpoints (scpsvpn only): both endpoints' CPU ms per flow in the downloads / request phase, and the packets the kernel dropped on their way into the endpoints (TUN queue full, A+B) in each.\n\n")
	p("| condition | contender | idle KiB/flow (A / B) | opens/s | downloads done | together | Jain of the fair shares (of the rates; running at the last answer; done before it) | download min / p5 / p10 / p50 / max s (done early) | first byte, connected, all first bytes, full from-until, last byte s (steady) | request RTTs | bulk kB/s | UDP kB/s (offered) | endpoints CPU ms/flow, TUN drops |\n|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|\n")
	rep.workloadRows(w, 10, func(r *Result) bool { return r.Flows != nil }, func(r *Result) string {
		f := r.Flows
		idle := "-"
		if i := f.Idle; i != nil {
			idle = fmt.Sprintf("%.1f / %.1f (%d)", i.PerFlowA/1024, i.PerFlowB/1024, i.Open)
		}
		d, o, q := f.Downloads, f.Opens, f.Request
		cost := "-"
		if d.Endpoints != nil && q.Endpoints != nil {
			cost = fmt.Sprintf("%.1f / %.1f; %d / %d", d.Endpoints.CPUPerFlowMs, q.Endpoints.CPUPerFlowMs,
				d.Endpoints.TUNDropsA+d.Endpoints.TUNDropsB, q.Endpoints.TUNDropsA+q.Endpoints.TUNDropsB)
		}
		return fmt.Sprintf("%s | %.0f | %d/%d | %.0f%% | %.3f (%.3f; %.3f; %d) | %.1f / %.1f / %.1f / %.1f / %.1f (%d) | %.2f, %.2f, %.2f, %.2f-%.2f, %.2f (%.0f%%) | %.2f / %.2f / %.2f (%d) | %.1f | %.1f (%.1f) | %s",
			idle, o.PerSecond, d.Done, d.Flows, d.Together*100, d.JainShare, d.Jain, d.JainRunning, d.DoneBeforeLastAnswer, d.MinMs/1000, d.P5Ms/1000, d.P10Ms/1000, d.P50Ms/1000, d.MaxMs/1000, d.DoneEarly,
			d.FirstByteMs/1000, d.ConnectedMs/1000, d.LastFirstByteMs/1000, d.FullMs/1000, d.FullUntilMs/1000, d.LastByteMs/1000, d.Steady*100,
			q.P50RTTs, q.P95RTTs, q.MaxRTTs, q.Count, q.BulkKBps, q.UDPKBps, q.UDPOfferedKBps, cost)
	})
	p("\n")
}
