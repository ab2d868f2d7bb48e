package testbed

// Tests of the testbed: configuration rendering (no root), and, as root,
// both underlays carrying UDP both ways, endpoints started, measured and
// stopped (with the fake endpoint), teardown after a panic and on a signal,
// two testbeds at once, and the sweep of a dead run's namespaces.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"
	"github.com/vishvananda/netns"

	"scpsvpn/cmd/internal/linkemu"
	"scpsvpn/cmd/internal/namespace"
	"scpsvpn/cmd/internal/testenv"
	"scpsvpn/configs"
)

func selfBinary(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

func testSites(t *testing.T) (*Site, *Site) {
	tb := &Testbed{ID: "abc123", Kind: Veth}
	a := tb.newSite(A, netip.MustParsePrefix("10.200.0.1/24"), "10.1.0", "fd00:1::")
	b := tb.newSite(B, netip.MustParsePrefix("10.200.0.2/24"), "10.2.0", "fd00:2::")
	for _, s := range []*Site{a, b} {
		var err error
		if s.PrivateKey, s.PublicKey, err = keyPair(); err != nil {
			t.Fatal(err)
		}
	}
	a.KeyFile, b.KeyFile = "/tmp/x/a.key", "/tmp/x/b.key"
	return a, b
}

// TestSiteConfig: a site's configuration, written through configs, is
// what the endpoint's own parser reads back, with the caller's raw lines
// in their tables.
func TestSiteConfig(t *testing.T) {
	a, b := testSites(t)
	var e Endpoints
	e.defaults()
	dir := t.TempDir()
	write := func(p sitePair) (*configs.Config, error) {
		path := filepath.Join(dir, p.Self.Name+".toml")
		if err := e.writeConfig(path, siteConfig(p)); err != nil {
			return nil, err
		}
		return configs.Load(path)
	}
	c, err := write(sitePair{Self: a, Peer: b, Port: 4700, WithEndpoint: true,
		Interface: `max_flows = 99`, PeerLink: "up = \"1.5Mbit\"\nrtt = \"600ms\""})
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "scpsabc123a" || c.Listen.String() != "10.200.0.1:4700" || c.PrivateKeyFile != "/tmp/x/a.key" ||
		c.LogLevel != "debug" || c.MTU != 1400 || c.MaxFlows != 99 || fmt.Sprint(c.Addresses) != "[10.1.0.1/32 fd00:1::1/128]" {
		t.Errorf("interface: %+v", c)
	}
	if len(c.Peers) != 1 {
		t.Fatalf("peers %+v", c.Peers)
	}
	p := c.Peers[0]
	if p.Name != "site-b" || p.Endpoint.String() != "10.200.0.2:4700" || fmt.Sprint(p.Subnets) != "[10.2.0.0/24 fd00:2::/64]" {
		t.Errorf("peer %+v", p)
	}
	if p.Link.Up != 1_500_000 || p.Link.RTT != 600*time.Millisecond {
		t.Errorf("peer link %+v", p.Link)
	}

	// Without endpoint and link table; a raw line replaces the testbed's key.
	c, err = write(sitePair{Self: b, Peer: a, Port: 9, Interface: "mtu = 1280"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Peers[0].Endpoint.IsValid() || c.Peers[0].Link.Up != 0 || c.MTU != 1280 {
		t.Errorf("b: endpoint %v, link %+v, mtu %d", c.Peers[0].Endpoint, c.Peers[0].Link, c.MTU)
	}

	// Bad raw lines are caught with a clear error.
	if _, err := write(sitePair{Self: a, Peer: b, Port: 1, Interface: `max_outage = "60s"`}); err == nil ||
		!strings.Contains(err.Error(), `site-a: the extra [interface] lines`) || !strings.Contains(err.Error(), `unknown key "max_outage"`) {
		t.Errorf("a link key in [interface]: %v", err)
	}
	if _, err := write(sitePair{Self: a, Peer: b, Port: 1, PeerLink: "up = "}); err == nil || !strings.Contains(err.Error(), "peer site-b") {
		t.Errorf("broken link line: %v", err)
	}
}

func TestKeys(t *testing.T) {
	priv, pub, err := keyPair()
	if err != nil {
		t.Fatal(err)
	}
	if len(priv) != 44 || len(pub) != 44 {
		t.Fatalf("key lengths %d/%d, want 44 (base64 of 32 bytes)", len(priv), len(pub))
	}
	if got, err := PublicKeyOf(priv); err != nil || got != pub {
		t.Fatalf("PublicKeyOf = %q, %v; want %q", got, err, pub)
	}
	if _, err := PublicKeyOf("not base64!"); err == nil {
		t.Fatal("garbage accepted")
	}
	path := filepath.Join(t.TempDir(), "k")
	if err := writeKey(path, priv); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v", st.Mode(), err)
	}
}

func TestNamesFitInterfaceLimit(t *testing.T) {
	for _, kind := range []Kind{Veth, Emulated} {
		tb := &Testbed{ID: "ffffff", Kind: kind}
		s := tb.newSite(B, netip.MustParsePrefix("10.200.0.2/24"), "10.2.0", "fd00:2::")
		for _, n := range []string{s.TUNName, s.UnderlayDev} {
			if len(n) > 15 || len(n) == 0 {
				t.Errorf("%s: interface name %q", kind, n)
			}
		}
	}
}

// udpAcross checks UDP from each side to the other over the underlay.
func udpAcross(t *testing.T, tb *Testbed) {
	t.Helper()
	for _, dir := range []struct{ from, to Side }{{A, B}, {B, A}} {
		to := tb.Site(dir.to)
		srv, err := tb.ListenPacket(dir.to, "udp", netip.AddrPortFrom(to.Underlay.Addr(), 5555).String())
		if err != nil {
			t.Fatal(err)
		}
		c, err := tb.Dial(dir.from, "udp", netip.AddrPortFrom(to.Underlay.Addr(), 5555).String())
		if err != nil {
			t.Fatal(err)
		}
		msg := fmt.Sprintf("hello from %v", dir.from)
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 100)
		srv.SetReadDeadline(time.Now().Add(3 * time.Second))
		n, from, err := srv.ReadFrom(buf)
		if err != nil || string(buf[:n]) != msg {
			t.Fatalf("%v -> %v: got %q, %v", dir.from, dir.to, buf[:n], err)
		}
		if want := tb.Site(dir.from).Underlay.Addr().String(); from.(*net.UDPAddr).IP.String() != want {
			t.Errorf("came from %v, want %s", from, want)
		}
		// And the reply.
		srv.WriteTo([]byte("ack"), from)
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if n, err := c.Read(buf); err != nil || string(buf[:n]) != "ack" {
			t.Fatalf("reply %v -> %v: %q, %v", dir.to, dir.from, buf[:n], err)
		}
		srv.Close()
		c.Close()
	}
}

func nsExists(name string) bool {
	_, err := os.Stat(filepath.Join(namespace.Dir, name))
	return err == nil
}

func TestVethUnderlay(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces")
	tb := ForTest(t, Config{Kind: Veth})
	udpAcross(t, tb)
	for _, s := range []*Site{tb.A, tb.B} {
		if !nsExists(s.NS) {
			t.Errorf("namespace %s missing", s.NS)
		}
		out, err := tb.Exec(s.Side, "ip", "-br", "addr", "show", "dev", s.UnderlayDev)
		if err != nil || !strings.Contains(string(out), s.Underlay.String()) {
			t.Errorf("%s: %s, %v", s.Side, out, err)
		}
		out, err = tb.Exec(s.Side, "ip", "-br", "link", "show", "dev", "lo")
		if err != nil || !strings.Contains(string(out), "UNKNOWN") && !strings.Contains(string(out), "UP") {
			t.Errorf("%s lo: %s, %v", s.Side, out, err)
		}
		// The files exist, the key is private and matches the public key.
		key, err := os.ReadFile(s.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		if pub, err := PublicKeyOf(string(key)); err != nil || pub != s.PublicKey {
			t.Errorf("%s key file gives %q, %v; want %q", s.Side, pub, err, s.PublicKey)
		}
		cfg, err := os.ReadFile(s.ConfigFile)
		if err != nil || !bytes.Contains(cfg, []byte(tb.Site(1-s.Side).PublicKey)) {
			t.Errorf("%s config lacks the peer's key: %v\n%s", s.Side, err, cfg)
		}
	}
	// The veth pair never appeared in the host namespace.
	if out, _ := exec.Command("ip", "link", "show", tb.A.UnderlayDev).CombinedOutput(); !strings.Contains(string(out), "does not exist") {
		t.Errorf("underlay device visible in the host namespace: %s", out)
	}
}

func TestEmulatedUnderlay(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces")
	tb := ForTest(t, Config{Kind: Emulated, Link: linkemu.Options{
		Fwd: linkemu.Dir{Delay: 20 * time.Millisecond, Rate: 10_000_000},
		Ret: linkemu.Dir{Delay: 30 * time.Millisecond, Rate: 2_000_000},
	}})
	udpAcross(t, tb)
	c := tb.Emulator().Counters()
	if c.Fwd.Packets < 2 || c.Ret.Packets < 2 {
		t.Errorf("the traffic did not cross the emulator: %+v", c)
	}
	// The round trip shows the emulated delay.
	srv, err := tb.ListenPacket(B, "udp", "10.200.0.2:6000")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := srv.ReadFrom(buf)
			if err != nil {
				return
			}
			srv.WriteTo(buf[:n], from)
		}
	}()
	cl, err := tb.Dial(A, "udp", "10.200.0.2:6000")
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Every round trip takes at least the configured 20+30 ms, never less:
	// the emulator is in the path, its delay applied each way. How little
	// more it takes is the emulator's precision, which linkemu tests
	// against figures of its own run; here a loaded machine may add any
	// amount (the read deadline is the hang guard).
	for range 5 {
		start := time.Now()
		cl.Write([]byte("ping"))
		cl.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := cl.Read(make([]byte, 64)); err != nil {
			t.Fatal(err)
		}
		if rtt := time.Since(start); rtt < 50*time.Millisecond {
			t.Errorf("RTT %v, below the configured 50ms", rtt)
		} else {
			t.Logf("RTT %v (configured 50ms)", rtt)
		}
	}
}

func TestEndpointLifecycle(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces")
	tb := ForTest(t, Config{Kind: Veth, Endpoints: Endpoints{Binary: selfBinary(t)}})
	for _, side := range []Side{A, B} {
		if err := tb.StartEndpoint(side); err != nil {
			t.Fatal(err)
		}
		if err := tb.StartEndpoint(side); err == nil {
			t.Errorf("%s: a second start was accepted", side)
		}
	}
	for _, side := range []Side{A, B} {
		s := tb.Site(side)
		pid := tb.PID(side)
		if pid == 0 {
			t.Fatalf("%s: no PID", side)
		}
		// ip netns exec execs the binary: the PID is the endpoint itself.
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); exe != selfBinary(t) {
			t.Errorf("%s: PID %d runs %q", side, pid, exe)
		}
		rss, err := tb.RSS(side)
		if err != nil || rss < 1<<20 {
			t.Errorf("%s: RSS %d, %v", side, rss, err)
		}
		// The TUN addresses are usable in the site's namespace.
		ln, err := tb.Listen(side, "tcp", netip.AddrPortFrom(s.TUN4, 0).String())
		if err != nil {
			t.Errorf("%s: listening on the TUN address: %v", side, err)
		} else {
			ln.Close()
		}
		out, err := tb.Exec(side, "ip", "-br", "addr", "show", "dev", s.TUNName)
		if err != nil || !strings.Contains(string(out), s.TUN6.String()) {
			t.Errorf("%s TUN: %s, %v", side, out, err)
		}
	}
	code, err := tb.StopEndpoint(A, syscall.SIGTERM)
	if err != nil || code != 0 {
		t.Fatalf("stop A: code %d, %v", code, err)
	}
	if tb.PID(A) != 0 {
		t.Error("PID still set after stop")
	}
	if tail := tb.LogTail(A, 5); !strings.Contains(tail, "stopping on terminated") {
		t.Errorf("log tail of A:\n%s", tail)
	}
	if _, err := tb.StopEndpoint(A, syscall.SIGTERM); !errors.Is(err, ErrNotRunning) || !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("stopping a stopped endpoint: %v", err)
	}
	if _, err := tb.RSS(A); !errors.Is(err, ErrNotRunning) {
		t.Errorf("RSS of a stopped endpoint: %v", err)
	}
	// And it can be started again (a restart test needs that).
	if err := tb.StartEndpoint(A); err != nil {
		t.Fatal(err)
	}
	// B stays running: Close stops it.
}

// TestSecondPair: Config.SecondPair adds sites A2 and B2 in A's and B's
// namespaces, with their own subnets, TUN devices, keys and port, peers
// of each other only; all four endpoints run at once.
func TestSecondPair(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces")
	tb := ForTest(t, Config{Kind: Veth, Endpoints: Endpoints{Binary: selfBinary(t)}, SecondPair: true})
	if tb.A2.NS != tb.A.NS || tb.B2.NS != tb.B.NS || tb.A2.Underlay != tb.A.Underlay {
		t.Fatalf("second pair in %s/%s on %s, want the first pair's namespaces and underlay", tb.A2.NS, tb.B2.NS, tb.A2.Underlay)
	}
	if tb.A2.LAN4.String() != "10.3.0.0/24" || tb.B2.LAN4.String() != "10.4.0.0/24" || tb.A2.TUNName == tb.A.TUNName {
		t.Errorf("second pair: %s %s %s", tb.A2.LAN4, tb.B2.LAN4, tb.A2.TUNName)
	}
	cfg, err := os.ReadFile(tb.A2.ConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := toml.Unmarshal(cfg, &raw); err != nil {
		t.Fatal(err)
	}
	peer := raw["peer"].([]any)[0].(map[string]any)
	if want := netip.AddrPortFrom(tb.B.Underlay.Addr(), uint16(tb.Port+1)).String(); peer["endpoint"] != want || peer["public_key"] != tb.B2.PublicKey {
		t.Errorf("A2's peer %v, want B2 at %s", peer, want)
	}
	for _, side := range []Side{A, B, A2, B2} {
		if err := tb.StartEndpoint(side); err != nil {
			t.Fatalf("%s: %v", side, err)
		}
	}
	for _, side := range []Side{A, B, A2, B2} {
		s := tb.Site(side)
		if out, err := tb.Exec(side, "ip", "-br", "addr", "show", "dev", s.TUNName); err != nil || !strings.Contains(string(out), s.TUN4.String()) {
			t.Errorf("%s TUN: %s, %v", side, out, err)
		}
	}
	plain := ForTest(t, Config{Kind: Veth, Endpoints: Endpoints{Binary: selfBinary(t)}})
	if err := plain.StartEndpoint(A2); err == nil {
		t.Error("A2 started without SecondPair")
	}
}

func TestEndpointFailures(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces")
	tb := ForTest(t, Config{Kind: Veth, Endpoints: Endpoints{Binary: selfBinary(t), StopTimeout: 300 * time.Millisecond}})
	writeFake(t, tb.A.ConfigFile, fakeOrders{FakeExit: 3})
	writeFake(t, tb.B.ConfigFile, fakeOrders{FakeIgnoreTerm: true})
	start := time.Now()
	err := tb.StartEndpoint(A)
	if err == nil || !strings.Contains(err.Error(), "failing on purpose with 3") {
		t.Fatalf("a failing endpoint: %v", err)
	}
	// Noticed as the process exits, not at the start timeout (15 s).
	if time.Since(start) > 10*time.Second {
		t.Errorf("the failure took %v to notice", time.Since(start))
	}
	if tb.PID(A) != 0 {
		t.Error("a failed endpoint has a PID")
	}
	if err := tb.StartEndpoint(B); err != nil {
		t.Fatal(err)
	}
	code, err := tb.StopEndpoint(B, syscall.SIGTERM)
	if err == nil || code != 128+int(syscall.SIGKILL) {
		t.Fatalf("an endpoint ignoring SIGTERM: code %d, %v", code, err)
	}

	// A binary that does not exist fails with the reason in the log.
	tb.cfg.Binary = "/nonexistent/scpsvpn"
	if err := tb.StartEndpoint(B); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("missing binary: %v", err)
	}
}

func TestCloseAfterPanic(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces")
	var tb *Testbed
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v", r)
			}
		}()
		var err error
		tb, err = New(Config{Kind: Emulated, Endpoints: Endpoints{Binary: selfBinary(t)}})
		if err != nil {
			t.Fatal(err)
		}
		defer tb.Close()
		if err := tb.StartEndpoint(A); err != nil {
			t.Fatal(err)
		}
		// Something else running in the namespace, not tracked by the testbed.
		stray := tb.Command(B, "sleep", "60")
		if err := stray.Start(); err != nil {
			t.Fatal(err)
		}
		go stray.Wait()
		panic("boom")
	}()
	assertGone(t, tb)
}

// assertGone checks that nothing of tb is left.
func assertGone(t *testing.T, tb *Testbed) {
	t.Helper()
	for _, s := range []*Site{tb.A, tb.B} {
		if nsExists(s.NS) {
			t.Errorf("namespace %s left behind", s.NS)
		}
		if len(namespace.Pids(s.NS)) > 0 {
			t.Errorf("processes left in %s", s.NS)
		}
	}
	if _, err := os.Stat(tb.Dir); !os.IsNotExist(err) {
		t.Errorf("directory %s left behind: %v", tb.Dir, err)
	}
	if tb.PID(A) != 0 || tb.PID(B) != 0 {
		t.Error("endpoint still running")
	}
	// No namespace of this process survives (the TUN and veth devices
	// lived only in them).
	entries, _ := os.ReadDir(namespace.Dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), "-"+tb.ID+"-") {
			t.Errorf("namespace %s left behind", e.Name())
		}
	}
}

func TestCloseOnSignal(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces")
	tb, err := New(Config{Kind: Veth, Endpoints: Endpoints{Binary: selfBinary(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if err := tb.StartEndpoint(B); err != nil {
		t.Fatal(err)
	}
	got := make(chan os.Signal, 1)
	stop := tb.CloseOnSignal(func(s os.Signal) { got <- s }, syscall.SIGUSR1)
	defer stop()
	syscall.Kill(os.Getpid(), syscall.SIGUSR1)
	select {
	case s := <-got:
		if s != syscall.SIGUSR1 {
			t.Fatalf("got %v", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no teardown on the signal")
	}
	assertGone(t, tb)
}

func TestTwoTestbedsAtOnce(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces")
	var wg sync.WaitGroup
	tbs := make([]*Testbed, 2)
	errs := make([]error, 2)
	for i, kind := range []Kind{Emulated, Veth} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tbs[i], errs[i] = New(Config{Kind: kind, Endpoints: Endpoints{Binary: selfBinary(t)}})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
		defer tbs[i].Close()
	}
	x, y := tbs[0], tbs[1]
	if x.ID == y.ID || x.A.NS == y.A.NS || x.A.TUNName == y.A.TUNName || x.Dir == y.Dir {
		t.Fatalf("names collide: %+v %+v", x.A, y.A)
	}
	// Same addresses, separate namespaces: both work at the same time,
	// endpoints included.
	for _, tb := range tbs {
		if err := tb.StartEndpoint(A); err != nil {
			t.Fatal(err)
		}
	}
	for _, tb := range tbs {
		udpAcross(t, tb)
	}
	x.Close()
	assertGone(t, x)
	udpAcross(t, y) // closing one left the other intact
	if y.PID(A) == 0 {
		t.Error("closing one testbed stopped the other's endpoint")
	}
	y.Close()
	assertGone(t, y)
}

func TestSweepStale(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces")
	// A PID that is surely dead: a process that already exited.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("%s%d-dead00-a", NamePrefix, dead.Process.Pid)
	live := fmt.Sprintf("%s%d-live00-a", NamePrefix, os.Getpid())
	// Another process's sweep (a test binary beside this one) would take
	// the planted namespace first: hold theirs off until ours is done.
	unlock, err := lockSweeps()
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	for _, n := range []string{name, live} {
		if err := namespace.Create(n); err != nil {
			t.Fatal(err)
		}
	}
	defer namespace.Delete(live)
	defer namespace.Delete(name)
	swept, err := sweepStale()
	if err != nil {
		t.Fatal(err)
	}
	if nsExists(name) || !strings.Contains(strings.Join(swept, " "), name) {
		t.Errorf("stale namespace %s not swept (swept %v)", name, swept)
	}
	if !nsExists(live) {
		t.Errorf("the namespace of a live process was swept")
	}
	if h, err := netns.GetFromName(live); err == nil {
		h.Close()
	} else {
		t.Errorf("live namespace unusable after the sweep: %v", err)
	}
}

func TestKilledProcessLeavesNothing(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces")
	cmd := exec.Command(selfBinary(t))
	cmd.Env = append(os.Environ(), "TESTBED_ORPHAN_HELPER=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	var pid int
	var nsA, nsB string
	if _, serr := fmt.Sscanf(line, "READY %d %s %s", &pid, &nsA, &nsB); serr != nil || err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper: %q, %v", line, err)
	}
	// The helper's own sweep is done (it is up); no other process's sweep
	// may take its namespaces before this test's.
	unlock, err := lockSweeps()
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	cmd.Process.Kill() // no Close, no deferred cleanup: only the kernel and the next run
	cmd.Wait()
	// Pdeathsig takes the endpoint down with its parent.
	for deadline := time.Now().Add(3 * time.Second); processAlive(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("endpoint %d outlived the killed testbed process", pid)
		}
	}
	// The namespaces stay until the next run sweeps them.
	if !nsExists(nsA) || !nsExists(nsB) {
		t.Fatalf("namespaces %s %s already gone?", nsA, nsB)
	}
	swept, err := sweepStale()
	if err != nil {
		t.Fatal(err)
	}
	if nsExists(nsA) || nsExists(nsB) {
		t.Fatalf("stale namespaces not swept (swept %v)", swept)
	}
	// Nor its temporary directory.
	if left := LeftBy(cmd.Process.Pid); len(left) != 0 {
		t.Fatalf("stale directories not swept: %v", left)
	}
}

func TestNewCleansUpOnError(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces")
	// This process's namespaces and directories only: other processes
	// (another test binary beside this one) make and remove their own.
	before := LeftBy(os.Getpid())
	// Invalid emulator options fail after the namespaces exist.
	_, err := New(Config{Kind: Emulated, Link: linkemu.Options{Fwd: linkemu.Dir{Loss: 2}}})
	if err == nil {
		t.Fatal("invalid link options accepted")
	}
	if after := LeftBy(os.Getpid()); len(after) != len(before) {
		t.Fatalf("left after a failed New: %v (before it: %v)", after, before)
	}
	if _, err := New(Config{Kind: "wire"}); err == nil {
		t.Fatal("unknown kind accepted")
	}
	if _, err := New(Config{UnderlayA: netip.MustParsePrefix("10.0.0.1/24"), UnderlayB: netip.MustParsePrefix("10.9.0.1/24")}); err == nil {
		t.Fatal("underlay addresses in different subnets accepted")
	}
}
