package testbed

// This file owns a Star's endpoint processes and the per-node helpers tests
// use: starting a node's endpoint (with the two-site testbed's code, see
// proc.go), signalling it (SIGHUP reloads), stopping it, its log, running Go code and
// commands inside a node's namespace, and tying a Star to a test.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"

	"scpsvpn/cmd/internal/namespace"
)

func (st *Star) node(i int) (*Node, error) {
	if i < 0 || i >= len(st.Nodes) {
		return nil, fmt.Errorf("testbed: no node %d (0 is the hub, 1..%d the spokes)", i, len(st.Nodes)-1)
	}
	return st.Nodes[i], nil
}

// procSite describes node i's slot for the shared endpoint code.
func (st *Star) procSite(i int) procSite {
	s := procSite{ref: fmt.Sprintf("node %d", i), logKey: "node"}
	if n, err := st.node(i); err == nil {
		s.name, s.logVal, s.ns, s.tun, s.configFile, s.logFile = n.Name, n.Name, n.NS, n.TUNName, n.ConfigFile, n.LogFile
	}
	return s
}

// StartEndpoint starts node i's endpoint and returns once its TUN device is
// up in the node's namespace.
func (st *Star) StartEndpoint(i int) error {
	if _, err := st.node(i); err != nil {
		return err
	}
	if st.cfg.Binary == "" {
		return errors.New("testbed: no endpoint binary configured (StarConfig.Binary)")
	}
	return st.start(i, st.cfg.Binary)
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

// Signal sends sig to node i's endpoint without waiting (SIGHUP: reload
// the configuration file).
func (st *Star) Signal(i int, sig os.Signal) error { return st.signal(i, sig) }

// StopEndpoint sends sig to node i's endpoint and waits for it to exit;
// after StarConfig.StopTimeout it is killed and an error says so. The exit
// code follows the shell: 128+n when the process died of signal n.
func (st *Star) StopEndpoint(i int, sig os.Signal) (int, error) { return st.stop(i, sig) }

// PID returns node i's endpoint process id, 0 when it is not running.
func (st *Star) PID(i int) int { return st.pid(i) }

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
	return logTail(n.LogFile, lines)
}

// Do runs fn on a thread inside node i's namespace: sockets fn creates stay
// there after it returns. fn must not start goroutines that expect to be
// inside it.
func (st *Star) Do(i int, fn func() error) error {
	n, err := st.node(i)
	if err != nil {
		return err
	}
	return namespace.Do(n.NS, fn)
}

// nsOf returns node i's namespace.
func (st *Star) nsOf(i int) (string, error) {
	n, err := st.node(i)
	if err != nil {
		return "", err
	}
	return n.NS, nil
}

// Listen is net.Listen inside node i's namespace.
func (st *Star) Listen(i int, network, addr string) (net.Listener, error) {
	ns, err := st.nsOf(i)
	if err != nil {
		return nil, err
	}
	return namespace.Listen(ns, network, addr)
}

// ListenPacket is net.ListenPacket inside node i's namespace.
func (st *Star) ListenPacket(i int, network, addr string) (net.PacketConn, error) {
	ns, err := st.nsOf(i)
	if err != nil {
		return nil, err
	}
	return namespace.ListenPacket(ns, network, addr)
}

// DialContext is net.Dialer.DialContext from inside node i's namespace. Use
// IP literals: a name resolved in parallel would escape the namespace.
func (st *Star) DialContext(ctx context.Context, i int, network, addr string) (net.Conn, error) {
	ns, err := st.nsOf(i)
	if err != nil {
		return nil, err
	}
	return namespace.DialContext(ctx, ns, network, addr)
}

// Dial is net.Dial from inside node i's namespace.
func (st *Star) Dial(i int, network, addr string) (net.Conn, error) {
	return st.DialContext(context.Background(), i, network, addr)
}

// Command returns an exec.Cmd running name inside node i's namespace.
func (st *Star) Command(i int, name string, args ...string) *exec.Cmd {
	ns, err := st.nsOf(i)
	if err != nil {
		ns = "invalid-node"
	}
	return namespace.Command(ns, name, args...)
}

// Exec runs name inside node i's namespace and returns its combined output.
func (st *Star) Exec(i int, name string, args ...string) ([]byte, error) {
	return execCmd(st.Command(i, name, args...), fmt.Sprintf("node %d", i), name, args)
}

// DumpLogsOnFailure logs every endpoint log through t if the test failed,
// before Close removes them, whether Close runs from a defer or a cleanup.
func (st *Star) DumpLogsOnFailure(t TB) {
	t.Helper()
	st.dumpLogsOnFailure(t)
}

// StarForTest builds a Star for a test: it fails the test if that is not
// possible, dumps the endpoint logs if the test fails and closes the Star
// when the test ends (also after a panic).
func StarForTest(t FatalTB, cfg StarConfig) *Star {
	t.Helper()
	return forTest(t, func() (*Star, error) { return NewStar(cfg) })
}

// CloseOnSignal is Testbed.CloseOnSignal for a Star: it tears the topology
// down when the process receives one of sigs (default SIGINT, SIGTERM,
// SIGHUP), then calls onSignal or exits with 128+signal.
func (st *Star) CloseOnSignal(onSignal func(os.Signal), sigs ...os.Signal) (stop func()) {
	return closeOnSignal(st.log, "star", st.Close, onSignal, sigs)
}
