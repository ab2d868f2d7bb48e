package testbed

// This file owns a Star's endpoint processes and the per-node helpers tests
// use: starting `ip netns exec NS BINARY up --config FILE` for a node (the
// same way, with the same Pdeathsig guarantee, as the two-site testbed),
// signalling it (SIGHUP reloads), stopping it, its log, running Go code and
// commands inside a node's namespace, and tying a Star to a test.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

func (st *Star) node(i int) (*Node, error) {
	if i < 0 || i >= len(st.Nodes) {
		return nil, fmt.Errorf("testbed: no node %d (0 is the hub, 1..%d the spokes)", i, len(st.Nodes)-1)
	}
	return st.Nodes[i], nil
}

// StartEndpoint starts node i's endpoint and returns once its TUN device is
// up in the node's namespace.
func (st *Star) StartEndpoint(i int) error {
	n, err := st.node(i)
	if err != nil {
		return err
	}
	if st.cfg.Binary == "" {
		return errors.New("testbed: no endpoint binary configured (StarConfig.Binary)")
	}
	select {
	case <-st.closed:
		return errors.New("testbed: closed")
	default:
	}
	st.mu.Lock()
	if st.eps[i] != nil {
		st.mu.Unlock()
		return fmt.Errorf("testbed: the endpoint of %s is already running", n.Name)
	}
	logf, err := os.OpenFile(n.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		st.mu.Unlock()
		return fmt.Errorf("testbed: endpoint log: %w", err)
	}
	fmt.Fprintf(logf, "=== testbed: starting %s up --config %s in %s at %s\n", st.cfg.Binary, n.ConfigFile, n.NS, time.Now().Format(time.RFC3339Nano))
	cmd := st.Command(i, st.cfg.Binary, "up", "--config", n.ConfigFile)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Pdeathsig: syscall.SIGKILL, // never outlive the testbed's process
		Setpgid:   true,            // a terminal's Ctrl-C goes to us; we stop it in order
	}
	if err := spawn(cmd); err != nil {
		logf.Close()
		st.mu.Unlock()
		return fmt.Errorf("testbed: starting the endpoint of %s: %w", n.Name, err)
	}
	ep := &endpoint{cmd: cmd, log: logf, done: make(chan struct{})}
	go func() {
		ep.err = cmd.Wait()
		logf.Close()
		close(ep.done)
	}()
	st.eps[i] = ep
	st.mu.Unlock()
	st.log.Info("endpoint started", "node", n.Name, "pid", cmd.Process.Pid, "log", n.LogFile)

	if err := st.waitTUN(n, ep); err != nil {
		if st.PID(i) != 0 {
			st.StopEndpoint(i, syscall.SIGKILL)
		}
		return err
	}
	return nil
}

// StartAll starts every endpoint, the hub first.
func (st *Star) StartAll() error {
	for i := range st.Nodes {
		if err := st.StartEndpoint(i); err != nil {
			return err
		}
	}
	return nil
}

// waitTUN polls netlink until the node's TUN is up.
func (st *Star) waitTUN(n *Node, ep *endpoint) error {
	h, err := netlinkIn(n.NS)
	if err != nil {
		return err
	}
	defer h.Close()
	deadline := time.Now().Add(st.cfg.StartTimeout)
	for {
		select {
		case <-ep.done:
			return fmt.Errorf("testbed: the endpoint of %s exited before %s came up (%v); log tail:\n%s",
				n.Name, n.TUNName, ep.err, st.LogTail(n.Index, 20))
		default:
		}
		if link, err := h.LinkByName(n.TUNName); err == nil && link.Attrs().Flags&net.FlagUp != 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testbed: %s did not come up in %s within %v; log tail:\n%s",
				n.TUNName, n.NS, st.cfg.StartTimeout, st.LogTail(n.Index, 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Signal sends sig to node i's endpoint without waiting (SIGHUP: reload
// the configuration file).
func (st *Star) Signal(i int, sig os.Signal) error {
	st.mu.Lock()
	var ep *endpoint
	if i >= 0 && i < len(st.eps) {
		ep = st.eps[i]
	}
	st.mu.Unlock()
	if ep == nil {
		return fmt.Errorf("testbed: node %d: %w", i, ErrNotRunning)
	}
	if err := ep.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("testbed: signalling node %d: %w", i, err)
	}
	return nil
}

// StopEndpoint sends sig to node i's endpoint and waits for it to exit;
// after StarConfig.StopTimeout it is killed and an error says so. The exit
// code follows the shell: 128+n when the process died of signal n.
func (st *Star) StopEndpoint(i int, sig os.Signal) (int, error) {
	st.mu.Lock()
	var ep *endpoint
	if i >= 0 && i < len(st.eps) {
		ep = st.eps[i]
	}
	st.mu.Unlock()
	if ep == nil {
		return -1, fmt.Errorf("testbed: node %d: %w", i, ErrNotRunning)
	}
	ep.cmd.Process.Signal(sig)
	var stopErr error
	select {
	case <-ep.done:
	case <-time.After(st.cfg.StopTimeout):
		stopErr = fmt.Errorf("testbed: the endpoint of node %d did not exit within %v of %v; killed", i, st.cfg.StopTimeout, sig)
		ep.cmd.Process.Kill()
		<-ep.done
	}
	st.mu.Lock()
	st.eps[i] = nil
	st.mu.Unlock()
	code := ep.cmd.ProcessState.ExitCode()
	if ws, ok := ep.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	st.log.Info("endpoint stopped", "node", st.Nodes[i].Name, "signal", sig, "code", code)
	return code, stopErr
}

// PID returns node i's endpoint process id, 0 when it is not running.
func (st *Star) PID(i int) int {
	st.mu.Lock()
	defer st.mu.Unlock()
	if i < 0 || i >= len(st.eps) || st.eps[i] == nil {
		return 0
	}
	ep := st.eps[i]
	select {
	case <-ep.done:
		return 0
	default:
		return ep.cmd.Process.Pid
	}
}

// Log returns node i's whole endpoint log.
func (st *Star) Log(i int) string {
	n, err := st.node(i)
	if err != nil {
		return ""
	}
	b, _ := os.ReadFile(n.LogFile)
	return string(b)
}

// LogTail returns the last lines of node i's endpoint log.
func (st *Star) LogTail(i, lines int) string {
	n, err := st.node(i)
	if err != nil {
		return err.Error()
	}
	data, err := os.ReadFile(n.LogFile)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	ls := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

// Do runs fn on a thread inside node i's namespace: sockets fn creates stay
// there after it returns. fn must not start goroutines that expect to be
// inside it.
func (st *Star) Do(i int, fn func() error) error {
	n, err := st.node(i)
	if err != nil {
		return err
	}
	return inNamespace(n.NS, fn)
}

// Listen is net.Listen inside node i's namespace.
func (st *Star) Listen(i int, network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := st.Do(i, func() (err error) {
		ln, err = net.Listen(network, addr)
		return err
	})
	return ln, err
}

// ListenPacket is net.ListenPacket inside node i's namespace.
func (st *Star) ListenPacket(i int, network, addr string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := st.Do(i, func() (err error) {
		pc, err = net.ListenPacket(network, addr)
		return err
	})
	return pc, err
}

// DialContext is net.Dialer.DialContext from inside node i's namespace. Use
// IP literals: a name resolved in parallel would escape the namespace.
func (st *Star) DialContext(ctx context.Context, i int, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := st.Do(i, func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Dial is net.Dial from inside node i's namespace.
func (st *Star) Dial(i int, network, addr string) (net.Conn, error) {
	return st.DialContext(context.Background(), i, network, addr)
}

// Command returns an exec.Cmd running name inside node i's namespace.
func (st *Star) Command(i int, name string, args ...string) *exec.Cmd {
	ns := "invalid-node"
	if n, err := st.node(i); err == nil {
		ns = n.NS
	}
	return exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// Exec runs name inside node i's namespace and returns its combined output.
func (st *Star) Exec(i int, name string, args ...string) ([]byte, error) {
	out, err := st.Command(i, name, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s in node %d: %w", name, strings.Join(args, " "), i, err)
	}
	return out, nil
}

// DumpLogsOnFailure logs every endpoint log through t if the test failed,
// before Close removes them, whether Close runs from a defer or a cleanup.
func (st *Star) DumpLogsOnFailure(t TB) {
	t.Helper()
	var mu sync.Mutex
	dumped := false
	dump := func() {
		mu.Lock()
		defer mu.Unlock()
		if dumped || !t.Failed() {
			return
		}
		dumped = true
		for _, n := range st.Nodes {
			t.Logf("--- %s endpoint log (%s):\n%s", n.Name, n.LogFile, st.LogTail(n.Index, 200))
		}
	}
	st.mu.Lock()
	st.onClose = append(st.onClose, dump)
	st.mu.Unlock()
	t.Cleanup(dump)
}

// StarForTest builds a Star for a test: it fails the test if that is not
// possible, dumps the endpoint logs if the test fails and closes the Star
// when the test ends (also after a panic).
func StarForTest(t FatalTB, cfg StarConfig) *Star {
	t.Helper()
	st, err := NewStar(cfg)
	if err != nil {
		t.Fatalf("testbed: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("testbed close: %v", err)
		}
	})
	st.DumpLogsOnFailure(t)
	return st
}

// CloseOnSignal is Testbed.CloseOnSignal for a Star: it tears the topology
// down when the process receives one of sigs (default SIGINT, SIGTERM,
// SIGHUP), then calls onSignal or exits with 128+signal.
func (st *Star) CloseOnSignal(onSignal func(os.Signal), sigs ...os.Signal) (stop func()) {
	if len(sigs) == 0 {
		sigs = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	quit := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			st.log.Warn("signal: tearing the star down", "signal", sig)
			st.Close()
			if onSignal != nil {
				onSignal(sig)
				return
			}
			code := 1
			if s, ok := sig.(syscall.Signal); ok {
				code = 128 + int(s)
			}
			os.Exit(code)
		case <-quit:
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			signal.Stop(ch)
			close(quit)
		})
	}
}
