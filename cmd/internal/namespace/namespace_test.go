package namespace

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"scpsvpn/cmd/internal/testenv"
)

// inode identifies a network namespace by the inode of a file that refers
// to it.
func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestLifecycle creates a namespace, runs code, a socket and a process in
// it, and checks that nothing leaks into or stays in the caller's.
func TestLifecycle(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces")
	name := fmt.Sprintf("nstest-%d", os.Getpid())
	if err := Create(name); err != nil {
		t.Fatal(err)
	}
	defer Delete(name)
	host := inode(t, "/proc/self/ns/net")

	var inside uint64
	if err := Do(name, func() error {
		inside = inode(t, fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if inside != inode(t, Path(name)) || inside == host {
		t.Errorf("Do ran in namespace %d; want %d (host %d)", inside, inode(t, Path(name)), host)
	}
	if inode(t, "/proc/self/ns/net") != host {
		t.Error("the process left the host namespace")
	}

	h, err := Netlink(name)
	if err != nil {
		t.Fatal(err)
	}
	links, err := h.LinkList()
	h.Close()
	if err != nil || len(links) != 1 || links[0].Attrs().Name != "lo" {
		t.Errorf("a new namespace holds only lo; got %d links, %v", len(links), err)
	}

	// A listener made inside is bound there: the port is free on the host.
	ln, err := Listen(name, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if hostLn, err := Listen("", "tcp", ln.Addr().String()); err != nil {
		t.Errorf("the port of a listener inside is taken on the host: %v", err)
	} else {
		hostLn.Close()
	}

	cmd := Command(name, "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	for range 200 { // `ip netns exec` enters, then execs sleep
		if slices.Contains(Pids(name), cmd.Process.Pid) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !slices.Contains(Pids(name), cmd.Process.Pid) {
		t.Fatalf("Pids(%s) = %v lacks %d", name, Pids(name), cmd.Process.Pid)
	}
	if killed := KillAll(name); !slices.Contains(killed, cmd.Process.Pid) || len(Pids(name)) != 0 {
		t.Errorf("KillAll killed %v, left %v", killed, Pids(name))
	}

	if err := Delete(name); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(Path(name)); !os.IsNotExist(err) {
		t.Errorf("namespace file still there: %v", err)
	}
	if err := Delete(name); err != nil {
		t.Errorf("deleting a namespace that is gone: %v", err)
	}
}
