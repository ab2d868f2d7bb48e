package e2e

// The endpoint as a service, and control sockets per network namespace,
// through the real binary.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"scpsvpn/cmd/internal/testbed"
	"scpsvpn/cmd/internal/testenv"
	"scpsvpn/tunnel"
)

// download carries size random bytes from a server at to's TUN address to a
// client at from, and checks every byte.
func download(t *testing.T, tb *testbed.Testbed, from, to testbed.Side, size int) {
	t.Helper()
	data, sum := randomData(t, size)
	ln, err := tb.Listen(to, "tcp", hostPort(tb.Site(to).TUN4, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := serveOnce(t, ln, func(c net.Conn) error {
		_, err := c.Write(data)
		return err
	})
	c, err := tb.Dial(from, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial across the tunnel: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	got, n, err := hashAll(c)
	if err != nil || n != int64(size) {
		t.Fatalf("download: %d of %d bytes, %v", n, size, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "download", got, sum)
}

// statusIn runs `scpsvpn status --json ARGS` inside side's namespace.
func statusIn(t *testing.T, tb *testbed.Testbed, side testbed.Side, args ...string) ([]byte, error) {
	t.Helper()
	return tb.Command(side, binary, append([]string{"status", "--json"}, args...)...).CombinedOutput()
}

// Two endpoints whose TUNs are both "scps0", in two namespaces of one host:
// both start, and `status` inside each namespace (by name, or listing all)
// shows that namespace's endpoint and no other.
func TestControlSocketPerNamespace(t *testing.T) {
	tb := twoSites(t, testbed.Config{TUNName: "scps0"})
	download(t, tb, testbed.A, testbed.B, 1<<20)
	var netns [2]string
	for _, side := range []testbed.Side{testbed.A, testbed.B} {
		other := tb.Site(1 - side).Name
		for _, args := range [][]string{{"--interface", "scps0"}, nil} {
			out, err := statusIn(t, tb, side, args...)
			if err != nil {
				t.Fatalf("%s: status %v: %v\n%s", side, args, err, out)
			}
			var st tunnel.Status
			if err := json.Unmarshal(out, &st); err != nil {
				t.Fatalf("%s: status %v: %v\n%s", side, args, err, out)
			}
			if st.Interface != "scps0" || len(st.Peers) != 1 || st.Peers[0].Name != other || !st.Peers[0].Up {
				t.Errorf("%s: status %v shows %+v, want its own endpoint with peer %s up", side, args, st, other)
			}
			netns[side] = st.Netns
		}
	}
	if netns[0] == "" || netns[0] == netns[1] {
		t.Errorf("the endpoints report namespaces %q and %q", netns[0], netns[1])
	}

	// Only root and the endpoint's own user may read the status.
	out, err := tb.Command(testbed.A, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		binary, "status", "--interface", "scps0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "permission denied: uid 65534") {
		t.Errorf("status as nobody: %v\n%s", err, out)
	}
}

// A control socket name already taken (any local process can bind an
// abstract name) costs the status, never the tunnel.
func TestControlSocketTakenKeepsDataPath(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces, TUN")
	tb := testbed.ForTest(t, testbed.Config{Endpoints: testbed.Endpoints{Binary: binary}, TUNName: "scps0"})
	squat, err := tb.Listen(testbed.A, "unix", tunnel.ControlAddr("scps0"))
	if err != nil {
		t.Fatal(err)
	}
	defer squat.Close()
	for _, s := range []testbed.Side{testbed.A, testbed.B} {
		if err := tb.StartEndpoint(s); err != nil {
			t.Fatal(err)
		}
	}
	waitLog(t, tb, testbed.A, "association up", 10*time.Second)
	waitLog(t, tb, testbed.A, "control socket unavailable", time.Second)
	download(t, tb, testbed.A, testbed.B, 1<<20)
	download(t, tb, testbed.B, testbed.A, 1<<20)
	if out, err := statusIn(t, tb, testbed.B); err != nil {
		t.Errorf("site B's status: %v\n%s", err, out)
	}
}

// nobody is the unprivileged user the least-privilege test runs as.
const nobody = 65534

// capNetAdmin is CAP_NET_ADMIN's bit in /proc/PID/status capability masks.
const capNetAdmin = 1 << 12

// The endpoint does everything with CAP_NET_ADMIN alone, as a user that is
// not root, the way the packaged unit runs it: TUN, addresses, routes,
// re-originated connections, socket buffers and the control socket. Under
// systemd's protocol it says READY=1 once up, RELOADING=1/READY=1 around a
// SIGHUP and STOPPING=1 on the way down.
func TestLeastPrivilege(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces, TUN, setpriv")
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Fatal("setpriv is not installed (Debian: util-linux)")
	}
	// t.TempDir's parent is private; the endpoint's user must reach this.
	work, err := os.MkdirTemp("", "scpsvpn-lp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	if err := os.Chmod(work, 0o755); err != nil {
		t.Fatal(err)
	}
	// Distributions make /dev/net/tun mode 0666 (udev); a bare container
	// may not. `ip netns exec` gives the endpoint a mount namespace of its
	// own, so a 0666 node is bound over it there without touching the host.
	tunNode := filepath.Join(work, "tun")
	if err := syscall.Mknod(tunNode, syscall.S_IFCHR|0o666, int(unix.Mkdev(10, 200))); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tunNode, 0o666); err != nil {
		t.Fatal(err)
	}
	// What the unit gives the service: its user, CAP_NET_ADMIN as the only
	// ambient and bounding capability, no new privileges.
	wrapper := filepath.Join(work, "scpsvpn-as-nobody")
	script := fmt.Sprintf("#!/bin/sh\nmount --bind %s /dev/net/tun || exit 1\n"+
		"exec setpriv --reuid=%d --regid=%d --clear-groups --inh-caps=-all,+net_admin --ambient-caps=-all,+net_admin --bounding-set=-all,+net_admin --no-new-privs %s \"$@\"\n",
		tunNode, nobody, nobody, binary)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	tb := testbed.ForTest(t, testbed.Config{Endpoints: testbed.Endpoints{Binary: wrapper}})
	for _, p := range []string{tb.Dir, tb.A.KeyFile, tb.B.KeyFile, tb.A.ConfigFile, tb.B.ConfigFile} {
		if err := os.Chown(p, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	// Site A runs as systemd would start it: a runtime directory of its
	// own and a notify socket. Site B runs without either.
	runDir := filepath.Join(work, "run")
	if err := os.Mkdir(runDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(runDir, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	notifyPath := filepath.Join(work, "notify")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	if err := os.Chmod(notifyPath, 0o666); err != nil {
		t.Fatal(err)
	}
	t.Setenv("RUNTIME_DIRECTORY", runDir)
	t.Setenv("NOTIFY_SOCKET", notifyPath)
	if err := tb.StartEndpoint(testbed.A); err != nil {
		t.Fatal(err)
	}
	os.Unsetenv("RUNTIME_DIRECTORY")
	os.Unsetenv("NOTIFY_SOCKET")
	if err := tb.StartEndpoint(testbed.B); err != nil {
		t.Fatal(err)
	}
	nextNotify := func(want string) {
		t.Helper()
		buf := make([]byte, 512)
		notify.SetReadDeadline(time.Now().Add(20 * time.Second))
		n, err := notify.Read(buf)
		if err != nil || !strings.HasPrefix(string(buf[:n]), want) {
			t.Fatalf("notify socket: %q, %v; want %q", buf[:n], err, want)
		}
	}
	nextNotify("READY=1")
	// READY=1 came after the routes into the TUN.
	if out, err := tb.Exec(testbed.A, "ip", "route", "show", "dev", tb.A.TUNName); err != nil || !strings.Contains(string(out), tb.B.LAN4.String()) {
		t.Errorf("routes when READY=1 arrived: %v\n%s", err, out)
	}
	waitLog(t, tb, testbed.A, "association up", 15*time.Second)
	waitLog(t, tb, testbed.B, "association up", 15*time.Second)

	for _, side := range []testbed.Side{testbed.A, testbed.B} {
		uid, eff, bnd := procCreds(t, tb.PID(side))
		if uid != nobody || eff != capNetAdmin || bnd != capNetAdmin {
			t.Errorf("%s endpoint runs as uid %d with capabilities %#x (bounding %#x); want uid %d with CAP_NET_ADMIN only",
				side, uid, eff, bnd, nobody)
		}
	}
	download(t, tb, testbed.A, testbed.B, 4<<20)
	download(t, tb, testbed.B, testbed.A, 4<<20)
	if out, err := tb.Exec(testbed.A, "ping", "-c", "3", "-i", "0.2", "-W", "2", tb.B.TUN4.String()); err != nil || !strings.Contains(string(out), " 0% packet loss") {
		t.Errorf("ping across the tunnel: %v\n%s", err, out)
	}
	for _, side := range []testbed.Side{testbed.A, testbed.B} {
		if log := logOf(tb, side); strings.Contains(log, "level=ERROR") || strings.Contains(log, "socket buffer capped") {
			t.Errorf("%s logged errors or capped buffers:\n%s", side, tb.LogTail(side, 30))
		}
		// SO_RCVBUFFORCE worked: the kernel shows twice the 8 MiB asked.
		out, err := tb.Exec(side, "ss", "-uamn", "sport", fmt.Sprintf("= :%d", tb.Port))
		if m := regexp.MustCompile(`rb(\d+)`).FindStringSubmatch(string(out)); err != nil || m == nil || m[1] != strconv.Itoa(16<<20) {
			t.Errorf("%s association socket's receive buffer: %v\n%s", side, err, out)
		}
	}

	// The status answers its own user, also through the runtime
	// directory's socket from outside the namespace; root's client does
	// not trust an endpoint run by a stranger.
	sock := filepath.Join(runDir, tunnel.ControlSocketFile)
	out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", binary, "status", "--socket", sock).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "site-b") {
		t.Errorf("status through %s as the endpoint's user: %v\n%s", sock, err, out)
	}
	if out, err := exec.Command(binary, "status", "--socket", sock).CombinedOutput(); err == nil || !strings.Contains(string(out), "not trusting it") {
		t.Errorf("root's status of a stranger's endpoint: %v\n%s", err, out)
	}

	if err := syscall.Kill(tb.PID(testbed.A), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	nextNotify("RELOADING=1\nMONOTONIC_USEC=")
	nextNotify("READY=1")
	if code, err := tb.StopEndpoint(testbed.A, syscall.SIGTERM); err != nil || code != 0 {
		t.Errorf("stop site A: exit %d, %v", code, err)
	}
	nextNotify("STOPPING=1")
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("control socket file left after stop: %v", err)
	}
	if out, err := tb.Exec(testbed.A, "ip", "link", "show", tb.A.TUNName); err == nil {
		t.Errorf("TUN left after stop:\n%s", out)
	}
}

// procCreds reads a process's real uid and its effective and bounding
// capability masks.
func procCreds(t *testing.T, pid int) (uid int, eff, bnd uint64) {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "Uid:":
			uid, _ = strconv.Atoi(f[1])
		case "CapEff:":
			eff, _ = strconv.ParseUint(f[1], 16, 64)
		case "CapBnd:":
			bnd, _ = strconv.ParseUint(f[1], 16, 64)
		}
	}
	return uid, eff, bnd
}

// scrape fetches side's /metrics from inside its namespace.
func scrape(t *testing.T, tb *testbed.Testbed, side testbed.Side, addr string) string {
	t.Helper()
	body, err := fetchMetrics(context.Background(), tb, side, addr)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// fetchMetrics is scrape returning its error.
func fetchMetrics(ctx context.Context, tb *testbed.Testbed, side testbed.Side, addr string) (string, error) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			return tb.DialContext(ctx, side, network, a)
		},
	}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("scrape %s: %w", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("scrape %s: %s, %v\n%s", addr, resp.Status, err, body)
	}
	return string(body), nil
}

// metricValue finds one series (name and labels exactly as exposed) in a
// scrape.
func metricValue(t *testing.T, text, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no series %s in the scrape", series)
	return 0
}

// The metrics endpoint ([interface] metrics) serves the endpoint's counters
// read at scrape time: around a download they move by what was carried.
func TestMetricsAroundTransfer(t *testing.T) {
	const addr = "127.0.0.1:9477"
	tb := twoSites(t, testbed.Config{InterfaceA: `metrics = "` + addr + `"`})
	before := scrape(t, tb, testbed.A, addr)
	const size = 8 << 20
	download(t, tb, testbed.A, testbed.B, size)
	after := scrape(t, tb, testbed.A, addr)
	grew := func(series string, atLeast float64) {
		t.Helper()
		b, a := metricValue(t, before, series), metricValue(t, after, series)
		if a-b < atLeast {
			t.Errorf("%s went from %v to %v, want a rise of at least %v", series, b, a, atLeast)
		}
	}
	grew(`scpsvpn_peer_stream_received_bytes_total{peer="site-b"}`, size)
	grew(`scpsvpn_peer_received_bytes_total{peer="site-b"}`, size)
	grew(`scpsvpn_peer_received_packets_total{peer="site-b"}`, size/1500)
	grew(`scpsvpn_peer_sent_packets_total{peer="site-b"}`, 1)
	grew(`scpsvpn_peer_streams_opened_total{by="local",peer="site-b"}`, 1)
	grew(`scpsvpn_flows_total{origin="local"}`, 1)
	grew(`scpsvpn_tun_packets_total`, 1)
	if v := metricValue(t, after, `scpsvpn_peer_up{peer="site-b"}`); v != 1 {
		t.Errorf("peer_up = %v", v)
	}
	if v := metricValue(t, after, `scpsvpn_peer_rtt_seconds{peer="site-b"}`); v <= 0 || v > 1 {
		t.Errorf("peer_rtt_seconds = %v on a veth", v)
	}
	if v := metricValue(t, after, `scpsvpn_peer_handshakes_total{peer="site-b"}`); v < 1 {
		t.Errorf("peer_handshakes_total = %v", v)
	}
	for _, name := range []string{"scpsvpn_build_info{", "process_resident_memory_bytes ", "go_goroutines ", "scpsvpn_endpoint_info{"} {
		if !strings.Contains(after, "\n"+name) {
			t.Errorf("no %s in the scrape", name)
		}
	}
}
