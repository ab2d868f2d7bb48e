package testbed

// This file owns what both topologies (Testbed and Star) share about their
// endpoint processes: a proc is one process, started as `ip netns exec NS
// BINARY up --config FILE` with its output in a log file, waited for until
// its TUN device is up (or failing with the log's tail if it exits first),
// stopped with a signal and a timeout, and its PID and resident memory. The
// process gets SIGKILL if the thread that started it dies (Pdeathsig), so
// even a test binary killed outright leaves no endpoint running. A topo
// holds a topology's procs, one slot per site, and its teardown.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"scpsvpn/cmd/internal/namespace"
)

// ErrNotRunning is returned for an endpoint that was never started or was
// already stopped; it matches os.ErrProcessDone.
var ErrNotRunning = fmt.Errorf("endpoint not running: %w", os.ErrProcessDone)

// proc is one running (or exited, not yet stopped) endpoint process.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has been reaped
	err  error         // from Wait
}

// procSite is what one slot of a topology runs its endpoint with, and how
// messages name it.
type procSite struct {
	name       string // in start errors and log dumps: "site A", "spoke-1"
	ref        string // in stop and signal errors: "site A", "node 1"
	logKey     string // the log attribute naming the slot: "side", "node"
	logVal     any
	ns, tun    string
	configFile string
	logFile    string
}

// startProc starts binary up --config s.configFile in s.ns, its output
// appended to s.logFile.
func startProc(binary string, s procSite) (*proc, error) {
	logf, err := os.OpenFile(s.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("testbed: endpoint log: %w", err)
	}
	fmt.Fprintf(logf, "=== testbed: starting %s up --config %s in %s at %s\n", binary, s.configFile, s.ns, time.Now().Format(time.RFC3339Nano))
	cmd := namespace.Command(s.ns, binary, "up", "--config", s.configFile)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Pdeathsig: syscall.SIGKILL, // never outlive the testbed's process
		Setpgid:   true,            // a terminal's Ctrl-C goes to us; we stop it in order
	}
	if err := spawn(cmd); err != nil {
		logf.Close()
		return nil, fmt.Errorf("testbed: starting the endpoint of %s: %w", s.name, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// waitTUN polls netlink until s.tun is up in s.ns.
func (p *proc) waitTUN(s procSite, timeout time.Duration) error {
	h, err := namespace.Netlink(s.ns)
	if err != nil {
		return err
	}
	defer h.Close()
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("testbed: the endpoint of %s exited before %s came up (%v); log tail:\n%s",
				s.name, s.tun, p.err, logTail(s.logFile, 20))
		default:
		}
		if link, err := h.LinkByName(s.tun); err == nil && link.Attrs().Flags&net.FlagUp != 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testbed: %s did not come up in %s within %v; log tail:\n%s",
				s.tun, s.ns, timeout, logTail(s.logFile, 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends sig and waits for the process to exit; after timeout it is
// killed and killed is true. The exit code follows the shell: 128+n when
// the process died of signal n.
func (p *proc) stop(sig os.Signal, timeout time.Duration) (code int, killed bool) {
	p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(timeout):
		killed = true
		p.cmd.Process.Kill()
		<-p.done
	}
	code = p.cmd.ProcessState.ExitCode()
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	return code, killed
}

// pid returns the process id, 0 once it has exited.
func (p *proc) pid() int {
	select {
	case <-p.done:
		return 0
	default:
		return p.cmd.Process.Pid
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

// cpuSecondsOf reads a process's user and system CPU time from
// /proc/PID/stat (fields 14 and 15, in clock ticks of USER_HZ, 100 on
// Linux).
func cpuSecondsOf(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("reading the stat of %d: %w", pid, err)
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return 0, fmt.Errorf("process %d: unexpected stat %q", pid, s)
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 13 {
		return 0, fmt.Errorf("process %d: unexpected stat %q", pid, s)
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("process %d: unexpected stat %q", pid, s)
	}
	return (ut + st) / 100, nil
}

// logTail returns the last n lines of the log file at path.
func logTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// raceExitCode is the exit code of a program built with -race whose race
// detector reported a race.
const raceExitCode = 66

// raceReport returns the first race report in the log at path.
func raceReport(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	i := bytes.Index(data, []byte("WARNING: DATA RACE"))
	if i < 0 {
		return "(no report in the log)"
	}
	report := string(data[i:])
	if end := strings.Index(report, "\n=================="); end >= 0 {
		report = report[:end] // the detector's closing line
	}
	lines := strings.SplitN(report, "\n", 80)
	return strings.Join(lines[:min(len(lines), 79)], "\n")
}

// topo is the part of a topology that runs its endpoints and tears it
// down: one proc slot per site, named by site.
type topo struct {
	log          *slog.Logger
	startTimeout time.Duration
	stopTimeout  time.Duration
	site         func(i int) procSite // any i; only ref is set for one out of range

	mu       sync.Mutex
	procs    []*proc
	closing  sync.Once
	closeErr error
	closed   chan struct{}
	onClose  []func() // run first in Close (log dumps)
}

func newTopo(log *slog.Logger, slots int, startTimeout, stopTimeout time.Duration, site func(int) procSite) topo {
	return topo{log: log, startTimeout: startTimeout, stopTimeout: stopTimeout, site: site,
		procs: make([]*proc, slots), closed: make(chan struct{})}
}

// start starts slot i's endpoint and returns once its TUN device is up.
func (t *topo) start(i int, binary string) error {
	s := t.site(i)
	select {
	case <-t.closed:
		return errors.New("testbed: closed")
	default:
	}
	t.mu.Lock()
	if t.procs[i] != nil {
		t.mu.Unlock()
		return fmt.Errorf("testbed: the endpoint of %s is already running", s.name)
	}
	p, err := startProc(binary, s)
	if err != nil {
		t.mu.Unlock()
		return err
	}
	t.procs[i] = p
	t.mu.Unlock()
	t.log.Info("endpoint started", s.logKey, s.logVal, "pid", p.cmd.Process.Pid, "log", s.logFile)

	if err := p.waitTUN(s, t.startTimeout); err != nil {
		if t.pid(i) != 0 {
			t.stop(i, syscall.SIGKILL)
		}
		return err
	}
	return nil
}

// running returns slot i's proc, nil if there is none.
func (t *topo) running(i int) *proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	if i < 0 || i >= len(t.procs) {
		return nil
	}
	return t.procs[i]
}

// signal sends sig to slot i's endpoint without waiting.
func (t *topo) signal(i int, sig os.Signal) error {
	p := t.running(i)
	if p == nil {
		return fmt.Errorf("testbed: %s: %w", t.site(i).ref, ErrNotRunning)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("testbed: signalling %s: %w", t.site(i).ref, err)
	}
	return nil
}

// stop stops slot i's endpoint with sig and empties the slot.
func (t *topo) stop(i int, sig os.Signal) (int, error) {
	s := t.site(i)
	p := t.running(i)
	if p == nil {
		return -1, fmt.Errorf("testbed: %s: %w", s.ref, ErrNotRunning)
	}
	code, killed := p.stop(sig, t.stopTimeout)
	var stopErr error
	if killed {
		stopErr = fmt.Errorf("testbed: the endpoint of %s did not exit within %v of %v; killed", s.ref, t.stopTimeout, sig)
	}
	if code == raceExitCode {
		// An endpoint built with -race (test.sh runs the reload tests so)
		// exits with this code when its race detector reported a race.
		stopErr = errors.Join(stopErr, fmt.Errorf("testbed: the endpoint of %s exited with code %d: its race detector found a data race:\n%s",
			s.ref, code, raceReport(s.logFile)))
	}
	t.mu.Lock()
	t.procs[i] = nil
	t.mu.Unlock()
	t.log.Info("endpoint stopped", s.logKey, s.logVal, "signal", sig, "code", code)
	return code, stopErr
}

// pid returns slot i's endpoint process id, 0 when it is not running.
func (t *topo) pid(i int) int {
	if p := t.running(i); p != nil {
		return p.pid()
	}
	return 0
}

// dumpLogsOnFailure logs every endpoint log through tt if the test failed,
// before Close removes them, whether Close runs from a defer or a cleanup.
func (t *topo) dumpLogsOnFailure(tt TB) {
	tt.Helper()
	var mu sync.Mutex
	dumped := false
	dump := func() {
		mu.Lock()
		defer mu.Unlock()
		if dumped || !tt.Failed() {
			return
		}
		dumped = true
		for i := range t.procs {
			s := t.site(i)
			tt.Logf("--- %s endpoint log (%s):\n%s", s.name, s.logFile, logTail(s.logFile, 200))
		}
	}
	t.mu.Lock()
	t.onClose = append(t.onClose, dump)
	t.mu.Unlock()
	tt.Cleanup(dump)
}

// teardown runs once (later calls return its result): the onClose hooks,
// stopping the running endpoints, killing anything left in the namespaces
// nss, cleanup (the topology's own), deleting the namespaces (and so every
// device in them) and removing dir unless it is "". what names the
// topology in the log.
func (t *topo) teardown(what string, nss []string, cleanup func() []error, dir string) error {
	t.closing.Do(func() {
		t.mu.Lock()
		hooks := t.onClose
		t.mu.Unlock()
		for _, h := range hooks {
			h()
		}
		var errs []error
		for i := range t.procs {
			if t.pid(i) != 0 {
				if _, err := t.stop(i, syscall.SIGTERM); err != nil {
					errs = append(errs, err)
				}
			}
		}
		for _, ns := range nss {
			if pids := namespace.KillAll(ns); len(pids) > 0 {
				t.log.Warn("killed processes left in the namespace", "ns", ns, "pids", pids)
			}
		}
		errs = append(errs, cleanup()...)
		for _, ns := range nss {
			if err := namespace.Delete(ns); err != nil {
				errs = append(errs, err)
			}
		}
		if dir != "" {
			if err := os.RemoveAll(dir); err != nil {
				errs = append(errs, err)
			}
		}
		t.closeErr = errors.Join(errs...)
		close(t.closed)
		t.log.Info(what+" down", "err", t.closeErr)
	})
	return t.closeErr
}
