package tunnel

// A test network of whole endpoints joined by the in-memory doubles of
// package tunneltest. Each site has a gVisor stack of its own (the package
// stack, used as the site's "kernel"): its clients dial through the TUN
// from any address of the site's LAN, and its servers accept connections
// the endpoint re-originates. Everything runs in the test process as an
// ordinary user.

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"scpsvpn/configs"
	"scpsvpn/peers"
	"scpsvpn/stack"
	"scpsvpn/tunnel/tunneltest"
)

// waitTime bounds anything a test waits for. Generous: the machine may be a
// loaded 2-core VM running the race detector.
const waitTime = 30 * time.Second

// datagramQueue is how many non-TCP packets a site's LAN keeps for the
// test to read (site.datagrams). The endpoint's TUN writer must not wait
// on the test (a blocked writer would stall the endpoint's TCP flows too,
// and hang a test that ignores datagrams), so a full queue drops; but a
// drop is the harness's loss, not the tunnel's, and would make a test that
// counts arrivals flaky: it fails the test instead (harness cleanup). A
// test reads what it sends as it goes; the most any sends at once is
// 1024 (TestQuicWideBlocks), so four times that leaves room for a slow
// reader and the stragglers of an earlier round.
const datagramQueue = 4096

// logStore keeps every log record of a test's endpoints, to wait for
// events and to show on failure.
type logStore struct {
	mu   sync.Mutex
	recs []logRec
}

type logRec struct {
	time  time.Time
	level slog.Level
	msg   string
	attrs map[string]string
}

func (r logRec) String() string {
	keys := make([]string, 0, len(r.attrs))
	for k := range r.attrs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-5s %s", r.time.Format("15:04:05.000"), r.level, r.msg)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%s", k, r.attrs[k])
	}
	return b.String()
}

type recHandler struct {
	st    *logStore
	attrs []slog.Attr
}

func (h *recHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *recHandler) Handle(_ context.Context, r slog.Record) error {
	rec := logRec{time: r.Time, level: r.Level, msg: r.Message, attrs: map[string]string{}}
	for _, a := range h.attrs {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	h.st.mu.Lock()
	h.st.recs = append(h.st.recs, rec)
	h.st.mu.Unlock()
	return nil
}

func (h *recHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &recHandler{st: h.st, attrs: append(slices.Clip(h.attrs), as...)}
}

func (h *recHandler) WithGroup(string) slog.Handler { return h }

// find returns the records with msg whose attributes include want.
func (st *logStore) find(msg string, want map[string]string) []logRec {
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []logRec
	for _, r := range st.recs {
		if r.msg != msg {
			continue
		}
		ok := true
		for k, v := range want {
			if r.attrs[k] != v {
				ok = false
			}
		}
		if ok {
			out = append(out, r)
		}
	}
	return out
}

// harness is one test's network.
type harness struct {
	t     *testing.T
	wire  *tunneltest.Wire
	logs  *logStore
	sites []*site
	done  chan struct{}
	wg    sync.WaitGroup // the test servers' goroutines
	dir   string         // the sites' key files and state_dirs (must be set)
}

// newHarness builds an empty network; at the end of the test every site is
// stopped and the goroutine count must return to what it was.
func newHarness(t *testing.T) *harness {
	t.Helper()
	checkNoLeaks(t)
	// Made before the cleanup below is registered, so removed after it
	// stopped the endpoints: a stopping endpoint saves its paths there.
	dir := t.TempDir()
	h := &harness{t: t, wire: tunneltest.NewWire(), logs: &logStore{}, done: make(chan struct{}), dir: dir}
	t.Cleanup(func() {
		for _, s := range h.sites {
			s.stop()
		}
		close(h.done)
		for _, s := range h.sites {
			s.host.Close()
			if n := s.overflow.Load(); n > 0 {
				t.Errorf("%s: the harness dropped %d datagrams the endpoint wrote to the TUN (its queue of %d was full): the test must read them as it goes", s.name, n, datagramQueue)
			}
			if n := s.backlogFull.Load(); n > 0 {
				t.Errorf("%s: the harness aborted %d connections its LAN accepted (a listener's channel was full): the test must take them as they come", s.name, n)
			}
		}
		h.wg.Wait()
		if t.Failed() {
			h.logs.mu.Lock()
			recs := h.logs.recs[max(0, len(h.logs.recs)-400):]
			h.logs.mu.Unlock()
			for _, r := range recs {
				t.Log(r)
			}
		}
	})
	return h
}

// checkNoLeaks fails the test if goroutines started during it outlive it.
// Its cleanup runs last, after the harness stopped everything.
func checkNoLeaks(t *testing.T) {
	base := runtime.NumGoroutine()
	t.Cleanup(func() {
		n := 0
		if waitFor(10*time.Second, func() bool {
			runtime.GC()
			n = runtime.NumGoroutine()
			return n <= base
		}) {
			return
		}
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("%d goroutines outlived the test (%d before):\n%s", n-base, base, buf)
	})
}

// waitFor polls cond until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// site is one scpsvpn site: an endpoint, its TUN, its socket on the wire,
// and the site's LAN (a gVisor stack standing for the kernel and hosts).
type site struct {
	h        *harness
	name     string
	priv     peers.Key
	keyFile  string
	wireAddr netip.AddrPort // the socket's address, known once it runs
	realUDP  bool           // a real UDP socket on loopback, not the wire
	lan      []netip.Prefix
	iface    string // more [interface] lines, if any
	stateDir string // the site's state_dir (a temporary directory)

	host      *stack.Stack
	tun       atomic.Pointer[tunneltest.TUN] // the running endpoint's, nil between runs
	datagrams chan []byte                    // non-TCP packets the endpoint wrote to the TUN
	// overflow counts non-TCP packets the endpoint wrote to the TUN while
	// datagrams was full: lost by the harness, not the endpoint, so a
	// test that counted arrivals would blame the tunnel. The harness fails
	// a test that overflowed (see datagramQueue).
	overflow atomic.Uint64
	// backlogFull counts connections the LAN accepted for a listener
	// whose channel was full, and aborted: a test that lost them would
	// blame the tunnel, so the harness fails it too.
	backlogFull atomic.Uint64
	// tamper, if set, may change each packet the LAN routes into the TUN
	// (its own copy), as a faulty LAN link would.
	tamper atomic.Pointer[func(pkt []byte)]
	// tap, if set, sees each packet the endpoint writes to the TUN.
	tap       atomic.Pointer[func(pkt []byte)]
	listeners sync.Map // port (uint16) -> chan *stack.Conn
	silent    sync.Map // netip.Addr -> struct{}: LAN hosts that never answer

	ep     *Endpoint
	netc   *tunneltest.Net
	conn   *tunneltest.Conn
	cancel context.CancelFunc
	done   chan error
	runs   int
}

// addSite creates a site at wire address wire owning the LAN prefixes lan.
func (h *harness) addSite(name, wire string, lan ...string) *site {
	t := h.t
	t.Helper()
	priv, err := peers.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	s := &site{
		h:         h,
		name:      name,
		priv:      priv,
		keyFile:   filepath.Join(h.dir, name+".key"),
		stateDir:  filepath.Join(h.dir, name+"-state"),
		wireAddr:  netip.MustParseAddrPort(wire),
		datagrams: make(chan []byte, datagramQueue),
	}
	if err := os.WriteFile(s.keyFile, []byte(priv.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(s.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range lan {
		s.lan = append(s.lan, netip.MustParsePrefix(p))
	}
	// The socket exists before the endpoint runs, as a socket opened
	// early would: a peer's first handshake waits in it instead of being
	// lost and retried a second later.
	if s.wireAddr.Port() != 0 {
		s.conn = h.wire.Listen(s.wireAddr)
	}
	s.host, err = stack.New(stack.Config{
		MTU:       1400,
		HandleTCP: s.serve,
		Output:    s.fromHost,
		Logger:    slog.New(&recHandler{st: h.logs}).With("site", name, "part", "host"),
	})
	if err != nil {
		t.Fatal(err)
	}
	h.sites = append(h.sites, s)
	return s
}

// fromHost is the LAN's output: packets routed into the TUN.
func (s *site) fromHost(bufs [][]byte, offset int) error {
	for _, b := range bufs {
		t := s.tun.Load()
		if t == nil {
			continue
		}
		pkt := b[offset:]
		if f := s.tamper.Load(); f != nil {
			pkt = bytes.Clone(pkt)
			(*f)(pkt)
		}
		t.Inject(pkt)
	}
	return nil
}

// toHost takes what the endpoint writes to the TUN: TCP goes to the LAN's
// stack (unless to a silent host: dropped), anything else is kept for the
// test to read.
func (s *site) toHost(pkt []byte) {
	if f := s.tap.Load(); f != nil {
		(*f)(pkt)
	}
	if info, ok := parseIP(pkt); ok && info.proto == protoTCP {
		if _, silent := s.silent.Load(info.dst); !silent {
			s.host.Inject(pkt)
		}
		return
	}
	select {
	case s.datagrams <- pkt:
	default:
		s.overflow.Add(1)
	}
}

// serve answers SYNs the endpoint sends into the LAN: accepted on ports
// with a listener, refused (RST) on others.
func (s *site) serve(req *stack.TCPRequest) {
	v, ok := s.listeners.Load(req.Dst.Port())
	if !ok {
		req.Refuse()
		return
	}
	ch := v.(chan *stack.Conn)
	go func() {
		c, err := req.Accept()
		if err != nil {
			return
		}
		select {
		case ch <- c:
		default:
			s.backlogFull.Add(1)
			c.Abort()
		}
	}()
}

// listen opens port on every address of the site's LAN.
func (s *site) listen(port uint16) chan *stack.Conn {
	ch := make(chan *stack.Conn, 64)
	s.listeners.Store(port, ch)
	return ch
}

// echo serves port by sending every byte back.
func (s *site) echo(port uint16) {
	ch := s.listen(port)
	s.h.wg.Add(1)
	go func() {
		defer s.h.wg.Done()
		for {
			select {
			case c := <-ch:
				s.h.wg.Add(1)
				go func() {
					defer s.h.wg.Done()
					defer c.Close()
					if _, err := io.Copy(c, c); err == nil {
						c.CloseWrite()
					}
				}()
			case <-s.h.done:
				return
			}
		}
	}()
}

// dial connects from src (an address on the site's LAN; port 0 picks one)
// to dst through the TUN.
func (s *site) dial(src, dst string) (*stack.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTime)
	defer cancel()
	return s.host.DialTCP(ctx, netip.MustParseAddrPort(src), netip.MustParseAddrPort(dst))
}

// peerSpec is one [[peer]] table of a site's configuration.
type peerSpec struct {
	s          *site
	subnets    []string // the peer's own LAN when empty
	noEndpoint bool     // the peer dials us; we learn its address
	link       string   // [peer.link] lines; a 20 ms RTT when empty
	keys       string   // more [[peer]] lines, e.g. quic = "repair"
}

func (s *site) peer(o *site) peerSpec { return peerSpec{s: o} }

// ifName is the site's TUN name. It names the endpoint's abstract control
// socket too, which is shared by every process in the network namespace:
// the process ID keeps test runs apart.
func (s *site) ifName() string { return fmt.Sprintf("%s-%d", s.name, os.Getpid()) }

// config renders the site's configuration file and validates it as the
// binary does.
func (s *site) config(ps ...peerSpec) *configs.Config {
	t := s.h.t
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "[interface]\nname = %q\nlisten = %q\nprivate_key_file = %q\nmtu = 1400\n", s.ifName(), s.wireAddr, s.keyFile)
	var addrs []string
	for _, p := range s.lan {
		addrs = append(addrs, fmt.Sprintf("%q", netip.PrefixFrom(p.Addr().Next(), p.Addr().BitLen())))
	}
	fmt.Fprintf(&b, "address = [%s]\n%s", strings.Join(addrs, ", "), s.iface)
	if !strings.Contains(s.iface, "state_dir") {
		fmt.Fprintf(&b, "\nstate_dir = %q\n", s.stateDir)
	}
	for _, p := range ps {
		subnets := p.subnets
		if len(subnets) == 0 {
			for _, n := range p.s.lan {
				subnets = append(subnets, n.String())
			}
		}
		quoted := make([]string, len(subnets))
		for i, n := range subnets {
			quoted[i] = fmt.Sprintf("%q", n)
		}
		fmt.Fprintf(&b, "\n[[peer]]\nname = %q\npublic_key = %q\nsubnets = [%s]\n", p.s.name, p.s.priv.PublicKey(), strings.Join(quoted, ", "))
		if !p.noEndpoint {
			fmt.Fprintf(&b, "endpoint = %q\n", p.s.wireAddr)
		}
		b.WriteString(p.keys)
		link := p.link
		if link == "" {
			link = `rtt = "20ms"`
		}
		fmt.Fprintf(&b, "[peer.link]\n%s\n", link)
	}
	cfg, err := configs.Parse([]byte(b.String()))
	if err != nil {
		t.Fatalf("%s's configuration: %v\n%s", s.name, err, b.String())
	}
	return cfg
}

// start runs a new endpoint instance for the site with the given peers.
func (s *site) start(ps ...peerSpec) {
	t := s.h.t
	t.Helper()
	if s.ep != nil {
		t.Fatalf("%s is running", s.name)
	}
	s.runs++
	log := slog.New(&recHandler{st: s.h.logs}).With("site", s.name, "run", fmt.Sprint(s.runs))
	tun := tunneltest.NewTUN(s.toHost)
	s.netc = &tunneltest.Net{}
	opts := Options{TUN: tun, Net: s.netc}
	if !s.realUDP {
		if s.conn == nil || s.conn.Closed() {
			s.conn = s.h.wire.Listen(s.wireAddr)
		}
		opts.Conn = s.conn
	}
	ep, err := New(s.config(ps...), log, opts)
	if err != nil {
		t.Fatal(err)
	}
	s.tun.Store(tun)
	ctx, cancel := context.WithCancel(context.Background())
	s.ep, s.cancel, s.done = ep, cancel, make(chan error, 1)
	go func() { s.done <- ep.Run(ctx) }()
	s.waitLog("endpoint up", map[string]string{"run": fmt.Sprint(s.runs)})
	if s.realUDP {
		s.wireAddr = ep.sock.LocalAddr()
	}
}

// stop ends the running endpoint and checks that it released its parts.
func (s *site) stop() {
	t := s.h.t
	if s.ep == nil {
		return
	}
	s.cancel()
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("%s: Run: %v", s.name, err)
		}
	case <-time.After(waitTime):
		t.Errorf("%s: Run did not return after cancel", s.name)
		return
	}
	tun := s.tun.Swap(nil)
	if !tun.Closed() || (s.conn != nil && !s.conn.Closed()) {
		t.Errorf("%s: stopped endpoint left its TUN or socket open", s.name)
	}
	if routes := s.netc.Routes(); len(routes) != 0 || s.netc.Downs() != 1 {
		t.Errorf("%s: stopped endpoint left routes %v (Down called %d times)", s.name, routes, s.netc.Downs())
	}
	s.ep = nil
}

// assoc returns the running endpoint's association with peer o.
func (s *site) assoc(o *site) *assoc { return s.ep.assocByName(o.name) }

// waitUp waits until the association with each of others is up.
func (s *site) waitUp(others ...*site) {
	t := s.h.t
	t.Helper()
	for _, o := range others {
		if !waitFor(waitTime, func() bool { a := s.assoc(o); return a != nil && a.up.Load() }) {
			t.Fatalf("%s: association with %s not up", s.name, o.name)
		}
	}
}

// waitLog waits for a log record of the site with msg and attributes.
func (s *site) waitLog(msg string, attrs map[string]string) logRec {
	s.h.t.Helper()
	return s.waitLogN(1, msg, attrs)
}

// waitLogN waits for the n-th such record.
func (s *site) waitLogN(n int, msg string, attrs map[string]string) logRec {
	t := s.h.t
	t.Helper()
	want := map[string]string{"site": s.name}
	for k, v := range attrs {
		want[k] = v
	}
	var recs []logRec
	if !waitFor(waitTime, func() bool { recs = s.h.logs.find(msg, want); return len(recs) >= n }) {
		t.Fatalf("%s: %d logs %q with %v, want %d", s.name, len(recs), msg, attrs, n)
	}
	return recs[n-1]
}

// nextDatagram returns the next non-TCP packet written to the site's TUN.
func (s *site) nextDatagram() []byte {
	s.h.t.Helper()
	select {
	case p := <-s.datagrams:
		return p
	case <-time.After(waitTime):
		s.h.t.Fatalf("%s: no datagram on the TUN", s.name)
		return nil
	}
}

// noDatagram checks that nothing but TCP reaches the site's TUN for a
// while.
func (s *site) noDatagram(d time.Duration) {
	s.h.t.Helper()
	select {
	case p := <-s.datagrams:
		info, _ := parseIP(p)
		s.h.t.Errorf("%s: unexpected packet on the TUN: proto %d %v -> %v", s.name, info.proto, info.src, info.dst)
	case <-time.After(d):
	}
}

// inject sends a packet into the site's TUN as its kernel would.
func (s *site) inject(pkt []byte) {
	if t := s.tun.Load(); t == nil || !t.Inject(pkt) {
		s.h.t.Fatalf("%s: TUN closed", s.name)
	}
}

// udpPacket builds an IPv4 or IPv6 UDP packet.
func udpPacket(src, dst netip.AddrPort, payload []byte) []byte {
	var p []byte
	var udp []byte
	if src.Addr().Is4() {
		p = ipv4Packet(17, src.Addr().As4(), dst.Addr().As4(), 8+len(payload))
		udp = p[20:]
	} else {
		p = ipv6Packet(17, src.Addr(), dst.Addr(), 8+len(payload))
		udp = p[40:]
	}
	udp[0], udp[1] = byte(src.Port()>>8), byte(src.Port())
	udp[2], udp[3] = byte(dst.Port()>>8), byte(dst.Port())
	udp[4], udp[5] = byte((8+len(payload))>>8), byte(8+len(payload))
	copy(udp[8:], payload)
	return p
}

// openEcho opens a flow from a's LAN to the echo server at dst and checks
// that it carries bytes.
func openEcho(t *testing.T, a *site, dst string) *stack.Conn {
	t.Helper()
	conn, err := a.dial("10.1.0.7:0", dst)
	if err != nil {
		t.Fatalf("dial %s: %v", dst, err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := echoCheck(conn, 64<<10); err != nil {
		t.Fatalf("flow to %s: %v", dst, err)
	}
	return conn
}

// echoFrom is openEcho from any address src of site s's LAN.
func echoFrom(t *testing.T, s *site, src, dst string) {
	t.Helper()
	c, err := s.dial(src, dst)
	if err != nil {
		t.Fatalf("%s: dial %s: %v", s.name, dst, err)
	}
	defer c.Close()
	if err := echoCheck(c, 64<<10); err != nil {
		t.Errorf("%s: flow %s -> %s: %v", s.name, src, dst, err)
	}
}

// randomBytes returns n random bytes.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// echoCheck sends size random bytes over c, reads them back, and compares.
func echoCheck(c *stack.Conn, size int) error {
	want := randomBytes(size)
	c.SetDeadline(time.Now().Add(waitTime))
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(want)
		errc <- err
	}()
	got := make([]byte, size)
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	if err := <-errc; err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if !bytes.Equal(got, want) {
		return errors.New("bytes came back changed")
	}
	return nil
}

// isReset reports whether err is the connection reset a tunnel passes on
// when the far end failed.
func isReset(err error) bool {
	return errors.Is(err, stack.ErrReset) || errors.Is(err, stack.ErrAborted)
}
