package tunnel

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestSendNowOnLinkARP: handshake answers to forged sources on our own
// link segment wait in the kernel's ARP queue, charged to the socket, for
// as long as resolution takes. SendNow keeps them to their share of the
// send buffer, so the association's own sends go on at once while the
// answers still wait (before, the answers filled the buffer and every send
// waited for ARP to give up).
func TestSendNowOnLinkARP(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true: the test needs root (a network namespace) and must not be skipped")
		}
		t.Skip("needs root (a network namespace)")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The thread goes back to the process's namespace before it is
		// unlocked. Left locked in the new one, it would end with this
		// goroutine, unless it is the process's main thread, which Go
		// never ends but parks: /proc/self/net (the main thread's) would
		// then show the new namespace to every later test in the
		// process (TestControlAbstractSocket listed no endpoint, once).
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Errorf("the process's namespace: %v", err)
			return
		}
		defer unix.Close(orig)
		// The kernel's neighbour statistics, which only the initial
		// namespace shows (nil elsewhere): opened here, read there.
		stat, _ := os.Open("/proc/thread-self/net/stat/arp_cache")
		if stat != nil {
			defer stat.Close()
		}
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		defer func() {
			if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
				t.Errorf("back to the process's namespace: %v", err)
				return // stays locked: the thread ends with the goroutine
			}
			runtime.UnlockOSThread()
		}()
		sendNowOnLink(t, stat)
	}()
	<-done
}

// neighTableFulls reads how often the kernel found its ARP table full
// (the last column of /proc/net/stat/arp_cache, one row a CPU): -1 if
// stat is nil or unreadable. The table (net.ipv4.neigh.default.gc_thresh3,
// 1024 entries) is shared by every namespace of the machine; when it is
// full the kernel drops a datagram to an unresolved address at once,
// and UDP's sendmsg reports no error, so nothing waits for ARP.
func neighTableFulls(stat *os.File) int64 {
	if stat == nil {
		return -1
	}
	if _, err := stat.Seek(0, io.SeekStart); err != nil {
		return -1
	}
	b, err := io.ReadAll(stat)
	if err != nil {
		return -1
	}
	var sum int64
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseInt(f[len(f)-1], 16, 64)
		if err != nil {
			return -1
		}
		sum += n
	}
	return sum
}

// sendNowOnLink runs in a fresh namespace: a veth pair whose far end
// answers no ARP, and loopback for the association's traffic. stat is
// the kernel's neighbour statistics (nil if unknown).
func sendNowOnLink(t *testing.T, stat *os.File) {
	const dev = "rq0"
	onLink := netip.MustParsePrefix("10.9.0.1/24")
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: dev}, PeerName: "rq1"}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Errorf("veth: %v", err)
		return
	}
	addr, _ := netlink.ParseAddr(onLink.String())
	for _, name := range []string{"lo", dev, "rq1"} {
		l, err := netlink.LinkByName(name)
		if err == nil && name == dev {
			err = netlink.AddrAdd(l, addr)
		}
		if err == nil {
			err = netlink.LinkSetUp(l)
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
	}
	// ARP gives up after about 10 s: the answers outlive the test's sends.
	if err := os.WriteFile("/proc/sys/net/ipv4/neigh/"+dev+"/mcast_solicit", []byte("10"), 0); err != nil {
		t.Errorf("mcast_solicit: %v", err)
		return
	}

	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4zero})
	if err != nil {
		t.Error(err)
		return
	}
	defer c.Close()
	// A small buffer (the kernel doubles it), so the flood is short.
	if err := c.SetWriteBuffer(128 << 10); err != nil {
		t.Error(err)
		return
	}
	s := newUDPSock(c)
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Error(err)
		return
	}
	defer rx.Close()
	setSocketBuffers(rx, slog.New(slog.DiscardHandler))
	queued := func() int {
		var n int
		rc, _ := c.SyscallConn()
		rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) })
		return n
	}

	// The flood's answers: cookie-reply sized, to unused addresses of
	// the link, again and again. Few addresses: each takes an entry of
	// the kernel's ARP table, which every namespace of the machine shares
	// (1024 entries) and which stays for as long as ARP tries (10 s here).
	// To all 253 addresses of the link, 40 a run (the answers' share),
	// -count=30 filled that table within ten seconds: later runs' answers
	// were dropped with no entry to wait on (nothing queued, nothing
	// refused), and another test's namespaces could have resolved no
	// neighbour meanwhile. Four addresses' queues (unres_qlen_bytes,
	// 208 KiB each) hold more than the whole socket buffer.
	reply := make([]byte, 64)
	var sent, busy, peak int
	flood := func() {
		sent, busy, peak = 0, 0, 0
		for i := range 4000 {
			to := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 9, 0, byte(2 + i%4)}), 51820)
			switch err := s.SendNow(reply, to); {
			case err == nil:
				sent++
			case errors.Is(err, ErrSocketBusy):
				busy++
			default:
				t.Errorf("SendNow to %v: %v", to, err)
				return
			}
			peak = max(peak, queued())
		}
	}
	// Another namespace's entries may fill the shared table (a handshake
	// flood from forged sources elsewhere on the machine): then the
	// answers had no entry to wait on. Tried again once the entries of
	// others had time to expire; the check below fails a third such run.
	var fulls int64
	for try := 1; ; try++ {
		before := neighTableFulls(stat)
		flood()
		if t.Failed() {
			return
		}
		fulls = neighTableFulls(stat) - before
		if busy > 0 || before < 0 || fulls == 0 || try == 3 {
			break
		}
		t.Logf("try %d: the kernel's ARP table was full %d times (another namespace's entries): %d answers taken, none waited; again in 10 s", try, fulls, sent)
		time.Sleep(10 * time.Second)
	}
	t.Logf("answers: %d taken, %d refused; socket buffer %d bytes, answers' share %d, peak queued %d; ARP table full %d times meanwhile (-1: unknown)",
		sent, busy, 2*128<<10, s.replyShare, peak, fulls)
	if busy == 0 || sent == 0 {
		t.Errorf("SendNow took %d and refused %d answers waiting for ARP: want both (the kernel's shared ARP table was full %d times meanwhile; -1: unknown)", sent, busy, fulls)
	}
	// One datagram's kernel accounting beyond the share at most.
	if peak > s.replyShare+2048 {
		t.Errorf("answers held %d bytes of the socket buffer, their share is %d", peak, s.replyShare)
	}

	// The association's own sends go out now, answers still waiting.
	pkt := make([]byte, 1400)
	to := rx.LocalAddr().(*net.UDPAddr).AddrPort()
	const n = 400 // more than the whole buffer holds: the kernel must free as it goes
	got := make(chan int, 1)
	go func() {
		buf := make([]byte, 2048)
		k := 0
		rx.SetReadDeadline(time.Now().Add(5 * time.Second))
		for k < n {
			if _, err := rx.Read(buf); err != nil {
				break
			}
			k++
		}
		got <- k
	}()
	for range n / 10 {
		if err := s.Send([][]byte{pkt, pkt, pkt, pkt, pkt, pkt, pkt, pkt, pkt, pkt}, to); err != nil {
			t.Errorf("Send: %v", err)
			return
		}
	}
	left := queued()
	if k := <-got; k < n*9/10 {
		t.Errorf("%d of %d datagrams arrived", k, n)
	}
	if left == 0 {
		t.Errorf("the answers were gone before the sends were done: the sends waited for ARP")
	}
}
