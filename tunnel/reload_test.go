package tunnel

import (
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"scpsvpn/peers"
	"scpsvpn/stack"
)

// threeSites starts a with peers b and c, each with a as its peer, and an
// echo server on port 7 at b and c.
func threeSites(t *testing.T) (h *harness, a, b, c *site) {
	h = newHarness(t)
	a = h.addSite("a", "192.0.2.1:4700", "10.1.0.0/24", "fd00:1::/64")
	b = h.addSite("b", "192.0.2.2:4700", "10.2.0.0/24", "fd00:2::/64")
	c = h.addSite("c", "192.0.2.3:4700", "10.3.0.0/24", "fd00:3::/64")
	a.start(a.peer(b), a.peer(c))
	b.start(b.peer(a))
	c.start(c.peer(a))
	a.waitUp(b, c)
	b.echo(7)
	c.echo(7)
	return h, a, b, c
}

func prefixes(ps ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		out = append(out, netip.MustParsePrefix(p))
	}
	slices.SortFunc(out, netip.Prefix.Compare)
	return out
}

// TestReloadRemovesAndAddsPeer: removing a peer on reload resets its flows,
// takes its routes away and refuses new traffic to its subnets, while the
// other peer's flow goes on untouched; adding it back carries flows again.
func TestReloadRemovesAndAddsPeer(t *testing.T) {
	_, a, b, c := threeSites(t)
	toB := openEcho(t, a, "10.2.0.5:7")
	toC := openEcho(t, a, "10.3.0.5:7")
	if got, want := a.netc.Routes(), prefixes("10.2.0.0/24", "fd00:2::/64", "10.3.0.0/24", "fd00:3::/64"); !slices.Equal(got, want) {
		t.Errorf("routes %v, want %v", got, want)
	}

	if err := a.ep.Reload(a.config(a.peer(b))); err != nil {
		t.Fatalf("reload without c: %v", err)
	}
	if _, err := toC.Read(make([]byte, 1)); !isReset(err) {
		t.Errorf("c's flow after c was removed: %v, want a reset", err)
	}
	// c was told: its end of the flow is gone too.
	if !waitFor(waitTime, func() bool { return c.ep.Stats().FlowsActive.Load() == 0 }) {
		t.Errorf("c still carries %d flows for a", c.ep.Stats().FlowsActive.Load())
	}
	if err := echoCheck(toB, 64<<10); err != nil {
		t.Errorf("b's flow across the reload: %v", err)
	}
	if got, want := a.netc.Routes(), prefixes("10.2.0.0/24", "fd00:2::/64"); !slices.Equal(got, want) {
		t.Errorf("routes after removing c: %v, want %v", got, want)
	}
	if conn, err := a.dial("10.1.0.7:0", "10.3.0.5:7"); err == nil {
		conn.Close()
		t.Error("a new flow to the removed peer's subnet was accepted")
	}
	src, dst := netip.MustParseAddrPort("10.1.0.7:5000"), netip.MustParseAddrPort("10.3.0.5:53")
	a.inject(udpPacket(src, dst, []byte("still there?")))
	if info, ok := parseIP(a.nextDatagram()); !ok || info.proto != protoICMPv4 || info.src != dst.Addr() {
		t.Errorf("a datagram to the removed peer's subnet got %+v, want ICMP unreachable from %v", info, dst.Addr())
	}
	if st := a.ep.Status(); len(st.Peers) != 1 || st.Peers[0].Name != "b" {
		t.Errorf("status after removal lists %+v", st.Peers)
	}

	if err := a.ep.Reload(a.config(a.peer(b), a.peer(c))); err != nil {
		t.Fatalf("reload adding c back: %v", err)
	}
	openEcho(t, a, "10.3.0.5:7")
	if err := echoCheck(toB, 64<<10); err != nil {
		t.Errorf("b's flow after c came back: %v", err)
	}
	if got, want := a.netc.Routes(), prefixes("10.2.0.0/24", "fd00:2::/64", "10.3.0.0/24", "fd00:3::/64"); !slices.Equal(got, want) {
		t.Errorf("routes after adding c back: %v, want %v", got, want)
	}
}

// TestReloadChangesPeer: a peer whose link settings change gets a new
// association (its flows are reset, new ones work); the unchanged peer's
// flow goes on.
func TestReloadChangesPeer(t *testing.T) {
	_, a, b, c := threeSites(t)
	toB := openEcho(t, a, "10.2.0.5:7")
	toC := openEcho(t, a, "10.3.0.5:7")
	oldB := a.assoc(b)

	faster := peerSpec{s: b, link: "rtt = \"30ms\"\nup = \"40Mbit\"\ndown = \"8Mbit\""}
	if err := a.ep.Reload(a.config(faster, a.peer(c))); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if a.assoc(b) == oldB {
		t.Fatal("b's association was kept although its link changed")
	}
	if _, err := toB.Read(make([]byte, 1)); !isReset(err) {
		t.Errorf("b's old flow after the change: %v, want a reset", err)
	}
	if err := echoCheck(toC, 64<<10); err != nil {
		t.Errorf("c's flow across the reload: %v", err)
	}
	openEcho(t, a, "10.2.0.5:7")
}

// TestReloadErrors: a reload the peer table refuses changes nothing, and
// interface changes are reported as needing a restart while the peer
// changes still apply.
func TestReloadErrors(t *testing.T) {
	_, a, b, c := threeSites(t)
	toB := openEcho(t, a, "10.2.0.5:7")
	self := peerSpec{s: a, subnets: []string{"10.9.0.0/24"}} // our own key as a peer
	if err := a.ep.Reload(a.config(a.peer(b), self)); err == nil || !strings.Contains(err.Error(), "own public key") {
		t.Errorf("reload with our own key as a peer: %v", err)
	}
	if err := echoCheck(toB, 16<<10); err != nil {
		t.Errorf("b's flow after the refused reload: %v", err)
	}
	if a.assoc(c) == nil {
		t.Error("the refused reload removed c")
	}

	cfg := a.config(a.peer(b))
	cfg.MTU = 1300
	if err := a.ep.Reload(cfg); err != nil {
		t.Fatalf("reload: %v", err)
	}
	a.waitLog("reload: [interface] changes need a restart; applying peer changes only", nil)
	if a.assoc(c) != nil {
		t.Error("c is still a peer")
	}
	if err := echoCheck(toB, 16<<10); err != nil {
		t.Errorf("b's flow: %v", err)
	}
}

// TestReloadDuringHandshakes: reloads at a while b's changes make a begin
// new associations with b on a's receive routine for b, which reads the
// endpoint's settings (sessionConfig) as Reload replaces them: the race
// detector checks the two (test.sh runs this package with -race), and a
// routine calling sessionConfig throughout makes the overlap certain.
// Every new association comes up and carries a flow.
func TestReloadDuringHandshakes(t *testing.T) {
	_, a, b, c := threeSites(t)
	cfgA := a.config(a.peer(b), a.peer(c))
	var stop atomic.Bool
	var wg sync.WaitGroup
	var reloads atomic.Int64
	// The routines stop before the sites do, also when the test fails.
	t.Cleanup(func() { stop.Store(true); wg.Wait() })
	wg.Add(2)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if err := a.ep.Reload(cfgA); err != nil {
				t.Errorf("reload at a: %v", err)
				return
			}
			reloads.Add(1)
			time.Sleep(time.Millisecond)
		}
	}()
	go func() { // what begin does on a's receive routine for b
		defer wg.Done()
		as := a.assoc(b)
		for !stop.Load() {
			if cfg := as.sessionConfig(b.wireAddr.Addr()); cfg.MaxStreams <= 0 {
				t.Errorf("session configuration with %d streams", cfg.MaxStreams)
				return
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	const changes = 6
	for i := range changes {
		// b's link to a changes: b's new association handshakes with a,
		// which begins one too.
		// b's new association either begins one with a or, when a's own
		// handshake crossed b's reload, joins the one a has just begun:
		// either way both end up in one association that b began anew.
		link := fmt.Sprintf("rtt = \"%dms\"", 20+i+1)
		oldB := b.assoc(a).cur.Load()
		if err := b.ep.Reload(b.config(peerSpec{s: a, link: link})); err != nil {
			t.Fatalf("reload at b: %v", err)
		}
		if !waitFor(waitTime, func() bool {
			curA, curB := a.assoc(b).cur.Load(), b.assoc(a).cur.Load()
			return curA != nil && curB != nil && curB != oldB && curA.id == curB.id &&
				a.assoc(b).up.Load() && b.assoc(a).up.Load()
		}) {
			t.Fatalf("change %d: a and b share no new association", i)
		}
	}
	stop.Store(true)
	wg.Wait()
	if reloads.Load() == 0 {
		t.Error("a never reloaded")
	}
	b.waitUp(a)
	openEcho(t, a, "10.2.0.5:7")
}

// TestReloadKeyFileChanged: a reload that finds a new key in the private
// key file says so, and the endpoint goes on with the key it started with
// (its peers know that one); a reload with the same key says nothing.
func TestReloadKeyFileChanged(t *testing.T) {
	_, a, b, c := threeSites(t)
	const changed = "reload: the private key file changed; the endpoint keeps the key it started with until restarted"
	if err := a.ep.Reload(a.config(a.peer(b), a.peer(c))); err != nil {
		t.Fatal(err)
	}
	a.waitLog("reload done", nil)
	if n := len(a.h.logs.find(changed, map[string]string{"site": "a"})); n != 0 {
		t.Errorf("a reload with the same key warned %d times", n)
	}

	priv, err := peers.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(a.keyFile, []byte(priv.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.ep.Reload(a.config(a.peer(b), a.peer(c))); err != nil {
		t.Fatal(err)
	}
	rec := a.waitLog(changed, map[string]string{
		"running_public_key": a.priv.PublicKey().String(),
		"file_public_key":    priv.PublicKey().String(),
	})
	if rec.level != slog.LevelWarn {
		t.Errorf("logged at %v, want a warning", rec.level)
	}
	if got := a.ep.Status().PublicKey; got != a.priv.PublicKey().String() {
		t.Errorf("status public key %s, want the one a started with", got)
	}
	openEcho(t, a, "10.2.0.5:7")

	if err := os.Remove(a.keyFile); err != nil {
		t.Fatal(err)
	}
	if err := a.ep.Reload(a.config(a.peer(b), a.peer(c))); err != nil {
		t.Fatal(err)
	}
	a.waitLog("reload: cannot read the private key file; the endpoint keeps the key it started with", nil)
}

// TestFlowEndsWhileLocalWriteBlocked: a flow whose local server has
// stopped taking data (its window full, the endpoint's write to it
// blocked) while sending none itself ends when its peer is removed: the
// endpoint resets the local connection at once rather than when the
// server next reads. Through the binary a hub's reload took a removed
// spoke's routes away before its flows ended, so the server's ACKs no
// longer reached the hub's stack and the write to the server blocked; the
// flow stayed open until the server's own timeout, in 1 run of 5-8 at
// load 20 (TestReloadRemovesSpoke).
func TestFlowEndsWhileLocalWriteBlocked(t *testing.T) {
	_, a, b, c := threeSites(t)
	accepted := a.listen(9) // a server on a's LAN that never reads
	conn, err := c.dial("10.3.0.7:0", "10.1.0.5:9")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var srv *stack.Conn
	select {
	case srv = <-accepted:
	case <-time.After(waitTime):
		t.Fatal("no connection at a's server")
	}
	defer srv.Close()
	// c writes until the flow stalls: a's server's window, a's stream
	// buffer and c's fill up.
	written := make(chan int64, 1)
	go func() {
		var n int64
		buf := make([]byte, 64<<10)
		for {
			conn.SetWriteDeadline(time.Now().Add(500 * time.Millisecond))
			k, err := conn.Write(buf)
			n += int64(k)
			if err != nil {
				written <- n
				return
			}
		}
	}()
	select {
	case n := <-written:
		t.Logf("c wrote %d bytes before the flow stalled", n)
	case <-time.After(waitTime):
		t.Fatal("c's writes never stalled")
	}
	if got := a.ep.Stats().FlowsActive.Load(); got != 1 {
		t.Fatalf("a carries %d flows, want the one", got)
	}
	if err := a.ep.Reload(a.config(a.peer(b))); err != nil {
		t.Fatalf("reload without c: %v", err)
	}
	if !waitFor(waitTime, func() bool { return a.ep.Stats().FlowsActive.Load() == 0 }) {
		t.Fatalf("a still carries %d flows after c was removed, its server not reading", a.ep.Stats().FlowsActive.Load())
	}
	// The server sees the reset once it reads what it was sent.
	srv.SetReadDeadline(time.Now().Add(waitTime))
	if _, err := io.Copy(io.Discard, srv); !isReset(err) {
		t.Errorf("a's server after c was removed: %v, want a reset", err)
	}
}
