package testbed

// This file owns the two-site testbed's view of its namespaces: running Go
// code, sockets and commands inside a site's namespace (with the shared
// code in cmd/internal/namespace).

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"syscall"

	"scpsvpn/cmd/internal/namespace"
)

// Do runs fn with the calling goroutine's work done inside side's namespace:
// sockets fn creates stay in that namespace after it returns. fn must not
// start goroutines that expect to be inside it.
func (tb *Testbed) Do(side Side, fn func() error) error {
	return namespace.Do(tb.Site(side).NS, fn)
}

// Listen is net.Listen inside side's namespace.
func (tb *Testbed) Listen(side Side, network, addr string) (net.Listener, error) {
	return namespace.Listen(tb.Site(side).NS, network, addr)
}

// ListenPacket is net.ListenPacket inside side's namespace.
func (tb *Testbed) ListenPacket(side Side, network, addr string) (net.PacketConn, error) {
	return namespace.ListenPacket(tb.Site(side).NS, network, addr)
}

// Dial is net.Dial from inside side's namespace.
func (tb *Testbed) Dial(side Side, network, addr string) (net.Conn, error) {
	return tb.DialContext(context.Background(), side, network, addr)
}

// DialContext is net.Dialer.DialContext from inside side's namespace. Use
// IP literals: a name resolved in parallel would escape the namespace.
func (tb *Testbed) DialContext(ctx context.Context, side Side, network, addr string) (net.Conn, error) {
	return namespace.DialContext(ctx, tb.Site(side).NS, network, addr)
}

// Command returns an exec.Cmd that runs name inside side's namespace
// (through `ip netns exec`, which also gives it the namespace's /sys).
func (tb *Testbed) Command(side Side, name string, args ...string) *exec.Cmd {
	return namespace.Command(tb.Site(side).NS, name, args...)
}

// Start starts cmd (from Command) so that it never outlives this
// process: it gets SIGKILL when the process dies, as the endpoints do,
// even when a test's cleanup never ran (a timeout, a kill). For servers
// and other programs that do not end by themselves; the caller still
// stops and waits for it.
func (tb *Testbed) Start(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	return spawn(cmd)
}

// Exec runs name inside side's namespace and returns its combined output.
func (tb *Testbed) Exec(side Side, name string, args ...string) ([]byte, error) {
	return execCmd(tb.Command(side, name, args...), side.String(), name, args)
}

// execCmd runs cmd (name args in where) and returns its combined output.
func execCmd(cmd *exec.Cmd, where, name string, args []string) ([]byte, error) {
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s in %s: %w", name, strings.Join(args, " "), where, err)
	}
	return out, nil
}
