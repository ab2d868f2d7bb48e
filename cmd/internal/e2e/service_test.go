package e2e

// Issue 9 (the endpoint as a service) and issue 10 part 4 (control sockets
// per network namespace), through the real binary.

import (
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

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
	tb := testbed.ForTest(t, testbed.Config{Binary: binary, TUNName: "scps0"})
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
