package tunnel

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testControl(t *testing.T, name, dir, instance string) (*controlServer, *syncBuffer) {
	t.Helper()
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	s := startControl(log, name, dir, func() Status { return Status{Interface: name, Instance: instance} })
	t.Cleanup(s.close)
	return s, &logs
}

// uniqueName is a TUN-like name no other test run uses at the same time.
func uniqueName(t *testing.T) string {
	return fmt.Sprintf("t%d%s", os.Getpid()%1000000, strings.ReplaceAll(t.Name(), "/", "")[4:])
}

// The abstract socket answers while the endpoint runs, a second endpoint
// with the same name in the same namespace neither steals it nor fails,
// and once closed the name is gone with nothing left to clean up.
func TestControlAbstractSocket(t *testing.T) {
	name := uniqueName(t)
	first, _ := testControl(t, name, "", "first")
	st, err := ReadStatus(name)
	if err != nil || st.Instance != "first" || st.Interface != name {
		t.Fatalf("ReadStatus: %+v, %v", st, err)
	}
	names, err := Endpoints()
	if err != nil || !slices.Contains(names, name) {
		t.Errorf("Endpoints() = %v, %v; want %s in it", names, err, name)
	}

	second, logs := testControl(t, name, "", "second")
	if !strings.Contains(logs.String(), "another process in this network namespace holds the name") {
		t.Errorf("second server's log: %s", logs.String())
	}
	if st, err := ReadStatus(name); err != nil || st.Instance != "first" {
		t.Errorf("after a second server: %+v, %v", st, err)
	}
	second.close()
	if st, err := ReadStatus(name); err != nil || st.Instance != "first" {
		t.Errorf("after the second server closed: %+v, %v", st, err)
	}

	first.close()
	if _, err := ReadStatus(name); !errors.Is(err, ErrNoEndpoint) {
		t.Errorf("after close: %v, want ErrNoEndpoint", err)
	}
	if names, _ := Endpoints(); slices.Contains(names, name) {
		t.Errorf("Endpoints() still lists %s after close", name)
	}
}

// The socket file in the runtime directory: a live one is never removed or
// replaced, a dead one is, anything else is left alone, and closing removes
// only our own file.
func TestControlSocketFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, ControlSocketFile)
	first, _ := testControl(t, uniqueName(t)+"a", dir, "first")
	if st, err := ReadStatusAt(path); err != nil || st.Instance != "first" {
		t.Fatalf("ReadStatusAt: %+v, %v", st, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket file mode: %v, %v", fi, err)
	}

	second, logs := testControl(t, uniqueName(t)+"b", dir, "second")
	if !strings.Contains(logs.String(), "answers: another endpoint is using it") {
		t.Errorf("second server's log: %s", logs.String())
	}
	second.close()
	if st, err := ReadStatusAt(path); err != nil || st.Instance != "first" {
		t.Fatalf("the live socket was disturbed: %+v, %v", st, err)
	}
	first.close()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("socket file left after close: %v", err)
	}

	// A dead socket (a killed endpoint's) is replaced.
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	third, logs := testControl(t, uniqueName(t)+"c", dir, "third")
	if st, err := ReadStatusAt(path); err != nil || st.Instance != "third" {
		t.Errorf("dead socket not replaced: %+v, %v; log: %s", st, err, logs.String())
	}
	third.close()

	// Not a socket: left alone.
	if err := os.WriteFile(path, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	fourth, logs := testControl(t, uniqueName(t)+"d", dir, "fourth")
	fourth.close()
	if b, err := os.ReadFile(path); err != nil || string(b) != "keep" {
		t.Errorf("a regular file at the socket path was touched: %q, %v", b, err)
	}
	if !strings.Contains(logs.String(), "is not a socket") {
		t.Errorf("log: %s", logs.String())
	}
}

func TestMayControl(t *testing.T) {
	for _, c := range []struct {
		uid, self int
		want      bool
	}{{0, 0, true}, {0, 999, true}, {999, 999, true}, {1000, 999, false}, {1000, 0, false}} {
		if got := mayControl(c.uid, c.self); got != c.want {
			t.Errorf("mayControl(%d, %d) = %v", c.uid, c.self, got)
		}
	}
}

func TestParseEndpoints(t *testing.T) {
	const procNetUnix = `Num       RefCount Protocol Flags    Type St Inode Path
0000000000000000: 00000002 00000000 00010000 0001 01 31001 @scpsvpn/scps0
0000000000000000: 00000003 00000000 00000000 0001 03 31002 @scpsvpn/scps0
0000000000000000: 00000002 00000000 00010000 0001 01 31003 @scpsvpn/sat1
0000000000000000: 00000002 00000000 00010000 0001 01 31004 /run/scpsvpn/scps0/control.sock
0000000000000000: 00000002 00000000 00010000 0001 01 31005 @other/x
0000000000000000: 00000002 00000000 00010000 0001 01 31006 @scpsvpn/
0000000000000000: 00000003 00000000 00000000 0001 03 31007
garbage
`
	names, err := parseEndpoints(strings.NewReader(procNetUnix))
	if err != nil || !slices.Equal(names, []string{"scps0", "sat1"}) {
		t.Errorf("parseEndpoints = %v, %v", names, err)
	}
}

// TestControlNameTaken: when another process holds the abstract name, the
// endpoint says who in its log and its status, and takes the name once it
// is free, without a restart.
func TestControlNameTaken(t *testing.T) {
	saved := controlRetry
	controlRetry = 20 * time.Millisecond
	t.Cleanup(func() { controlRetry = saved })
	name := uniqueName(t)
	squatter, err := net.Listen("unix", ControlAddr(name))
	if err != nil {
		t.Fatal(err)
	}
	defer squatter.Close()
	s, logs := testControl(t, name, "", "ours")
	holder := fmt.Sprintf("pid %d", os.Getpid())
	if l := logs.String(); !strings.Contains(l, "control socket unavailable") || !strings.Contains(l, holder) {
		t.Errorf("log does not name the holder (%s): %s", holder, l)
	}
	if st := s.state(); st.Bound || !strings.Contains(st.Error, holder) || st.Socket != ControlAddr(name) {
		t.Errorf("state with the name taken: %+v", st)
	}
	squatter.Close()
	if !waitFor(waitTime, func() bool { return s.state().Bound }) {
		t.Fatalf("the name was not taken back once free: %+v", s.state())
	}
	if st, err := ReadStatus(name); err != nil || st.Instance != "ours" {
		t.Errorf("ReadStatus after the name was free: %+v, %v", st, err)
	}
	if st := s.state(); st.Error != "" {
		t.Errorf("state once bound: %+v", st)
	}
	// The log follows the binding: the status may show it first.
	if !waitFor(waitTime, func() bool { return strings.Contains(logs.String(), "control socket bound") }) {
		t.Errorf("no log of the name bound: %s", logs.String())
	}
}

// The endpoint's status carries the control socket's state.
func TestStatusShowsControlSocket(t *testing.T) {
	_, a, _ := twoSites(t)
	st := a.ep.Status()
	if !st.Control.Bound || st.Control.Socket != ControlAddr(a.ifName()) || st.Control.Error != "" {
		t.Errorf("status control %+v, want %s bound", st.Control, ControlAddr(a.ifName()))
	}
}
