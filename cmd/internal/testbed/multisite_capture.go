package testbed

// This file owns what the security tests need beyond sockets: a capture of
// the UDP datagrams crossing one device in a namespace (an AF_PACKET socket,
// both directions, GSO super-packets split into their datagrams, with the
// kernel's drop count so "nothing was seen" can be trusted), the decoder of
// those packets, and a sender of hand-built IPv4
// UDP packets through a raw socket, so a test can replay captured datagrams
// from the very address and port of a running endpoint, which an ordinary
// socket could not bind.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"scpsvpn/cmd/internal/namespace"

	"golang.org/x/sys/unix"
)

// UDPPacket is one UDP datagram seen on a captured device.
type UDPPacket struct {
	Time     time.Time
	Outgoing bool // sent from the capturing namespace; false: received by it
	Src, Dst netip.AddrPort
	Payload  []byte
}

// ParseUDP decodes an IPv4 or IPv6 packet carrying a UDP datagram. IPv4
// fragments, IPv6 extension headers and anything inconsistent (lengths,
// versions) are rejected with ok false; it never panics on any input.
func ParseUDP(pkt []byte) (src, dst netip.AddrPort, payload []byte, ok bool) {
	if len(pkt) < 1 {
		return src, dst, nil, false
	}
	var udp []byte
	var sa, da netip.Addr
	switch pkt[0] >> 4 {
	case 4:
		if len(pkt) < 20 {
			return src, dst, nil, false
		}
		ihl := int(pkt[0]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(pkt[2:4]))
		if ihl < 20 || total < ihl || total > len(pkt) {
			return src, dst, nil, false
		}
		if pkt[9] != unix.IPPROTO_UDP || binary.BigEndian.Uint16(pkt[6:8])&0x3fff != 0 { // MF or an offset
			return src, dst, nil, false
		}
		sa, da = netip.AddrFrom4([4]byte(pkt[12:16])), netip.AddrFrom4([4]byte(pkt[16:20]))
		udp = pkt[ihl:total]
	case 6:
		if len(pkt) < 40 {
			return src, dst, nil, false
		}
		plen := int(binary.BigEndian.Uint16(pkt[4:6]))
		if pkt[6] != unix.IPPROTO_UDP || 40+plen > len(pkt) {
			return src, dst, nil, false
		}
		sa, da = netip.AddrFrom16([16]byte(pkt[8:24])), netip.AddrFrom16([16]byte(pkt[24:40]))
		udp = pkt[40 : 40+plen]
	default:
		return src, dst, nil, false
	}
	if len(udp) < 8 {
		return src, dst, nil, false
	}
	ulen := int(binary.BigEndian.Uint16(udp[4:6]))
	if ulen < 8 || ulen > len(udp) {
		return src, dst, nil, false
	}
	src = netip.AddrPortFrom(sa, binary.BigEndian.Uint16(udp[0:2]))
	dst = netip.AddrPortFrom(da, binary.BigEndian.Uint16(udp[2:4]))
	return src, dst, udp[8:ulen], true
}

// vnetHdrLen is the struct virtio_net_hdr the kernel puts in front of each
// captured packet (PACKET_VNET_HDR): flags, gso_type, hdr_len, gso_size,
// csum_start, csum_offset.
const vnetHdrLen = 10

// virtio_net_hdr GSO types.
const (
	vnetGSONone  = 0
	vnetGSOUDPL4 = 5
	vnetGSOECN   = 0x80
)

// ParseCaptured decodes what a PACKET_VNET_HDR capture socket returns: a
// virtio_net_hdr, linkLen bytes of link-layer header (14 on Ethernet and
// veth, 0 on a TUN), then an IP packet carrying UDP. A sender's UDP GSO
// super-packet (one buffer, many datagrams of gso_size bytes, which a veth
// passes on unsegmented) is split back into the datagrams the wire would
// carry. Anything else is rejected with ok false; it never panics.
func ParseCaptured(b []byte, linkLen int) (src, dst netip.AddrPort, datagrams [][]byte, ok bool) {
	if linkLen < 0 || len(b) < vnetHdrLen+linkLen {
		return src, dst, nil, false
	}
	gsoType := b[1] &^ vnetGSOECN
	gsoSize := int(binary.LittleEndian.Uint16(b[4:6])) // virtio 1.0: little endian
	src, dst, payload, ok := ParseUDP(b[vnetHdrLen+linkLen:])
	if !ok {
		return src, dst, nil, false
	}
	switch {
	case gsoType == vnetGSONone:
		return src, dst, [][]byte{payload}, true
	case gsoType == vnetGSOUDPL4 && gsoSize > 0:
		for len(payload) > gsoSize {
			datagrams = append(datagrams, payload[:gsoSize])
			payload = payload[gsoSize:]
		}
		return src, dst, append(datagrams, payload), true
	default: // TCP segmentation offload and the like: not ours
		return src, dst, nil, false
	}
}

// maxCaptured bounds a capture's memory; later packets are counted only.
const maxCaptured = 200_000

// Capture records the UDP packets crossing one network device. Close it.
type Capture struct {
	fd      int
	ifindex int
	stop    atomic.Bool
	done    chan struct{}

	mu       sync.Mutex
	pkts     []UDPPacket
	overflow int    // packets beyond maxCaptured
	kdrops   uint64 // packets the kernel dropped before we read them
	err      error
}

// StartCapture starts capturing the UDP packets that dev in namespace ns
// sends and receives.
func StartCapture(ns, dev string) (*Capture, error) {
	h, err := namespace.Netlink(ns)
	if err != nil {
		return nil, err
	}
	link, err := h.LinkByName(dev)
	h.Close()
	if err != nil {
		return nil, fmt.Errorf("capture: finding %s in %s: %w", dev, ns, err)
	}
	c := &Capture{fd: -1, ifindex: link.Attrs().Index, done: make(chan struct{})}
	err = namespace.Do(ns, func() error {
		// Protocol 0 at creation: the socket sees nothing until it is
		// bound to the one device, so no other device's packet slips in.
		// SOCK_RAW (with the link header) because only raw packet sockets
		// take PACKET_VNET_HDR.
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("capture: AF_PACKET socket (needs root): %w", err)
		}
		c.fd = fd
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
		// The GSO segment size of each packet: senders hand the kernel
		// super-packets of many datagrams, and a veth never splits them.
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
			return fmt.Errorf("capture: PACKET_VNET_HDR: %w", err)
		}
		// A short receive timeout lets the reader notice Close.
		tv := unix.NsecToTimeval((50 * time.Millisecond).Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return fmt.Errorf("capture: receive timeout: %w", err)
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: c.ifindex})
	})
	if err != nil {
		if c.fd >= 0 {
			unix.Close(c.fd)
		}
		return nil, fmt.Errorf("capture on %s in %s: %w", dev, ns, err)
	}
	go c.read()
	return c, nil
}

// Capture captures on device dev of node i.
func (st *Star) Capture(i int, dev string) (*Capture, error) {
	n, err := st.node(i)
	if err != nil {
		return nil, err
	}
	return StartCapture(n.NS, dev)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (c *Capture) read() {
	defer close(c.done)
	buf := make([]byte, 65536)
	for !c.stop.Load() {
		n, from, err := unix.Recvfrom(c.fd, buf, unix.MSG_TRUNC)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			c.mu.Lock()
			c.err = fmt.Errorf("capture: read: %w", err)
			c.mu.Unlock()
			return
		}
		now := time.Now()
		ll, ok := from.(*unix.SockaddrLinklayer)
		if !ok || ll.Ifindex != c.ifindex || n > len(buf) {
			continue
		}
		var linkLen int
		switch ll.Hatype {
		case unix.ARPHRD_ETHER:
			linkLen = 14
			if n < vnetHdrLen+linkLen || binary.BigEndian.Uint16(buf[vnetHdrLen+12:]) != unix.ETH_P_IP && binary.BigEndian.Uint16(buf[vnetHdrLen+12:]) != unix.ETH_P_IPV6 {
				continue // ARP, VLAN tags: not ours
			}
		case unix.ARPHRD_NONE:
		default:
			continue
		}
		src, dst, datagrams, ok := ParseCaptured(buf[:n], linkLen)
		if !ok {
			continue
		}
		c.mu.Lock()
		for _, d := range datagrams {
			if len(c.pkts) >= maxCaptured {
				c.overflow++
				continue
			}
			c.pkts = append(c.pkts, UDPPacket{Time: now, Outgoing: ll.Pkttype == unix.PACKET_OUTGOING,
				Src: src, Dst: dst, Payload: append([]byte(nil), d...)})
		}
		c.mu.Unlock()
	}
}

// Packets returns a copy of what was captured so far, in arrival order.
func (c *Capture) Packets() []UDPPacket {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]UDPPacket(nil), c.pkts...)
}

// Select returns the captured packets for which keep is true.
func (c *Capture) Select(keep func(UDPPacket) bool) []UDPPacket {
	var out []UDPPacket
	for _, p := range c.Packets() {
		if keep(p) {
			out = append(out, p)
		}
	}
	return out
}

// Lost reports packets the capture missed: dropped by the kernel because
// the reader fell behind, or beyond its memory bound. A test concluding
// that something was never sent needs Lost() == 0.
func (c *Capture) Lost() (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.done:
	default:
		// PACKET_STATISTICS resets on each read: accumulate.
		if s, err := unix.GetsockoptTpacketStats(c.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
			c.kdrops += uint64(s.Drops)
		}
	}
	return c.kdrops + uint64(c.overflow), c.err
}

// Close stops the capture; Packets stays usable. It returns a read error
// the capture met, if any.
func (c *Capture) Close() error {
	if c.stop.Swap(true) {
		<-c.done
		return nil
	}
	<-c.done
	c.mu.Lock()
	if s, err := unix.GetsockoptTpacketStats(c.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
		c.kdrops += uint64(s.Drops)
	}
	err := c.err
	c.mu.Unlock()
	unix.Close(c.fd)
	return err
}

// BuildUDP4 returns an IPv4 packet carrying payload from src to dst with
// valid IP and UDP checksums.
func BuildUDP4(src, dst netip.AddrPort, payload []byte, id uint16) ([]byte, error) {
	if !src.Addr().Is4() || !dst.Addr().Is4() {
		return nil, fmt.Errorf("BuildUDP4: %v -> %v: IPv4 addresses only", src, dst)
	}
	total := 20 + 8 + len(payload)
	if total > 0xffff {
		return nil, fmt.Errorf("BuildUDP4: payload of %d bytes is too large", len(payload))
	}
	p := make([]byte, total)
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:4], uint16(total))
	binary.BigEndian.PutUint16(p[4:6], id)
	binary.BigEndian.PutUint16(p[6:8], 0x4000) // DF
	p[8] = 64
	p[9] = unix.IPPROTO_UDP
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	copy(p[12:16], s4[:])
	copy(p[16:20], d4[:])
	binary.BigEndian.PutUint16(p[10:12], ^onesSum(0, p[:20]))
	u := p[20:]
	binary.BigEndian.PutUint16(u[0:2], src.Port())
	binary.BigEndian.PutUint16(u[2:4], dst.Port())
	binary.BigEndian.PutUint16(u[4:6], uint16(8+len(payload)))
	copy(u[8:], payload)
	// Pseudo-header: addresses, protocol, UDP length.
	var ph [12]byte
	copy(ph[0:4], s4[:])
	copy(ph[4:8], d4[:])
	ph[9] = unix.IPPROTO_UDP
	binary.BigEndian.PutUint16(ph[10:12], uint16(8+len(payload)))
	sum := ^onesSum(onesSum(0, ph[:]), u)
	if sum == 0 {
		sum = 0xffff // 0 means "no checksum" in UDP over IPv4
	}
	binary.BigEndian.PutUint16(u[6:8], sum)
	return p, nil
}

// onesSum adds b to the 16-bit ones' complement sum acc.
func onesSum(acc uint16, b []byte) uint16 {
	s := uint32(acc)
	for len(b) >= 2 {
		s += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// SendUDPRaw sends each payload as one IPv4 UDP datagram from src to dst
// through a raw socket (IP_HDRINCL) made inside namespace ns. src may be
// the address and port of a socket already bound there.
func SendUDPRaw(ns string, src, dst netip.AddrPort, payloads [][]byte) error {
	var fd int
	err := namespace.Do(ns, func() (err error) {
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
		return err
	})
	if err != nil {
		return fmt.Errorf("raw socket in %s (needs root): %w", ns, err)
	}
	defer unix.Close(fd)
	to := &unix.SockaddrInet4{Addr: dst.Addr().As4()}
	for i, pl := range payloads {
		pkt, err := BuildUDP4(src, dst, pl, uint16(i+1))
		if err != nil {
			return err
		}
		if err := unix.Sendto(fd, pkt, 0, to); err != nil {
			return fmt.Errorf("raw send %d of %d (%d bytes) %v -> %v: %w", i+1, len(payloads), len(pkt), src, dst, err)
		}
	}
	return nil
}

// SendUDPRaw is SendUDPRaw from inside node i's namespace.
func (st *Star) SendUDPRaw(i int, src, dst netip.AddrPort, payloads [][]byte) error {
	n, err := st.node(i)
	if err != nil {
		return err
	}
	return SendUDPRaw(n.NS, src, dst, payloads)
}
