package bench

// This file owns the page-load workload ("web pages near their floor"): a browser's load of one page, an HTML object and then a fixed,
// seeded list of objects requested together, over 6 parallel HTTP/1.1
// connections and over one HTTP/2 connection (cleartext, prior
// knowledge), each timed from the first SYN to the last byte of the last
// object. The floor is what no transport can beat: two round trips (the
// HTML's request, then the objects' requests; a split-TCP endpoint answers
// the handshake locally) plus the page's bytes at the link's payload rate.
// Both protocols are Go's own net/http, the client in site A and the
// server in site B, through the same sockets as the download workload.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"scpsvpn/cmd/internal/testbed"
)

// Workloads of `bench --workload`.
const (
	// WorkloadDownload is the bulk download of --duration with a probe.
	WorkloadDownload = "download"
	// WorkloadPage is the page load.
	WorkloadPage = "page"
)

// PageSpec is the page a page-load run fetches.
type PageSpec struct {
	Objects int `json:"objects"`   // after the HTML
	MinSize int `json:"min_bytes"` // of an object
	MaxSize int `json:"max_bytes"`
	HTML    int `json:"html_bytes"`
}

// DefaultPage is the page the targets are set for: an HTML object, then 50 objects of
// 5-200 KB.
var DefaultPage = NewPageSpec(50, 200_000)

// pageConns is how many HTTP/1.1 connections a browser opens to one host.
const pageConns = 6

// pageSeed fixes the object sizes: every run, contender and machine
// fetches the same page.
const pageSeed = 12

// NewPageSpec is a page of objects objects of 5 KB (or maxSize, if less) to
// maxSize bytes, after a 30 KB (or maxSize) HTML.
func NewPageSpec(objects, maxSize int) PageSpec {
	return PageSpec{Objects: objects, MinSize: min(5_000, maxSize), MaxSize: maxSize, HTML: min(30_000, maxSize)}
}

// Sizes lists the page's object sizes: the HTML first, then the objects,
// drawn uniformly from [MinSize, MaxSize] with a fixed seed.
func (p PageSpec) Sizes() []int {
	rng := rand.New(rand.NewPCG(pageSeed, uint64(p.Objects)))
	sizes := []int{p.HTML}
	for range p.Objects {
		sizes = append(sizes, p.MinSize+rng.IntN(p.MaxSize-p.MinSize+1))
	}
	return sizes
}

// Bytes is the page's payload: every object's body.
func (p PageSpec) Bytes() int64 {
	var n int64
	for _, s := range p.Sizes() {
		n += int64(s)
	}
	return n
}

// PageFloor is the shortest possible load of bytes of page under the
// condition: two round trips plus the bytes at the payload capacity.
func (c Condition) PageFloor(bytes int64) time.Duration {
	return 2*c.RTT + time.Duration(float64(bytes)/c.PayloadCapacity()*float64(time.Second))
}

// PageFloorHTTP1 is HTTP/1.1's floor over pageConns connections without
// pipelining as the targets state it: each connection asks for its next
// object only once the last has arrived, so the objects cost a round trip
// per pageConns of them beyond the HTML's: RTT x (1 + ceil(objects /
// pageConns)) plus the bytes at the payload capacity. It is not a strict
// bound: one connection's round trip overlaps another's bytes, so a load
// may beat it (PageFloor is the bound).
func (c Condition) PageFloorHTTP1(bytes int64, objects int) time.Duration {
	rounds := 1 + (objects+pageConns-1)/pageConns
	return time.Duration(rounds)*c.RTT + time.Duration(float64(bytes)/c.PayloadCapacity()*float64(time.Second))
}

// PageResult is what a page-load run measured.
type PageResult struct {
	Objects int     `json:"objects"`
	Bytes   int64   `json:"page_bytes"`
	FloorMs float64 `json:"floor_ms"`
	// Floor1Ms is HTTP/1.1's own floor (PageFloorHTTP1): its loads'
	// FloorRatio is against it.
	Floor1Ms float64   `json:"floor_http1_ms,omitempty"`
	HTTP1    *PageLoad `json:"http1,omitempty"`
	HTTP2    *PageLoad `json:"http2,omitempty"`
}

// PageLoad is one load of the page.
type PageLoad struct {
	// Ms is from the first SYN to the last byte of the last object.
	Ms float64 `json:"load_ms"`
	// HTMLMs is when the HTML's last byte arrived; FirstObjectMs when
	// the first byte of any object did (a round trip later at best).
	HTMLMs        float64 `json:"html_ms"`
	FirstObjectMs float64 `json:"first_object_ms"`
	FloorRatio    float64 `json:"floor_ratio"`
	Conns         int     `json:"connections"`
	// LinkBytes is what the emulated link carried both ways during the
	// load.
	LinkBytes int64 `json:"link_bytes"`
	// DownBytes and DownPackets are what the server's side offered the
	// link toward the client (IP packets, lost ones included): the page's
	// bytes per packet show the transport's own overhead.
	DownBytes   int64  `json:"down_link_bytes"`
	DownPackets int64  `json:"down_packets"`
	Err         string `json:"error,omitempty"`
}

// floor is proto's floor in ms: HTTP/1.1's own when the result has it.
func (pr *PageResult) floor(proto pageProto) float64 {
	if !proto.h2 && pr.Floor1Ms > 0 {
		return pr.Floor1Ms
	}
	return pr.FloorMs
}

// pageProto is one way of fetching the page.
type pageProto struct {
	name  string
	conns int // most connections the client opens
	h2    bool
}

var (
	pageHTTP1 = pageProto{name: "HTTP/1.1", conns: pageConns}
	pageHTTP2 = pageProto{name: "HTTP/2", conns: 1, h2: true}
)

// runPage measures a page load over HTTP/1.1 and over HTTP/2, each on a
// fresh testbed (a cold association, as the first page of the day), and
// fills r.
func runPage(ctx context.Context, rc RunConfig, r *Result) error {
	c := rc.Condition
	if c.Timed() {
		return fmt.Errorf("the page-load workload runs on conditions without a rate schedule or outage; %s has one", c.Name)
	}
	spec := rc.Page
	if spec.Objects == 0 {
		spec = DefaultPage
	}
	bytes := spec.Bytes()
	pr := &PageResult{Objects: spec.Objects, Bytes: bytes, FloorMs: ms(c.PageFloor(bytes)), Floor1Ms: ms(c.PageFloorHTTP1(bytes, spec.Objects))}
	r.Page = pr
	var cc ccCheck
	var failed []string
	for _, proto := range []pageProto{pageHTTP1, pageHTTP2} {
		l, err := pageRun(ctx, rc, spec, proto, &cc)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			l = &PageLoad{Err: oneLine(err.Error())}
			failed = append(failed, proto.name+": "+l.Err)
		} else {
			l.FloorRatio = l.Ms / pr.floor(proto)
		}
		if proto.h2 {
			pr.HTTP2 = l
		} else {
			pr.HTTP1 = l
		}
	}
	r.TCPCongestion = cc.String()
	r.PayloadBytes = 2 * bytes
	if len(failed) == 2 {
		return errors.New(failed[0] + "; " + failed[1])
	}
	if len(failed) > 0 {
		r.Note = failed[0]
	}
	r.Status = StatusOK
	return nil
}

// pageRun loads the page once with proto on a fresh testbed.
func pageRun(ctx context.Context, rc RunConfig, spec PageSpec, proto pageProto, cc *ccCheck) (l *PageLoad, err error) {
	c := rc.Condition
	cfg := testbed.Config{Kind: testbed.Emulated, Link: c.LinkOptions(rc.Seed), Endpoints: testbed.Endpoints{Binary: rc.Binary, LogLevel: "info", Logger: rc.Logger}}
	if rc.Contender.IsSCPS() {
		if rc.Binary == "" {
			return nil, errors.New("no endpoint binary")
		}
		cfg.PeerLinkA, cfg.PeerLinkB = c.PeerLinks(rc.Contender.Congestion)
	}
	logName := ""
	if rc.Contender.IsSCPS() {
		logName = rc.Contender.Name + "-" + fileSafe(proto.name)
	}
	tb, ctx, done, err := runTestbed(ctx, rc, cfg, logName)
	if err != nil {
		return nil, err
	}
	defer done(&err)

	var (
		ln       net.Listener
		dial     Dialer
		accepted func(net.Conn) error
	)
	if rc.Contender.IsSCPS() {
		ln, dial, err = scpsSockets(ctx, tb, rc, testbed.A, testbed.B)
	} else {
		ln, dial, err = kernelSockets(tb, rc.Contender.Kernel, cc)
		accepted = kernelAccepted(rc.Contender.Kernel, cc)
	}
	if err != nil {
		return nil, err
	}
	srv := ServePage(ln, spec, accepted, rc.Logger)
	defer srv.Close()
	// A load that takes several times its floor has failed to be a web
	// page; the bound only keeps a stuck run from holding the matrix.
	limit := 4*c.PageFloor(spec.Bytes()) + 30*time.Second
	lctx, lcancel := context.WithTimeout(ctx, limit)
	defer lcancel()
	emu := tb.Emulator()
	var read atomic.Int64
	stopLog := func() {}
	if rc.LogDir != "" && logName != "" && os.MkdirAll(rc.LogDir, 0o755) == nil {
		name := fmt.Sprintf("%s_%s_sender.tsv", fileSafe(c.Name), logName)
		stopLog = logSender(ctx, tb, emu, filepath.Join(rc.LogDir, name), pageLogEvery(c.RTT), read.Load)
	}
	before := emu.Counters()
	l, err = LoadPage(lctx, spec, proto, dial, ln.Addr().String(), &read)
	stopLog()
	if err == nil {
		d := CountersDelta(before, emu.Counters())
		l.LinkBytes, l.DownBytes, l.DownPackets = LinkBytes(d), int64(d.Ret.InBytes), int64(d.Ret.InPackets)
	}
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		err = fmt.Errorf("not loaded within %v (4x the floor + 30s): %w", limit.Round(time.Second), err)
	}
	if serr := srv.Err(); serr != nil && err == nil {
		err = serr
	}
	return l, err
}

// PageServer serves a page's objects over HTTP/1.1 and cleartext HTTP/2.
type PageServer struct {
	srv  *http.Server
	done chan struct{}
	mu   sync.Mutex
	err  error // first error of the accept hook
}

// ServePage serves spec's page on ln: "/" is the HTML, "/o/N" object N
// (1-based). accepted, when set, runs on each new connection (the kernel
// contenders' congestion control check); an error closes it and is kept
// for Err.
func ServePage(ln net.Listener, spec PageSpec, accepted func(net.Conn) error, log *slog.Logger) *PageServer {
	if log == nil {
		log = slog.Default()
	}
	sizes := spec.Sizes()
	body := make([]byte, max(spec.MaxSize, spec.HTML))
	for i := range body {
		body[i] = byte(i*7 + i>>8) // not all zeros, in case anything on the path compresses
	}
	serve := func(w http.ResponseWriter, n int) {
		w.Header().Set("Content-Length", strconv.Itoa(n))
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(body[:n])
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { serve(w, sizes[0]) })
	mux.HandleFunc("GET /o/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.PathValue("n"))
		if err != nil || n < 1 || n >= len(sizes) {
			http.NotFound(w, r)
			return
		}
		serve(w, sizes[n])
	})
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	s := &PageServer{done: make(chan struct{})}
	s.srv = &http.Server{
		Handler: mux, Protocols: &protos, ReadHeaderTimeout: requestTimeout,
		ErrorLog: slog.NewLogLogger(log.With("component", "bench-page-server").Handler(), slog.LevelDebug),
	}
	if accepted != nil {
		ln = &hookListener{Listener: ln, hook: accepted, fail: s.fail}
	}
	go func() {
		defer close(s.done)
		s.srv.Serve(ln)
	}()
	return s
}

func (s *PageServer) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

// Err returns the first error of the accept hook.
func (s *PageServer) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close closes the listener and every connection and waits for Serve.
func (s *PageServer) Close() error {
	err := s.srv.Close()
	<-s.done
	return err
}

// hookListener runs hook on each accepted connection and drops the ones
// it refuses.
type hookListener struct {
	net.Listener
	hook func(net.Conn) error
	fail func(error)
}

func (l *hookListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if err := l.hook(c); err != nil {
			l.fail(err)
			c.Close()
			continue
		}
		return c, nil
	}
}

// LoadPage fetches spec's page from addr as a browser would: the HTML,
// then every object at once, over proto's connections opened with dial.
// The time counts from the start of the first dial to the last byte.
// read, when set, counts the bodies' bytes as they arrive (the timeline).
func LoadPage(ctx context.Context, spec PageSpec, proto pageProto, dial Dialer, addr string, read *atomic.Int64) (*PageLoad, error) {
	var conns atomic.Int32
	var protos http.Protocols
	if proto.h2 {
		protos.SetUnencryptedHTTP2(true)
	} else {
		protos.SetHTTP1(true)
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			conns.Add(1)
			return dial(ctx)
		},
		Protocols:           &protos,
		DisableCompression:  true,
		MaxConnsPerHost:     proto.conns,
		MaxIdleConnsPerHost: proto.conns,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	sizes := spec.Sizes()
	start := time.Now()
	var firstObject atomic.Int64 // ns since start; 0 = none yet
	get := func(i int) error {
		path := "/"
		if i > 0 {
			path = "/o/" + strconv.Itoa(i)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("GET %s: %w", path, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		if (resp.ProtoMajor == 2) != proto.h2 {
			return fmt.Errorf("GET %s: answered over %s", path, resp.Proto)
		}
		buf := make([]byte, 32<<10)
		var n int
		for {
			k, err := resp.Body.Read(buf)
			if k > 0 && n == 0 && i > 0 {
				firstObject.CompareAndSwap(0, int64(time.Since(start)))
			}
			n += k
			if read != nil {
				read.Add(int64(k))
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				return fmt.Errorf("GET %s after %d bytes: %w", path, n, err)
			}
		}
		if n != sizes[i] {
			return fmt.Errorf("GET %s: %d bytes, want %d", path, n, sizes[i])
		}
		return nil
	}
	if err := get(0); err != nil {
		return nil, err
	}
	l := &PageLoad{HTMLMs: ms(time.Since(start))}
	errs := make(chan error, len(sizes))
	for i := 1; i < len(sizes); i++ {
		go func() { errs <- get(i) }()
	}
	var first error
	for i := 1; i < len(sizes); i++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return nil, first
	}
	l.Ms = ms(time.Since(start))
	l.FirstObjectMs = ms(time.Duration(firstObject.Load()))
	l.Conns = int(conns.Load())
	return l, nil
}

// Describe says in words what a page-load run does.
func (p PageSpec) Describe() string {
	return fmt.Sprintf("a web page from site B (server) to site A (client) through the userspace link emulator: a %d-byte HTML, then %d objects of %d-%d bytes (%d bytes in all, sizes drawn with a fixed seed) requested at once, "+
		"over %d parallel HTTP/1.1 connections and, on another fresh testbed, over one cleartext HTTP/2 connection (Go's net/http both ends)",
		p.HTML, p.Objects, p.MinSize, p.MaxSize, p.Bytes(), pageConns)
}

// pageSummary is RunSummary's line for a page-load run.
func pageSummary(r *Result) string {
	pr := r.Page
	one := func(name string, l *PageLoad) string {
		if l == nil || l.Err != "" {
			return name + " failed"
		}
		return fmt.Sprintf("%s %.2f s (%.2fx the floor)", name, l.Ms/1000, l.FloorRatio)
	}
	return fmt.Sprintf("%s, %s; floors %.2f s, %.2f s", one(pageHTTP1.name, pr.HTTP1), one(pageHTTP2.name, pr.HTTP2), pr.floor(pageHTTP1)/1000, pr.FloorMs/1000)
}

// pageBaseline is the kernel contender the page loads are compared with.
const pageBaseline = "bbr"

// renderPage writes the page-load table: per condition and contender, the
// floor, each protocol's load time, its ratio to the floor and to kernel
// TCP bbr's load in the same run.
func (rep *Report) renderPage(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("## Page load\n\n")
	p("Seconds from the first SYN to the last byte of the page's last object. The floor is the round trips the protocol cannot avoid plus the page's bytes at the link's payload capacity: two round trips for HTTP/2, one plus one per %d objects for HTTP/1.1 over %d connections (a request per object, no pipelining); x floor is the load over its floor, x %s the load over kernel TCP %s's load of the same page in the same run. "+
		"Goal on GEO-10/2 with 0.5%% loss, C2 and LEO, told no rates: both within 1.1x their floors. HTML and first object: when the HTML's last byte and the first byte of any object arrived (HTTP/2), in seconds.\n\n", pageConns, pageConns, pageBaseline, pageBaseline)
	p("| condition | contender | floor HTTP/1.1 | HTTP/1.1 | x floor | x %s | conns | floor HTTP/2 | HTTP/2 | x floor | x %s | HTML, first object |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n", pageBaseline, pageBaseline)
	for _, c := range rep.Conditions {
		base := rep.result(c.Name, pageBaseline)
		for _, ct := range rep.Contenders {
			r := rep.result(c.Name, ct.Name)
			if r == nil {
				continue
			}
			if !r.OK() || r.Page == nil {
				p("| %s | %s | %s | | | | | | | | | |\n", c.Name, ct.Name, statusWord(r.Status))
				continue
			}
			var b1, b2 *PageLoad
			if base != nil && base.OK() && base.Page != nil {
				b1, b2 = base.Page.HTTP1, base.Page.HTTP2
			}
			h1, h2 := r.Page.HTTP1, r.Page.HTTP2
			p("| %s | %s | %.2f | %s | %.2f | %s |\n", c.Name, ct.Name, r.Page.floor(pageHTTP1)/1000, pageCells(h1, b1, true), r.Page.FloorMs/1000, pageCells(h2, b2, false))
		}
	}
	p("\n")
}

// pageCells are a load's cells: seconds, x floor, x baseline, and the
// connections (HTTP/1.1) or the HTML and first-object times (HTTP/2).
func pageCells(l, base *PageLoad, conns bool) string {
	if l == nil || l.Err != "" {
		return "failed | | | "
	}
	vsBase := "-"
	if base != nil && base.Err == "" {
		vsBase = Ratio(l.Ms, base.Ms)
	}
	last := fmt.Sprintf("%.2f, %.2f", l.HTMLMs/1000, l.FirstObjectMs/1000)
	if conns {
		last = strconv.Itoa(l.Conns)
	}
	return fmt.Sprintf("%.2f | %.2fx | %s | %s", l.Ms/1000, l.FloorRatio, vsBase, last)
}
