package tunnel

// Batched UDP for the association socket: sendmmsg of UDP GSO super-packets
// (a run of equal-size datagrams to one peer becomes one kernel send) and
// recvmmsg with UDP GRO (the kernel hands over runs of datagrams from one
// sender as one buffer with its segment size). Syscalls were the largest
// single cost of an unthrottled transfer; this cuts their number by the
// batch size. Kernels or devices without GSO fall back to plain sendmmsg.

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"scpsvpn/configs"
)

const (
	// gsoMaxSegments bounds one GSO send: the kernel takes at most 64, and
	// the whole super-packet must fit in 64 KiB.
	gsoMaxSegments = 64
	gsoMaxBytes    = 65000
)

var gsoOOBLen = unix.CmsgSpace(2)

// udpBatch is how many datagrams one recvmmsg moves.
const udpBatch = 64

// replyShareDiv sets the part of the socket's send buffer that datagrams
// sent with SendNow (handshake answers) may find in use: an eighth. A
// reply to a forged address on our own link segment waits in the kernel's
// ARP queue for about 3 s, charged to this socket all the while; unbounded,
// a flood of those filled the whole buffer and the association's own
// sends waited for seconds.
const replyShareDiv = 8

// udpSock is the association socket with its offload state: the real
// PacketConn.
type udpSock struct {
	conn  *net.UDPConn
	rc    syscall.RawConn
	pc    *ipv4.PacketConn
	gso   atomic.Bool // UDP_SEGMENT works
	gro   bool        // UDP_GRO enabled on receive
	is6   bool
	local netip.AddrPort
	// replyShare: SendNow sends only while the socket's queued bytes
	// (kernel accounting, SIOCOUTQ) stay below it.
	replyShare int

	rx      *udpReceiver // the one reader's, made on its first Receive
	stamps  bool         // the kernel timestamps received datagrams (SO_TIMESTAMPNS)
	senders sync.Pool    // *udpSender: scratch space for concurrent Sends
}

// listenUDP opens the association socket on addr.
func listenUDP(addr netip.AddrPort, log *slog.Logger) (*udpSock, error) {
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return nil, fmt.Errorf("interface.listen %s: %w", addr, err)
	}
	setSocketBuffers(c, log)
	return newUDPSock(c), nil
}

// setSocketBuffers asks for large socket buffers: a burst of a satellite
// window arriving at once must not overflow the receive queue. The FORCE
// variants pass the sysctl caps with CAP_NET_ADMIN (which the service has);
// without it the buffers stay at net.core.rmem_max / wmem_max, and the log
// says so once.
func setSocketBuffers(c *net.UDPConn, log *slog.Logger) {
	const size = 8 << 20
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		for _, opt := range [][2]int{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}} {
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, opt[0], size) == nil {
				continue
			}
			if err := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, opt[1], size); err != nil {
				log.Debug("socket buffer", "err", err)
			}
			// The kernel reports twice what it grants (bookkeeping).
			if got, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, opt[1]); err == nil && got/2 < size {
				log.Warn("UDP socket buffer capped by the sysctl (no CAP_NET_ADMIN?): bursts may overflow it",
					"option", map[int]string{unix.SO_RCVBUF: "SO_RCVBUF", unix.SO_SNDBUF: "SO_SNDBUF"}[opt[1]],
					"bytes", got/2, "want", size)
			}
		}
	})
}

func newUDPSock(c *net.UDPConn) *udpSock {
	s := &udpSock{conn: c, pc: ipv4.NewPacketConn(c)}
	s.senders.New = func() any { return s.sender() }
	s.local = c.LocalAddr().(*net.UDPAddr).AddrPort()
	s.is6 = s.local.Addr().Is6() && !s.local.Addr().Is4In6()
	s.replyShare = 64 << 10
	if rc, err := c.SyscallConn(); err == nil {
		s.rc = rc
		_ = rc.Control(func(fd uintptr) {
			if _, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT); err == nil {
				s.gso.Store(true)
			}
			s.gro = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO, 1) == nil
			s.stamps = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1) == nil
			// The kernel reports the buffer as it accounts it (twice what
			// was asked), in the units SIOCOUTQ counts.
			if n, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF); err == nil && n > 0 {
				s.replyShare = n / replyShareDiv
			}
		})
	}
	return s
}

// SendNow sends one datagram without waiting, for handshake answers: if
// the socket already holds its share for them (see replyShareDiv) or
// cannot take the datagram at once, the datagram is dropped and
// ErrSocketBusy returned. So answers, whatever their fate in the kernel,
// never keep the association's own packets waiting.
func (s *udpSock) SendNow(b []byte, to netip.AddrPort) error {
	sa, err := s.sockaddr(to)
	if err != nil {
		return err
	}
	if s.rc == nil {
		return ErrSocketBusy
	}
	cerr := s.rc.Write(func(fd uintptr) bool {
		queued, qerr := unix.IoctlGetInt(int(fd), unix.SIOCOUTQ)
		if qerr == nil && queued+len(b) > s.replyShare {
			err = ErrSocketBusy
			return true
		}
		err = unix.Sendto(int(fd), b, unix.MSG_DONTWAIT, sa)
		return true // never wait for the socket to become writable
	})
	if cerr != nil {
		return cerr
	}
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.ENOBUFS) {
		return ErrSocketBusy
	}
	return err
}

// sockaddr is to in the socket's address family.
func (s *udpSock) sockaddr(to netip.AddrPort) (unix.Sockaddr, error) {
	a := to.Addr()
	if s.is6 {
		return &unix.SockaddrInet6{Addr: a.As16(), Port: int(to.Port())}, nil
	}
	if a = a.Unmap(); !a.Is4() {
		return nil, fmt.Errorf("send to %v from an IPv4 socket", to)
	}
	return &unix.SockaddrInet4{Addr: a.As4(), Port: int(to.Port())}, nil
}

// Receive reads one batch (recvmmsg), splitting GRO super-packets.
func (s *udpSock) Receive(f func(src netip.AddrPort, pkt []byte)) error {
	if s.rx == nil {
		s.rx = s.receiver(udpBatch)
	}
	return s.rx.read(f)
}

// Send sends with a pooled sender: its scratch space is reused without a
// lock, whichever goroutine sends (one per association, and handshakes).
func (s *udpSock) Send(pkts [][]byte, to netip.AddrPort) error {
	u := s.senders.Get().(*udpSender)
	err := u.send(pkts, to)
	s.senders.Put(u)
	return err
}

func (s *udpSock) LocalAddr() netip.AddrPort { return s.local }

func (s *udpSock) Close() error { return s.conn.Close() }

// udpSender is one sending goroutine's scratch space (no allocation per
// batch).
type udpSender struct {
	s    *udpSock
	msgs []ipv4.Message
	oobs [][]byte
	addr *net.UDPAddr
	to   netip.AddrPort
}

func (s *udpSock) sender() *udpSender { return &udpSender{s: s} }

func (u *udpSender) message(i int) *ipv4.Message {
	for len(u.msgs) <= i {
		u.msgs = append(u.msgs, ipv4.Message{})
		u.oobs = append(u.oobs, make([]byte, gsoOOBLen))
	}
	return &u.msgs[i]
}

// send sends the datagrams to one destination.
func (u *udpSender) send(pkts [][]byte, to netip.AddrPort) error {
	if u.s.is6 && to.Addr().Is4() {
		// x/net marshals an IPv4 destination as AF_INET, which a
		// dual-stack IPv6 socket refuses; the net package maps it.
		for _, p := range pkts {
			if _, err := u.s.conn.WriteToUDPAddrPort(p, netip.AddrPortFrom(netip.AddrFrom16(to.Addr().As16()), to.Port())); err != nil {
				return err
			}
		}
		return nil
	}
	if u.to != to {
		u.to, u.addr = to, net.UDPAddrFromAddrPort(to)
	}
	gso := u.s.gso.Load()
	n := 0
	for i := 0; i < len(pkts); {
		size := len(pkts[i])
		j, total := i+1, size
		if gso {
			// A run of equal sizes; one shorter datagram may end it.
			for j < len(pkts) && j-i < gsoMaxSegments && total+len(pkts[j]) <= gsoMaxBytes && len(pkts[j]) <= size {
				total += len(pkts[j])
				j++
				if len(pkts[j-1]) < size {
					break
				}
			}
		}
		m := u.message(n)
		m.Buffers, m.Addr, m.OOB = pkts[i:j], u.addr, nil
		if j-i > 1 {
			m.OOB = u.oobs[n]
			putSegmentSize(m.OOB, size)
		}
		n++
		i = j
	}
	err := u.writeAll(u.msgs[:n])
	if err != nil && gso && errors.Is(err, syscall.EIO) {
		// No checksum offload on the way out: GSO cannot work here.
		u.s.gso.Store(false)
		return u.send(pkts, to)
	}
	return err
}

func (u *udpSender) writeAll(msgs []ipv4.Message) error {
	for len(msgs) > 0 {
		n, err := u.s.pc.WriteBatch(msgs, 0)
		if err != nil {
			return err
		}
		msgs = msgs[n:]
	}
	return nil
}

func putSegmentSize(oob []byte, size int) {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], uint16(size))
}

// segmentSize returns the GRO segment size a received message carries, or
// 0 when it is one datagram.
func segmentSize(oob []byte) int {
	for len(oob) >= unix.CmsgLen(0) {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < unix.CmsgLen(0) || l > len(oob) {
			return 0
		}
		if h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO && l >= unix.CmsgLen(2) {
			d := oob[unix.CmsgLen(0):l]
			if len(d) >= 4 {
				return int(binary.NativeEndian.Uint32(d))
			}
			return int(binary.NativeEndian.Uint16(d))
		}
		oob = oob[unix.CmsgSpace(l-unix.CmsgLen(0)):]
	}
	return 0
}

// Arrived implements arrivalTimer: the kernel's receive timestamp of the
// datagram being handed to Receive's callback, zero if unknown.
func (s *udpSock) Arrived() time.Time {
	if s.rx == nil {
		return time.Time{}
	}
	return s.rx.at
}

// receiver reads batches of datagrams, splitting GRO super-packets.
type udpReceiver struct {
	s    *udpSock
	msgs []ipv4.Message
	at   time.Time // the current datagram's arrival (Arrived)
}

// receiveTime returns when the kernel took in a message whose control
// data is oob (SCM_TIMESTAMPNS), on the monotonic clock of now; zero
// when oob carries none or it is not before now. The kernel stamps with
// the wall clock; the age it gives is carried over to now.
func receiveTime(oob []byte, now time.Time) time.Time {
	for len(oob) >= unix.CmsgLen(0) {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < unix.CmsgLen(0) || l > len(oob) {
			return time.Time{}
		}
		if h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS && l >= unix.CmsgLen(int(unsafe.Sizeof(unix.Timespec{}))) {
			t := (*unix.Timespec)(unsafe.Pointer(&oob[unix.CmsgLen(0)]))
			ts := time.Unix(t.Unix())
			if age := now.Sub(ts); age >= 0 {
				return now.Add(-age)
			}
			return time.Time{}
		}
		oob = oob[unix.CmsgSpace(l-unix.CmsgLen(0)):]
	}
	return time.Time{}
}

func (s *udpSock) receiver(batch int) *udpReceiver {
	r := &udpReceiver{s: s, msgs: make([]ipv4.Message, batch)}
	for i := range r.msgs {
		r.msgs[i].Buffers = [][]byte{make([]byte, 65535)}
		r.msgs[i].OOB = make([]byte, 128) // UDP_GRO and SCM_TIMESTAMPNS
	}
	return r
}

// read waits for datagrams and calls f for each, with its source.
func (r *udpReceiver) read(f func(src netip.AddrPort, pkt []byte)) error {
	for i := range r.msgs {
		r.msgs[i].OOB = r.msgs[i].OOB[:cap(r.msgs[i].OOB)]
	}
	n, err := r.s.pc.ReadBatch(r.msgs, 0)
	if err != nil {
		return err
	}
	now := time.Now()
	defer func() { r.at = time.Time{} }()
	for i := 0; i < n; i++ {
		m := &r.msgs[i]
		ua, ok := m.Addr.(*net.UDPAddr)
		if !ok {
			continue
		}
		src := ua.AddrPort()
		src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
		data := m.Buffers[0][:m.N]
		r.at = time.Time{}
		if r.s.stamps {
			r.at = receiveTime(m.OOB[:m.NN], now)
		}
		seg := 0
		if r.s.gro {
			seg = segmentSize(m.OOB[:m.NN])
		}
		if seg <= 0 || seg >= len(data) {
			f(src, data)
			continue
		}
		for len(data) > 0 {
			k := min(seg, len(data))
			f(src, data[:k])
			data = data[k:]
		}
	}
	return nil
}

// openPathSock opens the socket of a peer's configured path: bound to the
// path's local address, or to its interface (SO_BINDTODEVICE), on a port
// the kernel picks, so it runs beside the listen socket.
func openPathSock(pc configs.PathConfig, log *slog.Logger) (*udpSock, error) {
	local := netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
	if pc.Endpoint.Addr().Unmap().Is6() && !pc.Endpoint.Addr().Is4In6() {
		local = netip.AddrPortFrom(netip.IPv6Unspecified(), 0)
	}
	if pc.Local.IsValid() {
		local = netip.AddrPortFrom(pc.Local, 0)
	}
	lc := net.ListenConfig{}
	if pc.LocalDevice != "" {
		lc.Control = func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) {
				serr = unix.BindToDevice(int(fd), pc.LocalDevice)
			}); err != nil {
				return err
			}
			return serr
		}
	}
	c, err := lc.ListenPacket(context.Background(), "udp", local.String())
	if err != nil {
		return nil, fmt.Errorf("path %s: local %s: %w", pc.Name, cmp.Or(pc.LocalDevice, local.String()), err)
	}
	uc := c.(*net.UDPConn)
	setSocketBuffers(uc, log)
	return newUDPSock(uc), nil
}
