// Package namespace works with named network namespaces: creating and
// deleting them the way `ip netns` does (bind-mounted under /var/run/netns),
// running Go code on an OS thread switched into one (sockets and TUN devices
// made there stay there), netlink handles and commands inside one, and
// finding the processes left in one. The test bed and the link emulator
// share it; everything here needs root.
package namespace

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

// Dir is where named namespaces are bind-mounted (as `ip netns` does).
const Dir = "/var/run/netns"

// Path maps a namespace name to its bind-mount path; a path is kept.
func Path(ns string) string {
	if strings.Contains(ns, "/") {
		return ns
	}
	return filepath.Join(Dir, ns)
}

// Create creates the named network namespace. The creating OS thread is
// switched back, or discarded if that fails.
func Create(name string) error {
	err := onLockedThread(func() error {
		h, err := netns.NewNamed(name) // unshares this thread into the new namespace
		if err == nil {
			h.Close()
		}
		return err
	}, nil, "")
	if err != nil {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

// Delete unmounts and removes a named namespace; the kernel frees it (and
// its interfaces) once no process or open handle uses it. A namespace that
// is already gone is no error.
func Delete(name string) error {
	err := netns.DeleteNamed(name)
	if err != nil && (errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINVAL)) {
		if _, serr := os.Stat(Path(name)); os.IsNotExist(serr) {
			return nil
		}
		// EINVAL: not a mount point (half-created); just remove the file.
		return os.Remove(Path(name))
	}
	if err != nil {
		return fmt.Errorf("deleting namespace %s: %w", name, err)
	}
	return nil
}

// Do runs fn on an OS thread switched into namespace ns (a name or a path;
// "" = the current namespace). fn must not start goroutines that expect to
// be inside it. The thread is discarded if it cannot be switched back, so no
// goroutine ever runs in the wrong namespace by accident.
func Do(ns string, fn func() error) error {
	if ns == "" {
		return fn()
	}
	target, err := netns.GetFromPath(Path(ns))
	if err != nil {
		return fmt.Errorf("opening namespace %s: %w", ns, err)
	}
	defer target.Close()
	return onLockedThread(fn, &target, ns)
}

// onLockedThread runs fn on a locked OS thread, first switched into target
// if it is set, and switches the thread back to its original namespace
// afterwards (fn may itself switch it, as netns.NewNamed does). If that
// fails the thread stays locked and dies with its goroutine.
func onLockedThread(fn func() error, target *netns.NsHandle, name string) error {
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
		if target != nil {
			if err := netns.Set(*target); err != nil {
				runtime.UnlockOSThread()
				errc <- fmt.Errorf("entering namespace %s: %w", name, err)
				return
			}
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("returning to the original namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Netlink returns a netlink handle working in namespace ns ("" = the
// current one). The caller closes it.
func Netlink(ns string) (*netlink.Handle, error) {
	if ns == "" {
		return netlink.NewHandle()
	}
	h, err := netns.GetFromPath(Path(ns))
	if err != nil {
		return nil, fmt.Errorf("opening namespace %s: %w", ns, err)
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		return nil, fmt.Errorf("netlink in namespace %s: %w", ns, err)
	}
	return nh, nil
}

// Listen is net.Listen inside namespace ns.
func Listen(ns, network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := Do(ns, func() (err error) {
		ln, err = net.Listen(network, addr)
		return err
	})
	return ln, err
}

// ListenPacket is net.ListenPacket inside namespace ns.
func ListenPacket(ns, network, addr string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := Do(ns, func() (err error) {
		pc, err = net.ListenPacket(network, addr)
		return err
	})
	return pc, err
}

// DialContext is net.Dialer.DialContext from inside namespace ns. Use IP
// literals: a name resolved in parallel would escape the namespace.
func DialContext(ctx context.Context, ns, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := Do(ns, func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Command returns an exec.Cmd that runs name inside the named namespace
// (through `ip netns exec`, which also gives it the namespace's /sys).
func Command(ns, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// Pids lists the processes (other than this one) whose network namespace
// is the named one.
func Pids(name string) []int {
	var st unix.Stat_t
	if err := unix.Stat(Path(name), &st); err != nil {
		return nil
	}
	want := fmt.Sprintf("net:[%d]", st.Ino)
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

// KillAll SIGKILLs every process left in the named namespace and waits up
// to 3 s for them to go. Only for namespaces the caller made: whatever runs
// there was started by it.
func KillAll(name string) []int {
	pids := Pids(name)
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	for deadline := time.Now().Add(3 * time.Second); len(Pids(name)) > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	return pids
}
