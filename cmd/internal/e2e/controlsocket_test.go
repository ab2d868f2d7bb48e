package e2e

// The abstract control socket name can be taken by any local user before
// the endpoint starts. What an operator sees then: the endpoint's log names
// the process holding it, `scpsvpn status` refuses the impostor and says
// what happened and where else to look, and once that process is gone the
// endpoint takes its name back without a restart.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"scpsvpn/cmd/internal/testbed"
	"scpsvpn/cmd/internal/testenv"
	"scpsvpn/tunnel"
)

// squatterEnv, set to an abstract socket name, makes the test binary a
// process that listens on it until its stdin closes (runSquatter).
const squatterEnv = "SCPSVPN_E2E_SQUATTER"

func runSquatter(name string) int {
	ln, err := net.Listen("unix", name)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer ln.Close()
	fmt.Println("listening")
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// squat starts a process in side's namespace, as the user nobody, that
// holds the abstract socket name; closing the returned function ends it.
func squat(t *testing.T, tb *testbed.Testbed, side testbed.Side, name string) (pid int, stop func()) {
	t.Helper()
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(workDir, "squatter")
	if err := os.WriteFile(exe, self, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := tb.Command(side, "setpriv", fmt.Sprintf("--reuid=%d", nobody), fmt.Sprintf("--regid=%d", nobody), "--clear-groups", exe)
	cmd.Env = append(os.Environ(), squatterEnv+"="+name)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("squatter: %v", err)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			stdin.Close()
			cmd.Wait()
		}
	}
	t.Cleanup(stop)
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "listening\n" {
		t.Fatalf("squatter: %q", line)
	}
	return cmd.Process.Pid, stop
}

func TestControlSocketTakenByAnotherUser(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces, TUN")
	tb := testbed.ForTest(t, testbed.Config{Endpoints: testbed.Endpoints{Binary: binary}})
	name := tb.Site(testbed.A).TUNName
	pid, stop := squat(t, tb, testbed.A, tunnel.ControlAddr(name))
	for _, s := range []testbed.Side{testbed.A, testbed.B} {
		if err := tb.StartEndpoint(s); err != nil {
			t.Fatal(err)
		}
	}
	waitLog(t, tb, testbed.A, "association up", 10*time.Second)
	waitLog(t, tb, testbed.A, "control socket unavailable", 5*time.Second)
	holder := fmt.Sprintf("pid %d (squatter), uid %d (nobody)", pid, nobody)
	if l := logOf(tb, testbed.A); !strings.Contains(l, holder) {
		t.Errorf("the log does not name the holder %q", holder)
	}

	// status reaches the impostor: it refuses it and says why.
	out, err := statusIn(t, tb, testbed.A, "--interface", name)
	t.Logf("status with the name taken: %s", out)
	if err == nil || !strings.Contains(string(out), "held by "+holder) || !strings.Contains(string(out), "not trusting it") ||
		!strings.Contains(string(out), "control socket unavailable") {
		t.Errorf("status with the name taken: %v\n%s", err, out)
	}

	// The holder goes: the endpoint takes the name back on its own.
	stop()
	waitLog(t, tb, testbed.A, "control socket bound", 30*time.Second)
	out, err = statusIn(t, tb, testbed.A, "--interface", name)
	var st tunnel.Status
	if err != nil || json.Unmarshal(out, &st) != nil {
		t.Fatalf("status once the name is free: %v\n%s", err, out)
	}
	if !st.Control.Bound || st.Control.Error != "" || len(st.Peers) != 1 || !st.Peers[0].Up {
		t.Errorf("status once the name is free: control %+v, peers %+v", st.Control, st.Peers)
	}
}
