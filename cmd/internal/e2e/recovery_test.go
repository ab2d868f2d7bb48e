package e2e

// Crash, restart, reload. The real binary at both ends of an
// emulated GEO-like link (600 ms RTT): a killed and restarted endpoint, a
// peer removed by SIGHUP, a reload that is refused, a SIGHUP while the
// endpoint starts, and a peer that never comes up.

import (
	"bufio"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"scpsvpn/cmd/internal/linkemu"
	"scpsvpn/cmd/internal/testbed"
	"scpsvpn/cmd/internal/testenv"
	"scpsvpn/tunnel"
)

// geoRTT is the round trip of the emulated link the recovery tests use,
// and what both endpoints are told in [peer.link].
const geoRTT = 600 * time.Millisecond

// geoSites builds two sites over a 10 Mbit/s link with a 600 ms RTT and
// no loss, and starts both endpoints.
func geoSites(t *testing.T) *testbed.Testbed {
	t.Helper()
	dir := linkemu.Dir{Rate: 10_000_000, Delay: geoRTT / 2}
	link := "rtt = \"600ms\"\nup = \"10Mbit\"\ndown = \"10Mbit\"\n"
	return twoSites(t, testbed.Config{Kind: testbed.Emulated, Link: linkemu.Options{Fwd: dir, Ret: dir}, PeerLinkA: link, PeerLinkB: link})
}

// logLine is one line of an endpoint log (slog's text format).
type logLine struct {
	time  time.Time
	msg   string
	attrs string
}

var logRE = regexp.MustCompile(`^time=(\S+) level=\S+ msg=("(?:[^"\\]|\\.)*"|\S+)(.*)$`)

// logLines returns side's log lines with msg written by its last run.
func logLines(tb *testbed.Testbed, side testbed.Side, msg string) []logLine {
	log := logOf(tb, side)
	if i := strings.LastIndex(log, "=== testbed: starting"); i >= 0 {
		log = log[i:]
	}
	var out []logLine
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := logRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		text := strings.Trim(m[2], `"`)
		if text != msg {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			continue
		}
		out = append(out, logLine{time: at, msg: text, attrs: m[3]})
	}
	return out
}

// echoRTT times one round trip of a byte through c, an echo connection:
// the link's round trip as this run sees it, with whatever delay a busy
// machine adds to each trip.
func echoRTT(t *testing.T, c net.Conn) time.Duration {
	t.Helper()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	defer c.SetDeadline(time.Time{})
	start := time.Now()
	if _, err := c.Write([]byte{1}); err != nil {
		t.Fatalf("echo: %v", err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatalf("echo: %v", err)
	}
	return time.Since(start)
}

// echoConn opens a connection from client to an echo server at addr and
// checks that a message comes back.
func echoConn(t *testing.T, tb *testbed.Testbed, client testbed.Side, addr string) net.Conn {
	t.Helper()
	c, err := tb.Dial(client, "tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, client, err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 4)); err != nil {
		t.Fatalf("echo through %s: %v", addr, err)
	}
	c.SetDeadline(time.Time{})
	return c
}

// served is the server end of one connection an echo server accepted:
// when and how it ended.
type served struct {
	done chan struct{}
	at   time.Time
	err  error // nil for a reset
}

// echoListen serves an echo on side's TUN address and returns the
// address, and the server ends of the connections it accepts.
func echoListen(t *testing.T, tb *testbed.Testbed, side testbed.Side) (string, <-chan *served) {
	t.Helper()
	ln, err := tb.Listen(side, "tcp", hostPort(tb.Site(side).TUN4, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	conns := make(chan *served, 64)
	go serveEach(ln, func(c net.Conn) {
		s := &served{done: make(chan struct{})}
		select {
		case conns <- s:
		default:
		}
		defer c.Close()
		_, err := io.Copy(c, c)
		s.at = time.Now()
		if err == nil {
			err = io.EOF
		}
		if !isReset(err) {
			s.err = err
		}
		close(s.done)
	})
	return ln.Addr().String(), conns
}

// resetAt reads c until it fails and reports when, and whether it was a
// reset (a clean EOF, or nothing within d, is not).
func resetAt(c net.Conn, d time.Duration) (time.Time, error) {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	at := time.Now()
	if err == nil {
		err = io.EOF
	}
	if isReset(err) {
		return at, nil
	}
	return at, err
}

// TestKillRestartResets: site B's endpoint is killed (SIGKILL: it says
// nothing) and started again. Site A cannot tell until B's new endpoint
// handshakes; then, within two round trips of the start of that
// handshake, A resets the connections of the association that died: its
// clients' (flows to B) and its servers' (flows from B's clients). A new
// connection works at once. The round trip is the link's or, if longer,
// the one the handshake itself measured: a loaded machine adds its own
// delay to every trip, and the bound is in trips, not in seconds.
func TestKillRestartResets(t *testing.T) {
	tb := geoSites(t)
	toB, _ := echoListen(t, tb, testbed.B)
	toA, servedA := echoListen(t, tb, testbed.A)
	var clients []net.Conn
	for range 4 {
		clients = append(clients, echoConn(t, tb, testbed.A, toB))
	}
	echoConn(t, tb, testbed.B, toA)
	server := <-servedA

	if _, err := tb.StopEndpoint(testbed.B, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// A's clients see nothing yet: a dead peer looks like a quiet one.
	if _, err := clients[0].Write([]byte("anyone?")); err != nil {
		t.Fatalf("write while B is down: %v", err)
	}
	type ended struct {
		at  time.Time
		err error
	}
	ends := make([]chan ended, 0, len(clients)+1)
	for _, c := range clients {
		ch := make(chan ended, 1)
		ends = append(ends, ch)
		go func() { at, err := resetAt(c, 60*time.Second); ch <- ended{at, err} }()
	}
	ch := make(chan ended, 1)
	ends = append(ends, ch)
	go func() {
		select {
		case <-server.done:
			ch <- ended{server.at, server.err}
		case <-time.After(60 * time.Second):
			ch <- ended{time.Now(), errors.New("still open after 60 s")}
		}
	}()
	time.Sleep(time.Second)
	restarted := time.Now()
	if err := tb.StartEndpoint(testbed.B); err != nil {
		t.Fatal(err)
	}
	var last time.Time
	for i, ch := range ends {
		e := <-ch
		if e.err != nil {
			t.Errorf("connection %d of the dead association ended with %v, want a reset", i, e.err)
			continue
		}
		if e.at.After(last) {
			last = e.at
		}
	}
	if t.Failed() {
		return
	}
	start, hsRTT := handshakeStart(tb, restarted)
	if start.IsZero() {
		t.Fatalf("no handshake found in the logs:\n%s\n%s", tb.LogTail(testbed.A, 30), tb.LogTail(testbed.B, 30))
	}
	took, rtt := last.Sub(start), max(geoRTT, hsRTT)
	t.Logf("all %d connections of the dead association reset %v (%.2f RTT) after the new handshake began (the handshake's RTT %v)",
		len(ends), took.Round(time.Millisecond), float64(took)/float64(geoRTT), hsRTT.Round(time.Millisecond))
	if took > 2*rtt {
		t.Errorf("the last reset came %v after the handshake began, want within 2 RTT (%v)", took, 2*rtt)
	}
	begin := time.Now()
	echoConn(t, tb, testbed.A, toB)
	t.Logf("a new connection's first echo %v after the resets", time.Since(begin).Round(time.Millisecond))
	if !strings.Contains(logOf(tb, testbed.A), "peer restarted: resetting its streams") {
		t.Error("A did not log the restart")
	}
}

var rttAttr = regexp.MustCompile(`rtt=(\S+)`)

// handshakeStart returns when the first handshake completed after t
// began: the initiator's "session established" (either side may have
// initiated) less the round trip it measured, and that round trip. Zero
// if there is none.
func handshakeStart(tb *testbed.Testbed, after time.Time) (start time.Time, rtt time.Duration) {
	for _, side := range []testbed.Side{testbed.A, testbed.B} {
		for _, l := range logLines(tb, side, "session established") {
			m := rttAttr.FindStringSubmatch(l.attrs)
			if !strings.Contains(l.attrs, "role=initiator") || m == nil || l.time.Before(after) {
				continue
			}
			if d, err := time.ParseDuration(m[1]); err == nil && (start.IsZero() || l.time.Add(-d).Before(start)) {
				start, rtt = l.time.Add(-d), d
			}
			break
		}
	}
	return start, rtt
}

// writeConfigReplacingPeer rewrites side's configuration with its one
// peer replaced by another site (a new key, subnet 10.9.0.0/24; a config
// needs a peer) and returns a function that restores it.
func writeConfigReplacingPeer(t *testing.T, tb *testbed.Testbed, side testbed.Side) (restore func()) {
	t.Helper()
	path := tb.Site(side).ConfigFile
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cut, _, ok := strings.Cut(string(orig), "\n[[peer]]")
	if !ok {
		t.Fatalf("no [[peer]] in %s", path)
	}
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	other := fmt.Sprintf("\n[[peer]]\nname = \"site-c\"\npublic_key = %q\nsubnets = [\"10.9.0.0/24\"]\n",
		base64.StdEncoding.EncodeToString(k.PublicKey().Bytes()))
	if err := os.WriteFile(path, []byte(cut+other), 0o600); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := os.WriteFile(path, orig, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReloadRemovalClosesPeer: removing a peer by SIGHUP sends it a CLOSE:
// the removed peer's client is reset within two round trips of the reload
// (the link's, or the one measured through the tunnel just before if
// longer: not after max_outage), its endpoint logs why, and adding the
// peer back carries new connections again.
func TestReloadRemovalClosesPeer(t *testing.T) {
	tb := geoSites(t)
	toA, _ := echoListen(t, tb, testbed.A)
	c := echoConn(t, tb, testbed.B, toA)
	rtt := max(geoRTT, echoRTT(t, c))
	restore := writeConfigReplacingPeer(t, tb, testbed.A)
	ended := make(chan error, 1)
	var at time.Time
	go func() {
		var err error
		at, err = resetAt(c, 60*time.Second)
		ended <- err
	}()
	reload := time.Now()
	if err := syscall.Kill(tb.PID(testbed.A), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if err := <-ended; err != nil {
		t.Fatalf("B's client after A removed B: %v, want a reset", err)
	}
	took := at.Sub(reload)
	t.Logf("B's client reset %v (%.2f RTT) after A's SIGHUP (RTT measured before it %v)", took.Round(time.Millisecond), float64(took)/float64(geoRTT), rtt.Round(time.Millisecond))
	if took > 2*rtt {
		t.Errorf("B's client reset %v after the reload, want within 2 RTT (%v)", took, 2*rtt)
	}
	waitLog(t, tb, testbed.B, "association closed by peer", 5*time.Second)
	restore()
	if err := syscall.Kill(tb.PID(testbed.A), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := tb.Dial(testbed.B, "tcp", toA)
		if err == nil {
			c.SetDeadline(time.Now().Add(10 * time.Second))
			_, err = c.Write([]byte("back"))
			if err == nil {
				_, err = io.ReadFull(c, make([]byte, 4))
			}
			c.Close()
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B cannot reach A after A added it back: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// peersOf runs `scpsvpn status --json` at side and returns its peers'
// names and up states.
func peersOf(t *testing.T, tb *testbed.Testbed, side testbed.Side) map[string]bool {
	t.Helper()
	out, err := tb.Command(side, binary, "status", "--json", "--interface", tb.Site(side).TUNName).Output()
	if err != nil {
		t.Fatalf("status at %s: %v", side, err)
	}
	var st tunnel.Status
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("status at %s: %v\n%s", side, err, out)
	}
	m := map[string]bool{}
	for _, p := range st.Peers {
		m[p.Name] = p.Up
	}
	return m
}

// TestReloadRefusedChangesNothing: a SIGHUP whose file has a bad value, or
// a peer the endpoint refuses (its own key), changes nothing: the error is
// logged, the peer, its association, its routes and a connection in
// progress all stay.
func TestReloadRefusedChangesNothing(t *testing.T) {
	tb := twoSites(t, testbed.Config{})
	toB, _ := echoListen(t, tb, testbed.B)
	c := echoConn(t, tb, testbed.A, toB)
	path := tb.A.ConfigFile
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	routes, err := tb.Exec(testbed.A, "ip", "route", "show", "dev", tb.A.TUNName)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, edit, log string
	}{
		{"bad value", strings.Replace(string(orig), "mtu = 1400", "mtu = \"large\"", 1), "reload: config rejected, keeping the running one"},
		{"own key as a peer", strings.Replace(string(orig), tb.B.PublicKey, tb.A.PublicKey, 1), "own public key"},
	} {
		if tc.edit == string(orig) {
			t.Fatalf("%s: the edit changed nothing", tc.name)
		}
		if err := os.WriteFile(path, []byte(tc.edit), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(tb.PID(testbed.A), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitLog(t, tb, testbed.A, tc.log, 5*time.Second)
		if got := peersOf(t, tb, testbed.A); len(got) != 1 || !got[tb.B.Name] {
			t.Errorf("%s: peers after the refused reload: %v", tc.name, got)
		}
		if after, _ := tb.Exec(testbed.A, "ip", "route", "show", "dev", tb.A.TUNName); string(after) != string(routes) {
			t.Errorf("%s: routes changed:\n%s\nwas:\n%s", tc.name, after, routes)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte(tc.name[:4])); err != nil {
			t.Fatalf("%s: the connection after the refused reload: %v", tc.name, err)
		}
		if _, err := io.ReadFull(c, make([]byte, 4)); err != nil {
			t.Fatalf("%s: the connection after the refused reload: %v", tc.name, err)
		}
	}
	if strings.Contains(logOf(tb, testbed.A), "reload done") {
		t.Error("a refused reload was applied")
	}
	if err := os.WriteFile(path, orig, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestSIGHUPDuringStartup: SIGHUPs that arrive while the endpoint starts
// (from its first log line until it is up) do not crash it: the reload
// waits until the endpoint is up and then applies.
func TestSIGHUPDuringStartup(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces, TUN")
	tb := testbed.ForTest(t, testbed.Config{Endpoints: testbed.Endpoints{Binary: binary}})
	if err := tb.StartEndpoint(testbed.B); err != nil {
		t.Fatal(err)
	}
	// The start-up lasts tens of milliseconds: on a busy machine it can
	// pass between two looks at the log, and no SIGHUP lands in it. Then
	// the endpoint is stopped and started again, a few times.
	var sent, early int
	for try := 1; ; try++ {
		sent, early = startWithSIGHUPs(t, tb)
		if sent > 0 || try == 5 {
			break
		}
		t.Logf("start-up %d: no SIGHUP sent while it lasted; again", try)
		if _, err := tb.StopEndpoint(testbed.A, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	if sent == 0 {
		t.Fatal("no SIGHUP reached the endpoint during start-up, in 5 start-ups")
	}
	waitLog(t, tb, testbed.A, "association up", 10*time.Second)
	waitLog(t, tb, testbed.A, "reload done", 10*time.Second)
	t.Logf("%d SIGHUPs sent while the endpoint started, %d before it logged \"endpoint up\"; it waited: %v", sent, early,
		strings.Contains(logOf(tb, testbed.A), "reload: waiting until the endpoint is up"))
	if tb.PID(testbed.A) == 0 {
		t.Fatal("the endpoint died")
	}
	toB, _ := echoListen(t, tb, testbed.B)
	echoConn(t, tb, testbed.A, toB)
}

// startWithSIGHUPs starts site A's endpoint, sending it SIGHUPs from its
// first log line (its signal handler is installed by then) until it is
// up, and returns how many it sent and how many before "endpoint up".
func startWithSIGHUPs(t *testing.T, tb *testbed.Testbed) (sent, early int) {
	t.Helper()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Once the process logs, its signal handler is installed; send
		// SIGHUPs until its TUN is up (StartEndpoint returns).
		for {
			select {
			case <-stop:
				return
			default:
			}
			if pid := tb.PID(testbed.A); pid != 0 && len(logLines(tb, testbed.A, "peer added")) > 0 {
				if syscall.Kill(pid, syscall.SIGHUP) == nil {
					sent++
					if len(logLines(tb, testbed.A, "endpoint up")) == 0 {
						early++
					}
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
	err := tb.StartEndpoint(testbed.A)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("start with SIGHUPs during start-up: %v", err)
	}
	return sent, early
}

// TestUnreachablePeerRefused: with site B's endpoint not running, site A's
// association never comes up: a new connection toward B is refused after
// a short wait for the handshake (not held for minutes), the next at once;
// once B runs, connections work.
func TestUnreachablePeerRefused(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces, TUN")
	tb := testbed.ForTest(t, testbed.Config{Endpoints: testbed.Endpoints{Binary: binary}})
	if err := tb.StartEndpoint(testbed.A); err != nil {
		t.Fatal(err)
	}
	addr := hostPort(tb.B.TUN4, 7)
	refused := func() time.Duration {
		t.Helper()
		start := time.Now()
		c, err := tb.Dial(testbed.A, "tcp", addr)
		if err == nil {
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, err = c.Read(make([]byte, 1))
			c.Close()
		}
		took := time.Since(start)
		if !isReset(err) {
			t.Fatalf("connection toward the unreachable peer: %v after %v, want refused", err, took)
		}
		return took
	}
	first, second := refused(), refused()
	t.Logf("refused after %v, then after %v", first.Round(time.Millisecond), second.Round(time.Millisecond))
	if first > 30*time.Second { // a hang guard: the wait is 5 s plus 2 RTT
		t.Errorf("the first connection was held %v", first)
	}
	// At once: not held for the handshake wait as the first was (a
	// ratio in the same run, not a speed).
	if second > first/2 {
		t.Errorf("the second connection was held %v (the first %v), want refused at once", second, first)
	}
	if err := tb.StartEndpoint(testbed.B); err != nil {
		t.Fatal(err)
	}
	toB, _ := echoListen(t, tb, testbed.B)
	deadline := time.Now().Add(30 * time.Second)
	for !peersOf(t, tb, testbed.A)[tb.B.Name] {
		if time.Now().After(deadline) {
			t.Fatal("the association did not come up once B ran")
		}
		time.Sleep(100 * time.Millisecond)
	}
	echoConn(t, tb, testbed.A, toB)
}
