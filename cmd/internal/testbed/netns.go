package testbed

// This file owns the network namespaces of a testbed: creating and deleting
// named ones, running Go code inside them (sockets made there stay there),
// running commands inside them, and finding and killing whatever processes
// are left in them at teardown.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// netnsDir is where named namespaces are bind-mounted (as `ip netns` does).
const netnsDir = "/var/run/netns"

// createNamespace creates the named network namespace name. The creating
// OS thread is switched back, or discarded if that fails.
func createNamespace(name string) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("getting the current namespace: %w", err)
			return
		}
		defer orig.Close()
		h, err := netns.NewNamed(name) // unshares this thread into the new namespace
		if err == nil {
			h.Close()
		}
		if serr := netns.Set(orig); serr != nil {
			errc <- errors.Join(err, fmt.Errorf("returning to the original namespace: %w", serr))
			return // the thread stays locked and dies with the goroutine
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	if err := <-errc; err != nil {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

// deleteNamespace unmounts and removes a named namespace; the kernel frees
// it (and its interfaces) once no process or open handle uses it.
func deleteNamespace(name string) error {
	err := netns.DeleteNamed(name)
	if err != nil && (errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINVAL)) {
		if _, serr := os.Stat(filepath.Join(netnsDir, name)); os.IsNotExist(serr) {
			return nil
		}
		// EINVAL: not a mount point (half-created); just remove the file.
		return os.Remove(filepath.Join(netnsDir, name))
	}
	if err != nil {
		return fmt.Errorf("deleting namespace %s: %w", name, err)
	}
	return nil
}

// inNamespace runs fn on an OS thread switched into namespace name.
func inNamespace(name string, fn func() error) error {
	target, err := netns.GetFromName(name)
	if err != nil {
		return fmt.Errorf("opening namespace %s: %w", name, err)
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("getting the current namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("entering namespace %s: %w", name, err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("leaving namespace %s: %w", name, err))
			return // the thread stays locked and dies with the goroutine
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// netlinkIn returns a netlink handle working in namespace name.
func netlinkIn(name string) (*netlink.Handle, error) {
	ns, err := netns.GetFromName(name)
	if err != nil {
		return nil, fmt.Errorf("opening namespace %s: %w", name, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("netlink in namespace %s: %w", name, err)
	}
	return h, nil
}

// Do runs fn with the calling goroutine's work done inside side's namespace:
// sockets fn creates stay in that namespace after it returns. fn must not
// start goroutines that expect to be inside it.
func (tb *Testbed) Do(side Side, fn func() error) error {
	return inNamespace(tb.Site(side).NS, fn)
}

// Listen is net.Listen inside side's namespace.
func (tb *Testbed) Listen(side Side, network, addr string) (net.Listener, error) {
	return listenIn(tb.Site(side).NS, network, addr)
}

// ListenPacket is net.ListenPacket inside side's namespace.
func (tb *Testbed) ListenPacket(side Side, network, addr string) (net.PacketConn, error) {
	return listenPacketIn(tb.Site(side).NS, network, addr)
}

// Dial is net.Dial from inside side's namespace.
func (tb *Testbed) Dial(side Side, network, addr string) (net.Conn, error) {
	return tb.DialContext(context.Background(), side, network, addr)
}

// DialContext is net.Dialer.DialContext from inside side's namespace. Use
// IP literals: a name resolved in parallel would escape the namespace.
func (tb *Testbed) DialContext(ctx context.Context, side Side, network, addr string) (net.Conn, error) {
	return dialIn(ctx, tb.Site(side).NS, network, addr)
}

// Command returns an exec.Cmd that runs name inside side's namespace
// (through `ip netns exec`, which also gives it the namespace's /sys).
func (tb *Testbed) Command(side Side, name string, args ...string) *exec.Cmd {
	return commandIn(tb.Site(side).NS, name, args...)
}

// Exec runs name inside side's namespace and returns its combined output.
func (tb *Testbed) Exec(side Side, name string, args ...string) ([]byte, error) {
	return execCmd(tb.Command(side, name, args...), side.String(), name, args)
}

// listenIn is net.Listen inside namespace ns.
func listenIn(ns, network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := inNamespace(ns, func() (err error) {
		ln, err = net.Listen(network, addr)
		return err
	})
	return ln, err
}

// listenPacketIn is net.ListenPacket inside namespace ns.
func listenPacketIn(ns, network, addr string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := inNamespace(ns, func() (err error) {
		pc, err = net.ListenPacket(network, addr)
		return err
	})
	return pc, err
}

// dialIn is net.Dialer.DialContext from inside namespace ns.
func dialIn(ctx context.Context, ns, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := inNamespace(ns, func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// commandIn returns an exec.Cmd that runs name inside namespace ns.
func commandIn(ns, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// execCmd runs cmd (name args in where) and returns its combined output.
func execCmd(cmd *exec.Cmd, where, name string, args []string) ([]byte, error) {
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s in %s: %w", name, strings.Join(args, " "), where, err)
	}
	return out, nil
}

// nsInode returns the inode identifying a named namespace.
func nsInode(name string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(netnsDir, name), &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// pidsIn lists the processes whose network namespace is the named one.
func pidsIn(name string) []int {
	ino, err := nsInode(name)
	if err != nil {
		return nil
	}
	want := fmt.Sprintf("net:[%d]", ino)
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if link, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns/net")); err == nil && link == want {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killAllIn SIGKILLs every process left in the named namespace (all were
// started inside it by this testbed or its callers) and waits for them.
func killAllIn(name string) []int {
	pids := pidsIn(name)
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	for deadline := time.Now().Add(3 * time.Second); len(pidsIn(name)) > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	return pids
}
