// Package e2e holds the end-to-end tests: the real scpsvpn binary at both
// ends of a link between two network namespaces, with plain kernel TCP
// clients and servers and real TUN devices. They need root; under CI=true
// they must run, never skip.
package e2e

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"scpsvpn/cmd/internal/testbed"
	"scpsvpn/cmd/internal/testenv"
)

var binary string

// workDir is a directory every user may read, for programs tests run as
// other users; set for root only.
var workDir string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if spec := os.Getenv(synFlooderEnv); spec != "" {
		return runSYNFlooder(spec) // a child of TestSYNFlood, not a test run
	}
	if name := os.Getenv(squatterEnv); name != "" {
		return runSquatter(name) // a child of TestControlSocketTakenByAnotherUser
	}
	if os.Geteuid() == 0 {
		sweepWorkDirs()
		dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", workDirPrefix, os.Getpid()))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		// Tests run the binary as other users too (least privilege).
		if err := os.Chmod(dir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		workDir = dir
		if binary, err = testenv.BuildBinary(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	code := m.Run()
	if left := leftovers(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: the tests left behind (a test's cleanup missed them; failed or not, each test removes what it made):\n  %s\n",
			strings.Join(left, "\n  "))
		return 1
	}
	return code
}

// workDirPrefix starts the name of each run's work directory, followed by
// the run's process ID: a run killed before its deferred removal (a
// timeout, a kill) leaves its directory, with the binary in it, for the
// next run to remove.
const workDirPrefix = "scpsvpn-e2e-"

// sweepWorkDirs removes the work directories of runs whose process is
// gone (a testbed's own namespaces and directories are swept by the
// next testbed).
func sweepWorkDirs() {
	entries, _ := os.ReadDir(os.TempDir())
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), workDirPrefix)
		pidText, _, dash := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || !dash || !e.IsDir() || err != nil || pid <= 0 || pid > 1<<22 { // PID_MAX_LIMIT
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(filepath.Join(os.TempDir(), e.Name()))
		}
	}
}

// leftovers lists what this test process made and did not remove once
// every test ended: testbed namespaces and directories, and child
// processes (an endpoint, a server, a flooder), running or unreaped.
// A test that fails still removes what it made; only a killed process
// leaves its namespaces, for the next testbed's sweep.
func leftovers() []string {
	left := testbed.LeftBy(os.Getpid())
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 || f[1] != fmt.Sprint(os.Getpid()) {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		left = append(left, fmt.Sprintf("process %s (state %s): %s", e.Name(), f[0], strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")))
	}
	return left
}

// twoSites builds a testbed, starts both endpoints and waits until the
// association is up.
func twoSites(t *testing.T, cfg testbed.Config) *testbed.Testbed {
	t.Helper()
	return twoSitesWithin(t, 10*time.Second, cfg)
}

// twoSitesWithin is twoSites waiting up to wait for the association.
func twoSitesWithin(t *testing.T, wait time.Duration, cfg testbed.Config) *testbed.Testbed {
	t.Helper()
	testenv.RequireRoot(t, "network namespaces, TUN")
	cfg.Binary = binary
	tb := testbed.ForTest(t, cfg)
	for _, s := range []testbed.Side{testbed.A, testbed.B} {
		if err := tb.StartEndpoint(s); err != nil {
			t.Fatalf("start %s: %v", s, err)
		}
	}
	waitLog(t, tb, testbed.A, "association up", wait)
	waitLog(t, tb, testbed.B, "association up", wait)
	return tb
}

func logOf(tb *testbed.Testbed, side testbed.Side) string {
	b, _ := os.ReadFile(tb.Site(side).LogFile)
	return string(b)
}

func waitLog(t *testing.T, tb *testbed.Testbed, side testbed.Side, what string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if strings.Contains(logOf(tb, side), what) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: no %q in the endpoint log within %s", side, what, within)
}

// hostPort joins an address and port for net.Dial.
func hostPort(addr fmt.Stringer, port int) string {
	return net.JoinHostPort(addr.String(), fmt.Sprint(port))
}

// randomData returns n random bytes and their SHA-256.
func randomData(t *testing.T, n int) ([]byte, [32]byte) {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b, sha256.Sum256(b)
}

// hashAll reads r to EOF and returns the SHA-256 and the byte count.
func hashAll(r io.Reader) ([32]byte, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum, n, err
}

func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// isReset reports whether err is what a client sees when its connection is
// refused or reset.
func isReset(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	return strings.Contains(s, "connection reset") || strings.Contains(s, "connection refused") || strings.Contains(s, "broken pipe")
}

// sendChecked sends data over TCP from client to a server listening on
// srvAddr at the server side, and checks that the server read exactly data
// (SHA-256), that its reply came back, and that it saw the client's own
// address and port. It returns an error rather than failing, so transfers
// can run concurrently.
func sendChecked(tb *testbed.Testbed, client, server testbed.Side, srvAddr netip.Addr, data []byte) error {
	want := sha256.Sum256(data)
	ln, err := tb.Listen(server, "tcp", hostPort(srvAddr, 0))
	if err != nil {
		return err
	}
	defer ln.Close()
	type result struct {
		sum  [32]byte
		n    int64
		peer net.Addr
		err  error
	}
	res := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			res <- result{err: err}
			return
		}
		defer c.Close()
		sum, n, err := hashAll(c)
		if err == nil {
			_, err = c.Write([]byte("ok"))
		}
		res <- result{sum, n, c.RemoteAddr(), err}
	}()
	c, err := tb.Dial(client, "tcp", ln.Addr().String())
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write(data); err != nil {
		return fmt.Errorf("client write: %w", err)
	}
	if err := closeWrite(c); err != nil {
		return err
	}
	reply, err := io.ReadAll(c)
	if err != nil || string(reply) != "ok" {
		return fmt.Errorf("reply %q, %v", reply, err)
	}
	r := <-res
	switch {
	case r.err != nil:
		return fmt.Errorf("server read after %d bytes: %w", r.n, r.err)
	case r.sum != want:
		return fmt.Errorf("server read %d bytes with SHA-256 %x, want %d bytes with %x", r.n, r.sum[:6], len(data), want[:6])
	case r.peer.String() != c.LocalAddr().String(): // the server sees the client's own address and port
		return fmt.Errorf("server saw %s, the client is %s", r.peer, c.LocalAddr())
	}
	return nil
}

func mustEqual(t *testing.T, what string, got, want [32]byte) {
	t.Helper()
	if !bytes.Equal(got[:], want[:]) {
		t.Fatalf("%s: SHA-256 %x, want %x", what, got[:6], want[:6])
	}
}

// serveEach calls f in a goroutine for every connection ln accepts, until
// ln is closed.
func serveEach(ln net.Listener, f func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go f(c)
	}
}

// listenEcho listens on side's TUN address and echoes every connection
// (echoServer) until the test ends.
func listenEcho(t *testing.T, tb *testbed.Testbed, side testbed.Side) net.Listener {
	t.Helper()
	ln, err := tb.Listen(side, "tcp", hostPort(tb.Site(side).TUN4, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go echoServer(ln, nil)
	return ln
}

// recordSources sends the source of every datagram pc receives to got,
// until pc is closed.
func recordSources(pc net.PacketConn, got chan<- netip.AddrPort) {
	buf := make([]byte, 2048)
	for {
		_, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		got <- from.(*net.UDPAddr).AddrPort()
	}
}
