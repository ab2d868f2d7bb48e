package testbed

// This file owns the endpoint processes: starting `ip netns exec NS BINARY
// up --config FILE` with its output in the site's log file, waiting until
// its TUN device is up (or failing with the log's tail if it exits first),
// stopping it with a signal, and its PID and resident memory. The process
// gets SIGKILL if the thread that started it dies (Pdeathsig), so even a
// test binary killed outright leaves no endpoint running.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
)

// ErrNotRunning is returned for an endpoint that was never started or was
// already stopped; it matches os.ErrProcessDone.
var ErrNotRunning = fmt.Errorf("endpoint not running: %w", os.ErrProcessDone)

type endpoint struct {
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{} // closed when the process has been reaped
	err  error         // from Wait
}

// StartEndpoint starts side's endpoint and returns once its TUN device is
// up in the site's namespace.
func (tb *Testbed) StartEndpoint(side Side) error {
	s := tb.Site(side)
	if tb.cfg.Binary == "" {
		return errors.New("testbed: no endpoint binary configured (Config.Binary)")
	}
	select {
	case <-tb.closed:
		return errors.New("testbed: closed")
	default:
	}
	tb.mu.Lock()
	if tb.eps[side] != nil {
		tb.mu.Unlock()
		return fmt.Errorf("testbed: the endpoint of %s is already running", side)
	}
	logf, err := os.OpenFile(s.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		tb.mu.Unlock()
		return fmt.Errorf("testbed: endpoint log: %w", err)
	}
	fmt.Fprintf(logf, "=== testbed: starting %s up --config %s in %s at %s\n", tb.cfg.Binary, s.ConfigFile, s.NS, time.Now().Format(time.RFC3339Nano))
	cmd := tb.Command(side, tb.cfg.Binary, "up", "--config", s.ConfigFile)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Pdeathsig: syscall.SIGKILL, // never outlive the testbed's process
		Setpgid:   true,            // a terminal's Ctrl-C goes to us; we stop it in order
	}
	if err := spawn(cmd); err != nil {
		logf.Close()
		tb.mu.Unlock()
		return fmt.Errorf("testbed: starting the endpoint of %s: %w", side, err)
	}
	ep := &endpoint{cmd: cmd, log: logf, done: make(chan struct{})}
	go func() {
		ep.err = cmd.Wait()
		logf.Close()
		close(ep.done)
	}()
	tb.eps[side] = ep
	tb.mu.Unlock()
	tb.log.Info("endpoint started", "side", side, "pid", cmd.Process.Pid, "log", s.LogFile)

	if err := tb.waitTUN(side, ep); err != nil {
		if tb.PID(side) != 0 {
			tb.StopEndpoint(side, syscall.SIGKILL)
		}
		return err
	}
	return nil
}

// waitTUN polls netlink until the endpoint's TUN is up.
func (tb *Testbed) waitTUN(side Side, ep *endpoint) error {
	s := tb.Site(side)
	h, err := netlinkIn(s.NS)
	if err != nil {
		return err
	}
	defer h.Close()
	deadline := time.Now().Add(tb.cfg.StartTimeout)
	for {
		select {
		case <-ep.done:
			return fmt.Errorf("testbed: the endpoint of %s exited before %s came up (%v); log tail:\n%s",
				side, s.TUNName, ep.err, tb.LogTail(side, 20))
		default:
		}
		var link netlink.Link
		if link, err = h.LinkByName(s.TUNName); err == nil && link.Attrs().Flags&net.FlagUp != 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testbed: %s did not come up in %s within %v; log tail:\n%s",
				s.TUNName, s.NS, tb.cfg.StartTimeout, tb.LogTail(side, 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// spawner is a goroutine locked to its OS thread for the life of the
// process. Pdeathsig fires when the thread that forked the child exits, not
// the process; Go may retire a thread whose locked goroutine ends, so
// children are forked from this thread, which never ends.
var spawner = sync.OnceValue(func() chan func() {
	ch := make(chan func())
	go func() {
		runtime.LockOSThread() // never unlocked: the thread lives as long as the process
		for f := range ch {
			f()
		}
	}()
	return ch
})

// spawn starts cmd from the spawner thread.
func spawn(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	spawner() <- func() { errc <- cmd.Start() }
	return <-errc
}

// StopEndpoint sends sig to side's endpoint and waits for it to exit;
// after Config.StopTimeout it is killed and an error says so. The exit code
// follows the shell: 128+n when the process died of signal n.
func (tb *Testbed) StopEndpoint(side Side, sig os.Signal) (int, error) {
	tb.mu.Lock()
	ep := tb.eps[side]
	tb.mu.Unlock()
	if ep == nil {
		return -1, fmt.Errorf("testbed: %s: %w", side, ErrNotRunning)
	}
	ep.cmd.Process.Signal(sig)
	var stopErr error
	select {
	case <-ep.done:
	case <-time.After(tb.cfg.StopTimeout):
		stopErr = fmt.Errorf("testbed: the endpoint of %s did not exit within %v of %v; killed", side, tb.cfg.StopTimeout, sig)
		ep.cmd.Process.Kill()
		<-ep.done
	}
	tb.mu.Lock()
	tb.eps[side] = nil
	tb.mu.Unlock()
	code := ep.cmd.ProcessState.ExitCode()
	if ws, ok := ep.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	tb.log.Info("endpoint stopped", "side", side, "signal", sig, "code", code)
	return code, stopErr
}

// PID returns the endpoint's process id, 0 when it is not running.
func (tb *Testbed) PID(side Side) int {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	ep := tb.eps[side]
	if ep == nil {
		return 0
	}
	select {
	case <-ep.done:
		return 0
	default:
		return ep.cmd.Process.Pid
	}
}

// RSS returns the endpoint's resident set size in bytes (VmRSS).
func (tb *Testbed) RSS(side Side) (int64, error) {
	pid := tb.PID(side)
	if pid == 0 {
		return 0, fmt.Errorf("testbed: %s: %w", side, ErrNotRunning)
	}
	return rssOf(pid)
}

func rssOf(pid int) (int64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("reading the status of %d: %w", pid, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			f := strings.Fields(rest) // "12345 kB"
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return kb << 10, nil
				}
			}
			return 0, fmt.Errorf("process %d: unexpected VmRSS line %q", pid, sc.Text())
		}
	}
	return 0, fmt.Errorf("process %d has no VmRSS (exited?)", pid)
}

// LogTail returns the last n lines of side's endpoint log.
func (tb *Testbed) LogTail(side Side, n int) string {
	data, err := os.ReadFile(tb.Site(side).LogFile)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TB is the part of testing.TB the log helpers use.
type TB interface {
	Helper()
	Logf(format string, args ...any)
	Failed() bool
	Cleanup(func())
}

// DumpLogsOnFailure logs both endpoint logs through t if the test failed,
// before Close removes them, whether Close runs from a defer or a cleanup.
func (tb *Testbed) DumpLogsOnFailure(t TB) {
	t.Helper()
	var once sync.Mutex
	dumped := false
	dump := func() {
		once.Lock()
		defer once.Unlock()
		if dumped || !t.Failed() {
			return
		}
		dumped = true
		for _, side := range []Side{A, B} {
			t.Logf("--- %s endpoint log (%s):\n%s", side, tb.Site(side).LogFile, tb.LogTail(side, 200))
		}
	}
	tb.mu.Lock()
	tb.onClose = append(tb.onClose, dump)
	tb.mu.Unlock()
	t.Cleanup(dump)
}
